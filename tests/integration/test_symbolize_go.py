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
import subprocess
import time
from shutil import which

import pytest

from conftest import NATIVE, REPO, WORKLOADS, frame_ids, need_root, running_profiler, stacks_query

GOSPIN = WORKLOADS / "gospin"
SOURCE = REPO / "tests" / "workloads" / "go" / "gospin.go"
SECONDS = 5
CHAIN = ["main.work", "main.spin", "main.main", "runtime.main"]
MIN_SAMPLES = 50    # at 99 Hz for 5 s: ~500 on an idle CPU, far fewer on a loaded machine
COMPLETE = 0.95     # share of the main goroutine's samples that must carry the whole chain


def mark_line(mark):
    """Line number of the line of gospin.go holding "MARK:<mark>"."""
    for n, text in enumerate(SOURCE.read_text().splitlines(), 1):
        if f"MARK:{mark}" in text:
            return n
    raise AssertionError(f"MARK:{mark} not in {SOURCE}")


@pytest.fixture(scope="module")
def profiler():
    need_root()
    if not GOSPIN.exists():
        pytest.skip(f"{GOSPIN} not built: `go` was not found when the build was configured "
                    "(scripts/setup.sh --test-deps installs golang-go)")
    yield from running_profiler()


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
    deadline = time.time() + timeout
    while True:
        with profiler.db() as con:
            samples = go_samples(con, pid)
        if any(f[0] == "main.spin" for frames, _ in samples for f in frames):
            return samples
        if time.time() > deadline:
            raise AssertionError(f"main.spin not named after {timeout}s ({sum(c for _, c in samples)} samples):\n"
                                 f"{profiler.diagnosis([pid])}")
        profiler.flush()
        time.sleep(1)


def contains_in_order(names, chain):
    n = len(chain)
    return any(names[i:i + n] == chain for i in range(len(names) - n + 1))


def test_stripped_go_program_named_from_gopclntab(profiler):
    # The file really has nothing else to name it from.
    sections = subprocess.run(["readelf", "-SW", str(GOSPIN)], capture_output=True, text=True).stdout
    assert ".gopclntab" in sections
    for gone in (".symtab", ".debug_info", ".debug_line", ".eh_frame"):
        assert gone not in sections, f"{GOSPIN} still has {gone}"

    w = subprocess.Popen([str(GOSPIN), str(SECONDS)])
    w.wait(timeout=SECONDS + 30)
    assert w.returncode == 0
    samples = wait_named(profiler, w.pid)

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
    # main.spin calls work() in its body and time.Now() in its loop condition: a sample in
    # either callee shows spin at that call's line, and the work() one is always seen.
    spin_calls = {(str(SOURCE), mark_line("spin-calls-work")), (str(SOURCE), mark_line("spin-calls-now"))}
    assert (str(SOURCE), mark_line("spin-calls-work")) in by_function["main.spin"], by_function["main.spin"]
    assert by_function["main.spin"] <= spin_calls, by_function["main.spin"]
    assert by_function["main.main"] == {(str(SOURCE), mark_line("main-calls-spin"))}, by_function["main.main"]
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


def test_go_build_id_of_stripped_program(profiler):
    go = which("go")
    if not go:
        pytest.skip("go not installed")
    want = subprocess.run([go, "tool", "buildid", str(GOSPIN)], capture_output=True, text=True,
                          check=True).stdout.strip()
    with profiler.db() as con:
        rows = con.execute("SELECT go_build_id FROM files WHERE path LIKE ?", (f"%/{GOSPIN.name}",)).fetchall()
    assert rows, "the Go program's file is not in the store (run with the first test)"
    assert {r[0] for r in rows} == {want}, rows
