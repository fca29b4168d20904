# SPDX-License-Identifier: MIT
"""CPython frames in mixed stacks, end to end: every CPython on the machine (the pyenv builds
3.6-3.13 and Debian's stripped python3.11) runs scripts with known call chains while the
profiler samples; the store must hold the Python functions, files and lines in the right order,
interleaved with the native frames, per thread, for processes started before and after the
profiler."""

import collections
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import (cli, cpython_interpreters, decode_otlp, frame_ids, read_lines, running_profiler, stacks_query,
                      stop_threads, uncached_copy)
from waiting import wait_until

ABORT = 4
CPYTHON = 5
# Samples past the baseline each process (and each thread of threads.py) must have before the
# checks: the floors the checks assert, with room for the shares to mean something.
STEADY_SAMPLES = 30
STEADY_THREAD_SAMPLES = 15


PYTHONS = cpython_interpreters()

CHAIN = '''\
import sys

def inner():
    x = 0
    while True:
        x += 1  # BUSY

def middle():
    inner()  # CALL-MIDDLE

def outer():
    middle()  # CALL-OUTER

def main():
    print("ready", flush=True)
    outer()  # CALL-MAIN

main()
'''

CALLBACK = '''\
import functools

def key(v):
    x = 0
    for i in range(50):  # KEY-BUSY
        x += i * v
    return x

def sorter():
    print("ready", flush=True)
    while True:
        sorted(range(2000), key=key)  # SORTED

sorter()
'''

THREADS = '''\
import ctypes, sys, threading, time
libc = ctypes.CDLL(None)

def say(label):  # one write: the two threads' lines never interleave
    sys.stdout.write(f"{label} {libc.syscall(186)}\\n")
    sys.stdout.flush()

def spin_a():
    say("a")
    x = 0
    while True:
        x += 1  # A-BUSY

def spin_b():
    say("b")
    x = 0
    while True:
        x -= 1  # B-BUSY

for f in (spin_a, spin_b):
    threading.Thread(target=f, daemon=True).start()
time.sleep(3600)
'''


def line_of(script, marker):
    for n, text in enumerate(script.splitlines(), 1):
        if marker in text:
            return n
    raise AssertionError(marker)


@pytest.fixture(scope="module")
def scripts():
    d = Path(tempfile.mkdtemp(prefix="ep-python-"))
    d.chmod(0o755)
    for name, text in (("chain.py", CHAIN), ("callback.py", CALLBACK), ("threads.py", THREADS)):
        (d / name).write_text(text)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def start(python, script):
    return subprocess.Popen([python, str(script)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            cwd=script.parent)


@pytest.fixture(scope="module")
def session(scripts):
    """Chains started before the profiler (every interpreter), the rest after it. The cache
    starts empty, as on a first start: the chains are sampled while their unwind tables are
    still being extracted (how many of those samples the loader unwinds again depends on which
    answer comes first; test_samples_unwound_again_by_the_loader_keep_their_python_frames makes
    its own). The rest start once the tables are loaded. Each check of a steady state counts
    only the samples taken after its processes ran their workload with every table loaded (`baseline`): how long a
    first extraction takes depends on the disk, not on the profiler."""
    if not PYTHONS:
        pytest.skip("no CPython 3.6-3.13 on this machine")
    before = {name: start(py, scripts / "chain.py") for name, py in PYTHONS.items()}
    procs = list(before.values())
    try:
        for p in before.values():
            read_lines(p, 1)
        gen = running_profiler("--cache-dir", str(scripts / "cache"))
        profiler = next(gen)
    except BaseException:
        for p in procs:
            p.kill()
            p.wait()
        raise
    try:
        profiler.wait_for_tables([p.pid for p in procs])
        after = {name: start(py, scripts / "callback.py") for name, py in PYTHONS.items()}
        threads = {name: start(py, scripts / "threads.py") for name, py in PYTHONS.items()}
        procs += list(after.values()) + list(threads.values())
        for p in after.values():
            read_lines(p, 1)
        tids = {}
        for name, p in threads.items():
            tids[name] = {label: int(tid) for label, tid in (line.split() for line in read_lines(p, 2))}
        pids = [p.pid for p in procs]
        profiler.wait_for_tables(pids)  # the modules the new scripts loaded (ctypes, ...)
        profiler.wait_for_runtimes(pids)
        profiler.flush()
        baseline = {p.pid: profiler.stack_counts(p.pid) for p in procs}
        baseline.update({(threads[name].pid, tid): profiler.stack_counts(threads[name].pid, tid)
                         for name in threads for tid in tids[name].values()})
        # The steady state the checks judge: every process and thread sampled enough past its
        # baseline. Some 27 busy processes share 2 CPUs (more on a busy machine), so this
        # takes as long as it takes.
        def steady_enough():
            profiler.flush()
            short = []
            for key, base in baseline.items():
                pid, tid = key if isinstance(key, tuple) else (key, None)
                need = STEADY_THREAD_SAMPLES if tid is not None else STEADY_SAMPLES
                got = sum(profiler.stack_counts(pid, tid).values()) - sum(base.values())
                if got < need:
                    short.append(f"{key}: {got}/{need}")
            return not short, f"{len(short)} short of samples: {', '.join(short[:8])}"
        wait_until(steady_enough, "enough samples of every Python process and thread past its baseline",
                   300, interval=1.0, diagnosis=lambda: profiler.diagnosis(pids))
        profiler.settle(pids)
        yield {"profiler": profiler, "before": before, "after": after, "threads": threads, "tids": tids,
               "baseline": baseline}
    finally:
        for p in procs:
            p.kill()
            p.wait()
        gen.close()  # stops the profiler


def python_stacks(profiler, pid, tid=None, since=None, outermost=False):
    """[(frames, count)] leaf first; each frame (kind, function, file basename, line). With
    since (a Profiler.stack_counts() result), only the samples taken after it. A native frame
    with inlined calls is one entry per function, innermost first; with outermost, one: the
    function its address is in."""
    since = since or {}
    with profiler.db() as con:
        lines = {}
        for frame, function, source, line in con.execute(
                "SELECT frame, function, source_file, line FROM frame_lines ORDER BY frame, depth"):
            lines.setdefault(frame, []).append((function, os.path.basename(source or ""), line))
        kinds, aborts = {}, {}
        for fid, kind, addr in con.execute("SELECT id, kind, addr FROM frames"):
            kinds[fid] = kind
            if kind == ABORT:
                aborts[fid] = [(f"stop {addr}", "", 0)]  # the reason the walk stopped
        out = []
        for sid, blob, count in con.execute(*stacks_query(pid, tid)):
            count -= since.get(sid, 0)
            if count <= 0:
                continue
            frames = []
            for fid in frame_ids(blob):
                entries = lines.get(fid) or aborts.get(fid, [(None, "", 0)])
                for function, source, line in entries[-1:] if outermost else entries:
                    frames.append((kinds.get(fid), function, source, line))
            out.append((frames, count))
        return out


def py_only(frames, script):
    return [(fn, line) for kind, fn, src, line in frames if kind == CPYTHON and src == script]


@pytest.mark.parametrize("name", sorted(PYTHONS))
def test_chain_of_a_process_started_before_the_profiler(session, name):
    pid = session["before"][name].pid
    stacks = python_stacks(session["profiler"], pid)
    total = sum(c for _, c in stacks)
    assert total >= 10, f"{name}: only {total} samples"
    # The loop's backward jump carries the `while` line: a sample there is on line 5, not 6.
    leaf = {("inner", line_of(CHAIN, "BUSY")), ("inner", line_of(CHAIN, "while True"))}
    callers = [("middle", line_of(CHAIN, "CALL-MIDDLE")), ("outer", line_of(CHAIN, "CALL-OUTER")),
               ("main", line_of(CHAIN, "CALL-MAIN")), ("<module>", len(CHAIN.splitlines()))]
    seen = collections.Counter()
    for frames, c in stacks:
        seen[tuple(py_only(frames, "chain.py"))] += c
    good = sum(c for py, c in seen.items() if py and py[0] in leaf and list(py[1:]) == callers)
    assert good >= 0.8 * total, (
        f"{name}: {good}/{total} samples carry exactly inner {sorted(leaf)} {callers}; seen: {seen.most_common(4)}")
    # Below <module> only the interpreter's native frames down to the root: nothing foreign
    # (no JIT code, no other Python code), in every sample. A walk that stopped early ends in
    # an abort marker (4): expected while the tables were being extracted, rare once they
    # were all loaded.
    for frames, c in stacks:
        kinds = [k for k, *_ in frames]
        if CPYTHON in kinds:
            last_py = max(i for i, k in enumerate(kinds) if k == CPYTHON)
            assert all(k in (1, 2, ABORT) for k in kinds[last_py + 1:]), (name, kinds, frames[last_py:])
    steady = python_stacks(session["profiler"], pid, since=session["baseline"][pid])
    steady_total = sum(c for _, c in steady)
    stopped = sum(c for frames, c in steady if frames and frames[-1][0] == ABORT)
    assert steady_total >= 10, f"{name}: only {steady_total} samples once the tables were loaded"
    assert stopped <= 0.1 * steady_total, (
        f"{name}: {stopped}/{steady_total} samples stop before the root once the tables were loaded "
        f"({collections.Counter(frames[-1][1] for frames, _ in steady if frames[-1][0] == ABORT)}; "
        f"{total} samples in all); {session['profiler'].table_state()}")


def python_counters(profiler):
    """Loader1.PythonCounters as {name: value}."""
    counters = profiler.busctl(
        "get-property", "org.ebpfprofiler.Loader1", "/org/ebpfprofiler/Loader1", "org.ebpfprofiler.Loader1",
        "PythonCounters")
    return dict(zip(re.findall(r'"([a-z-]+)"', counters), map(int, re.findall(r'" (\d+)', counters))))


# Files whose table extraction takes a while, for Profiler.table_worker_held(): any ELF file
# does, a bigger one is caught while it runs at the first try more often.
BIG_FILES = ("/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1", "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1", "/usr/bin/node")


def uncached_eval_loop(python, d):
    """How to run python with the file that holds its eval loop (libpython, or the program
    when libpython is linked in) replaced by an uncached copy in d: (program, environment,
    the copy)."""
    ldd = subprocess.run(["ldd", python], capture_output=True, text=True, check=True).stdout
    lib = re.search(r"^\s*(libpython\S+) => (\S+)", ldd, re.M)
    if lib:  # its RUNPATH comes after LD_LIBRARY_PATH
        return python, {"LD_LIBRARY_PATH": str(d)}, uncached_copy(lib.group(2), d / lib.group(1))
    copy = uncached_copy(python, d / os.path.basename(python))  # the name says python: it is asked about
    return str(copy), {}, copy


def test_samples_unwound_again_by_the_loader_keep_their_python_frames(session, scripts):
    """A sample of a Python process taken while its runtime is known but the unwind table of
    its eval loop's file is still to come: BPF walks the Python frames but cannot unwind past
    the eval loop, so it sends them unplaced with a copy of the stack; the loader keeps the
    sample until the table is there, unwinds it again and puts the Python frames before their
    eval loop's frame. The table is held back for as long as the test says (the symbolizer's
    table worker held, DetectRuntime answered meanwhile), not for as long as a start happens
    to leave it pending: the Python frames are kept, placed by the loader, in the exact chain."""
    profiler = session["profiler"]
    name = "debian-3.11" if "debian-3.11" in PYTHONS else sorted(PYTHONS)[-1]
    d = scripts / "held"
    d.mkdir()
    d.chmod(0o755)
    program, env, eval_loop_file = uncached_eval_loop(PYTHONS[name], d)
    big = next((f for f in BIG_FILES if os.access(f, os.R_OK)), PYTHONS[name])
    before, unwinds = python_counters(profiler), profiler.prop("Loader", "LoaderUnwinds")
    p = None
    try:
        # The waits in the block end within the hold's limit (conftest: HELD_SANDBOX_MAX_AGE).
        with profiler.table_worker_held(d, big) as still_held:
            p = subprocess.Popen([program, "chain.py"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 cwd=scripts, env=dict(os.environ, **env))
            read_lines(p, 1)
            profiler.wait_for_runtimes([p.pid])
            still_held()
            rows = {path: waited for path, _, _, waited, _, _ in profiler.tables(p.pid)}
            assert rows.get(str(eval_loop_file)) is True, f"{eval_loop_file} not pending: {rows}"
            unplaced = python_counters(profiler)["unplaced"]

            # Samples of it taken from here on carry Python frames BPF could not place, and wait
            # in the loader for the table (the other processes' tables are loaded).
            def waiting():
                still_held()
                now = python_counters(profiler)["unplaced"], profiler.prop("Loader", "WaitingSamples")
                return now[0] > unplaced and now[1] > 0, f"unplaced {now[0]} (from {unplaced}), waiting samples {now[1]}"
            wait_until(waiting, f"samples of {p.pid} with unplaced Python frames waiting for {eval_loop_file}", 120,
                       diagnosis=lambda: profiler.diagnosis([p.pid]))

        def placed():
            now = python_counters(profiler)
            return now["placed-by-loader"] > before["placed-by-loader"], now
        wait_until(placed, "the loader to place Python frames once the table came", 300,
                   diagnosis=lambda: profiler.diagnosis([p.pid]))
        profiler.wait_for_tables([p.pid])
        stop_threads(p.pid)  # each of its samples in the store named, below
        profiler.settle([p.pid])
        after = python_counters(profiler)
        assert profiler.prop("Loader", "LoaderUnwinds") > unwinds, "no sample waited for a table"
        placed_n = after["placed-by-loader"] - before["placed-by-loader"]
        dropped = after["unplaced-dropped"] - before["unplaced-dropped"]
        assert dropped <= 0.05 * placed_n, (before, after)
        stacks = python_stacks(profiler, p.pid, outermost=True)
    finally:
        if p:
            p.kill()
            p.wait()

    # The samples unwound to the root (the loader's, and BPF's once the table was there): the
    # exact chain, each run of Python frames before its eval loop's frame, nothing but native
    # frames after the last one.
    leaf = {("inner", line_of(CHAIN, "BUSY")), ("inner", line_of(CHAIN, "while True"))}
    callers = [("middle", line_of(CHAIN, "CALL-MIDDLE")), ("outer", line_of(CHAIN, "CALL-OUTER")),
               ("main", line_of(CHAIN, "CALL-MAIN")), ("<module>", len(CHAIN.splitlines()))]
    # Samples of the interpreter's start-up (site.py, chain.py's own imports) have Python frames
    # too, when the loader found the runtime before it ended (an uncached copy starts slowly):
    # the ones in chain.py's loop are those of the chain.
    complete = [(frames, c) for frames, c in stacks
                if frames and frames[-1][0] != ABORT and any(fn == "inner" for fn, _ in py_only(frames, "chain.py"))]
    assert complete, f"no sample of {name} unwound to the root: {stacks[:3]}"
    for frames, c in complete:
        py = py_only(frames, "chain.py")
        assert py and py[0] in leaf and py[1:] == callers, (name, py, frames)
        kinds = [k for k, *_ in frames]
        ends = [i for i in range(len(frames) - 1) if kinds[i] == CPYTHON and kinds[i + 1] != CPYTHON]
        assert ends and kinds[-1] != CPYTHON, (name, frames)
        for i in ends:
            assert frames[i + 1][:2] == (1, "_PyEval_EvalFrameDefault"), (name, i, frames)
        last_py = max(i for i, k in enumerate(kinds) if k == CPYTHON)
        assert all(k in (1, 2) for k in kinds[last_py + 1:]), (name, frames)


@pytest.mark.parametrize("name", sorted(PYTHONS))
def test_callback_through_native_code_is_in_order(session, name):
    pid = session["after"][name].pid
    stacks = python_stacks(session["profiler"], pid)
    total = sum(c for _, c in stacks)
    assert total >= 10, f"{name}: only {total} samples"
    ordered = 0
    others = collections.Counter()
    for frames, c in stacks:
        kinds_fns = [(k, fn, src) for k, fn, src, _ in frames]
        py_fns = [fn if k == CPYTHON else None for k, fn, _ in kinds_fns]
        i_key = py_fns.index("key") if "key" in py_fns else None
        i_sorter = py_fns.index("sorter") if "sorter" in py_fns else None
        between = kinds_fns[i_key + 1:i_sorter] if i_key is not None and i_sorter is not None else []
        # key (leaf side) ... native (sorted's C code) ... sorter: Python -> native -> Python.
        if (i_key is not None and i_sorter is not None and i_key < i_sorter and any(k == 1 for k, _, _ in between)
                and not any(k == CPYTHON for k, _, _ in between)):
            ordered += c
        else:
            others[tuple((k, fn) for k, fn, _ in kinds_fns[:12])] += c
    assert ordered >= 0.5 * total, (
        f"{name}: {ordered}/{total} samples show sorter -> native -> key; others: {others.most_common(5)}")


@pytest.mark.parametrize("name", sorted(PYTHONS))
def test_threads_are_attributed_to_their_own_functions(session, name):
    pid = session["threads"][name].pid
    for label, want, other in (("a", "spin_a", "spin_b"), ("b", "spin_b", "spin_a")):
        tid = session["tids"][name][label]
        # Not one sample of this thread in the other thread's function, from its start on.
        wrong = sum(c for frames, c in python_stacks(session["profiler"], pid, tid)
                    if any(fn == other for fn, _ in py_only(frames, "threads.py")))
        assert wrong == 0, f"{name}: thread {label} has {wrong} samples in {other}"
        stacks = python_stacks(session["profiler"], pid, tid, since=session["baseline"][(pid, tid)])
        total = sum(c for _, c in stacks)
        assert total >= 5, f"{name} thread {label}: only {total} samples"
        right = sum(c for frames, c in stacks if [fn for fn, _ in py_only(frames, "threads.py")][:1] == [want])
        seen = collections.Counter()
        for frames, c in stacks:
            seen[tuple((k, fn) for k, fn, _, _ in frames[:10])] += c
        assert right >= 0.8 * total, (
            f"{name}: thread {label}: {right}/{total} samples in {want}; seen: {seen.most_common(3)}")


def test_otlp_marks_python_frames_cpython(session, tmp_path):
    name = sorted(PYTHONS)[-1]
    profiler = session["profiler"]
    out = tmp_path / "p.otlp"
    cli("export", "--store", profiler.store, "--pid", session["before"][name].pid, "-o", out)
    text = decode_otlp(out)
    # The frame type is an attribute of the Python locations; the functions and the file are
    # in the string table.
    assert '"profile.frame.type"' in text and '"cpython"' in text, text[:3000]
    for s in ('"inner"', '"middle"', '"outer"', '"main"', "chain.py"):
        assert s in text, s
