# SPDX-License-Identifier: MIT
"""End to end (root, real BPF): a stripped Go program named from its .gopclntab.

tests/workloads/go/gospin.go, built with -ldflags=-s -w and then objcopy --strip-all (no
.symtab, no DWARF, no unwind tables: the unwinder walks it by frame pointer, which Go keeps on
amd64), spins for a few seconds in main.main → main.spin → main.work, where main.mix is
inlined into main.work and main.fib is called from it. The store must show:
  - the chain main.work, main.spin, main.main, runtime.main in nearly every sample of the
    program's main goroutine, named although the file has no symbols at all;
  - source files (gospin.go for main.*, the Go runtime's proc.go for runtime.main) and the
    exact call lines of the callers, taken from the MARK: comments of the source;
  - the inlined main.mix as its own line above main.work in the same frame;
  - the Go build ID of the file, as `go tool buildid` prints it.
"""
import signal
import subprocess
from shutil import which

import pytest

from conftest import NATIVE, REPO, WORKLOADS, frame_ids, need_root, run_until_sampled, running_profiler, stacks_query
from waiting import wait_until

GOSPIN = WORKLOADS / "gospin"
SOURCE = REPO / "tests" / "workloads" / "go" / "gospin.go"
SAMPLES = 400       # the program runs until the store holds this many of its samples
CHAIN = ["main.work", "main.spin", "main.main", "runtime.main"]
MIN_SAMPLES = 50    # of the samples named, enough for the shares to mean something
COMPLETE = 0.95     # share of the main goroutine's samples that must carry the whole chain


def mark_line(mark):
    """Line number of the line of gospin.go holding "MARK:<mark>"."""
    for n, text in enumerate(SOURCE.read_text().splitlines(), 1):
        if f"MARK:{mark}" in text:
            return n
    raise AssertionError(f"MARK:{mark} not in {SOURCE}")


def function_lines(name):
    """The lines of gospin.go's function `name`, from its `func` line to its closing brace: every
    line the Go line table can give one of its instructions."""
    lines = SOURCE.read_text().splitlines()
    first = next(n for n, text in enumerate(lines, 1) if text.startswith(f"func {name}("))
    last = next(n for n, text in enumerate(lines, 1) if n > first and text == "}")
    return range(first, last + 1)


@pytest.fixture(scope="module")
def profiler():
    need_root()
    if not GOSPIN.exists():
        pytest.skip(f"{GOSPIN} not built: `go` was not found when the build was configured "
                    "(scripts/setup.sh --test-deps installs golang-go)")
    yield from running_profiler()


@pytest.fixture(scope="module")
def gospin(profiler):
    """Runs the stripped Go program once for the module's tests (each may run alone), until the
    store holds SAMPLES of it (its 600 s are only a backstop); its pid."""
    w = run_until_sampled(profiler, [GOSPIN, "600"], SAMPLES)
    assert w.returncode == -signal.SIGKILL, f"{GOSPIN} exited {w.returncode} before it was stopped"
    return w.pid


def go_samples(con, pid):
    """[(lines, count)] for one process: lines leaf first, each (function, file, line, frame
    kind, frame id, depth) with inline lines innermost first; None function when unnamed."""
    lines = {}
    for frame, depth, function, source_file, line in con.execute(
            "SELECT frame, depth, function, source_file, line FROM frame_lines ORDER BY frame, depth"):
        lines.setdefault(frame, []).append((function, source_file, line, depth))
    kinds = dict(con.execute("SELECT id, kind FROM frames"))
    out = []
    for _, blob, count in con.execute(*stacks_query(pid)):
        frames = []
        for fid in frame_ids(blob):
            for function, source_file, line, depth in lines.get(fid, [(None, None, None, 0)]):
                frames.append((function, source_file, line, kinds.get(fid), fid, depth))
        out.append((frames, count))
    return out


def wait_named(profiler, pid, timeout=60):
    """Settles, then flushes until the process's samples are in the store with main.spin named."""
    profiler.settle([pid])

    def named():
        profiler.flush()
        with profiler.db() as con:
            samples = go_samples(con, pid)
        return (any(f[0] == "main.spin" for frames, _ in samples for f in frames),
                f"{sum(c for _, c in samples)} samples, main.spin not named")
    wait_until(named, f"main.spin named in the samples of pid {pid}", timeout, interval=1,
               diagnosis=lambda: profiler.diagnosis([pid]))
    with profiler.db() as con:
        return go_samples(con, pid)


def contains_in_order(names, chain):
    n = len(chain)
    return any(names[i:i + n] == chain for i in range(len(names) - n + 1))


def test_stripped_go_program_named_from_gopclntab(profiler, gospin):
    # The file really has nothing else to name it from.
    sections = subprocess.run(["readelf", "-SW", str(GOSPIN)], capture_output=True, text=True).stdout
    assert ".gopclntab" in sections
    for gone in (".symtab", ".debug_info", ".debug_line", ".eh_frame"):
        assert gone not in sections, f"{GOSPIN} still has {gone}"

    samples = wait_named(profiler, gospin)

    total = sum(c for _, c in samples)
    assert total >= MIN_SAMPLES, f"{total} samples of {GOSPIN}"

    # The main goroutine: samples in main.* code (the other threads run the Go runtime).
    main_samples = [(frames, c) for frames, c in samples
                    if any((f[0] or "").startswith("main.") for f in frames)]
    main_total = sum(c for _, c in main_samples)
    assert main_total >= 0.5 * total, f"{main_total}/{total} samples in main.*: {samples[:5]}"

    complete = sum(c for frames, c in main_samples
                   if contains_in_order([f[0] for f in frames if f[0] and f[0] != "main.fib"
                                         and f[0] != "main.mix"], CHAIN))
    assert complete >= COMPLETE * main_total, \
        f"{complete}/{main_total} samples carry {CHAIN}: {[[f[0] for f in fr] for fr, _ in main_samples[:5]]}"

    # Files and lines: callers at their call lines, runtime.main in the Go runtime.
    by_function = {}
    for frames, _ in main_samples:
        for function, source_file, line, kind, _, _ in frames:
            if function and kind == NATIVE:   # kernel frames above the leaf have their own
                by_function.setdefault(function, set()).add((source_file, line))
    for fn in CHAIN + ["main.mix"]:
        assert fn in by_function, f"{fn} never seen: {sorted(by_function)}"
    for fn in ("main.work", "main.spin", "main.main", "main.mix"):
        for source_file, line in by_function[fn]:
            assert source_file.endswith("/tests/workloads/go/gospin.go"), (fn, source_file)
            assert line > 0, (fn, line)
    # Where a sample lands is statistics; what each line means is not. Every line shown for a
    # main.* function is one of that function's lines, and a caller whose callee is known is
    # at the line of that very call (the return address's call instruction).
    for fn in ("main.work", "main.spin", "main.main", "main.mix"):
        want = function_lines(fn.split(".", 1)[1])
        assert all(line in want for _, line in by_function[fn]), (fn, sorted(by_function[fn]), want)
    calls = {("main.work", "main.spin"): mark_line("spin-calls-work"),
             ("main.spin", "main.main"): mark_line("main-calls-spin")}
    seen_calls = set()
    for frames, _ in main_samples:
        for a, b in zip(frames, frames[1:]):
            if (a[0], b[0]) in calls and a[4] != b[4]:  # callee, then its caller in another frame
                assert b[2] == calls[a[0], b[0]], (a, b)
                seen_calls.add((a[0], b[0]))
    assert seen_calls == set(calls), seen_calls  # the chain carries both calls (checked above)
    assert all(f.endswith("/runtime/proc.go") and line > 0 for f, line in by_function["runtime.main"]), \
        by_function["runtime.main"]

    # The inlined call: main.mix at its body line, then main.work at the call line, both in
    # one frame (depth 0 and 1 of the same frame row).
    inline_samples = 0
    for frames, c in main_samples:
        for a, b in zip(frames, frames[1:]):
            if a[0] == "main.mix" and b[0] == "main.work" and a[4] == b[4]:
                assert (a[2], a[5]) == (mark_line("mix-body"), 0), a
                assert (b[2], b[5]) == (mark_line("work-calls-mix"), 1), b
                inline_samples += c
    assert inline_samples > 0.2 * main_total, f"{inline_samples}/{main_total} samples in the inlined main.mix"
    print(f"gospin: {total} samples, {main_total} in main.*, {complete} with the whole chain, "
          f"{inline_samples} in the inlined main.mix")


def test_go_build_id_of_stripped_program(profiler, gospin):
    go = which("go")
    if not go:
        pytest.skip("go not installed")
    want = subprocess.run([go, "tool", "buildid", str(GOSPIN)], capture_output=True, text=True,
                          check=True).stdout.strip()

    def stored():
        profiler.flush()
        with profiler.db() as con:
            rows = con.execute("SELECT go_build_id FROM files WHERE path LIKE ?",
                               (f"%/{GOSPIN.name}",)).fetchall()
        return bool(rows) and all(r[0] for r in rows), rows  # the build ID may come with a later flush
    rows = wait_until(stored, f"the file of {GOSPIN.name} (pid {gospin}) in the store with its build ID", 60,
                      interval=0.5,
                      diagnosis=lambda: profiler.diagnosis([gospin]))
    assert {r[0] for r in rows} == {want}, rows
