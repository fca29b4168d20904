# SPDX-License-Identifier: MIT
"""End to end (root): CPython frames from the BPF walk (issue #8), for every CPython 3.6–3.13
on the machine (pyenv builds, Debian's /usr/bin/python3.11), through the loader into the store.

Each interpreter runs main → outer → middle → inner, inner spinning, and first prints the
addresses of those functions' code objects (id() of a code object is its address in CPython)
and of the module's. In the store, the samples of that process must carry, leaf first, exactly
the CPython frames inner, middle, outer, main, <module> (EP_FRAME_CPYTHON, kind 5: code
address in bits 0-47, instruction byte offset in 48-63), with native frames before them (the
eval loop the sample interrupted) and after them (the interpreter's C callers down to _start):
interleaved in the true order (the Python frames of an eval-loop activation come right before,
leaf-side of, that eval loop's native frame; a sample that interrupted the eval loop itself
has them as its leaf). 3.6–3.10 run one eval-loop activation per Python frame, so a
native frame sits between two Python frames there; 3.11+ run the four functions in one
activation, so they are consecutive. Offsets must lie inside each code's bytecode. Counted
are the samples taken once every table the processes map is loaded. Samples whose Python
frames are other code are left out (at most 10 % of them); samples with no Python frame at all
are not."""
import subprocess
from pathlib import Path

import pytest

from conftest import cpython_interpreters, frame_ids, read_lines, running_profiler, stacks_query
from waiting import wait_until

CPYTHON = 5
STEADY_SAMPLES = 40  # each chain runs until the store holds this many past its baseline
MIN_SAMPLES = 15     # of those, in the chain's own code
SHARE = 0.9  # of a process's samples with the whole chain

SCRIPT = r'''
import sys, time
def inner(deadline):
    x = 0
    while time.time() < deadline:
        for i in range(2000):
            x += i
    return x
def middle(deadline):
    return inner(deadline) + 1
def outer(deadline):
    return middle(deadline) + 1
def main(seconds):
    deadline = time.time() + seconds
    codes = [inner.__code__, middle.__code__, outer.__code__, main.__code__, MODULE]
    print(" ".join("%d:%d" % (id(c), len(c.co_code)) for c in codes), flush=True)
    return outer(deadline)
MODULE = sys._getframe().f_code
main(float(sys.argv[1]))
'''


def interpreters():
    return [Path(p) for p in cpython_interpreters().values()]


@pytest.fixture(scope="module")
def profiler():
    yield from running_profiler()


def stacks(con, pid, since):
    """[(frames, count)] of the samples taken after since (a Profiler.stack_counts() result):
    frames leaf first as (kind, addr) pairs, from the store."""
    info = {fid: (kind, addr & 0xFFFFFFFFFFFFFFFF) for fid, kind, addr in con.execute("SELECT id, kind, addr FROM frames")}
    out = []
    for sid, blob, count in con.execute(*stacks_query(pid)):
        count -= since.get(sid, 0)
        if count > 0:
            frames = [info.get(fid, (None, None)) for fid in frame_ids(blob)]
            out.append((frames, count))
    return out


def test_python_frames(profiler, tmp_path):
    script = tmp_path / "spin.py"
    script.write_text(SCRIPT)
    pythons = interpreters()
    assert pythons, "no CPython 3.6-3.13 on this machine"
    # The chains run until killed. Only their samples once the tables of everything they map
    # are loaded and the loader knows their runtime count: before that, how far BPF gets
    # depends on how fast the disk gives the symbolizer the files (test_python.py checks that
    # phase).
    procs = [(py, subprocess.Popen([str(py), str(script), "3600"], stdout=subprocess.PIPE))
             for py in pythons]
    try:
        codes = {}
        for py, p in procs:
            line = read_lines(p, 1)[0].split()
            codes[py] = [tuple(int(v) for v in item.split(":")) for item in line]
        pids = [p.pid for _, p in procs]
        profiler.wait_for_tables(pids)
        profiler.wait_for_runtimes(pids)
        profiler.flush()
        baseline = {p.pid: profiler.stack_counts(p.pid) for _, p in procs}

        # Sampled while they run, until each has STEADY_SAMPLES past its baseline: as long as
        # that takes on a busy machine.
        def steady_enough():
            profiler.flush()
            short = [f"{py.name}: {got}" for py, p in procs
                     for got in [sum(profiler.stack_counts(p.pid).values()) - sum(baseline[p.pid].values())]
                     if got < STEADY_SAMPLES]
            return not short, f"short of {STEADY_SAMPLES} samples: {', '.join(short)}"
        wait_until(steady_enough, "samples of every chain past its baseline", 300, interval=1.0,
                   diagnosis=lambda: profiler.diagnosis([p.pid for _, p in procs]))
    finally:
        for _, p in procs:
            p.kill()
            p.wait()
    profiler.settle([p.pid for _, p in procs])

    counters = profiler.busctl("get-property", "org.ebpfprofiler.Loader1", "/org/ebpfprofiler/Loader1",
                               "org.ebpfprofiler.Loader1", "PythonCounters")
    con = profiler.db()
    report, failures = [], []
    for py, p in procs:
        want = [addr for addr, _ in codes[py]]
        sizes = [size for _, size in codes[py]]
        minor = int(py.name.split(".")[1])
        total = good = other_code = 0
        example = None
        for frames, count in stacks(con, p.pid, baseline[p.pid]):
            idx = [i for i, (kind, _) in enumerate(frames) if kind == CPYTHON]
            got = [frames[i][1] & ((1 << 48) - 1) for i in idx]
            # Python code that is not the chain's (the interpreter starting up, importing) is
            # not counted; a sample without any Python frame is, as a failure.
            if got and want[3] not in got:
                other_code += count
                continue
            total += count
            offsets = [frames[i][1] >> 48 for i in idx]
            # Native frames after them (the eval loop that runs <module>, its C callers); before
            # them only when the sample did not interrupt the eval loop itself.
            ok = (got == want and idx[-1] < len(frames) - 1 and frames[idx[-1] + 1][0] not in (CPYTHON, None)
                  and all(0 <= o < s for o, s in zip(offsets, sizes)))
            if minor >= 11:
                ok = ok and idx == list(range(idx[0], idx[0] + len(want)))  # one activation
            else:
                ok = ok and all(b - a >= 2 for a, b in zip(idx, idx[1:]))  # eval frames between
            if ok:
                good += count
            elif example is None:
                example = [(k, hex(a) if a is not None else None) for k, a in frames]
        report.append(f"{py}: {good}/{total} samples with the whole chain")
        # A walk that yields wrong code objects is not hidden here.
        if total < MIN_SAMPLES or good < SHARE * total or other_code > 0.1 * (total + other_code):
            failures.append(f"{py}: {good}/{total} complete, {other_code} in other Python code; "
                            f"a stack without the chain: {example}; "
                            f"expected code objects {[hex(a) for a in want]}")
    print("\n".join(report))
    print("PythonCounters:", counters)
    assert not failures, "\n".join(failures) + "\nPythonCounters: " + counters


def test_open_process_memory(profiler):
    """Loader1.OpenProcessMemory: the runtime the loader found; NoRuntime for a process that
    runs none (its memory is not handed out), NoSuchFile for no process."""
    py = interpreters()[-1]
    minor = int(py.name.split(".")[1])
    p = subprocess.Popen([str(py), "-c", "import time; print('ready', flush=True); time.sleep(30)"],
                         stdout=subprocess.PIPE)
    try:
        assert read_lines(p, 1) == ["ready"]  # the interpreter is up: its runtime is mapped
        out = profiler.busctl("call", "org.ebpfprofiler.Loader1", "/org/ebpfprofiler/Loader1",
                              "org.ebpfprofiler.Loader1", "OpenProcessMemory", "u", p.pid)
        assert out.split()[0] == "hsu" and out.split()[2:] == ['"cpython"', str(3 << 8 | minor)], out
        other = subprocess.Popen(["sleep", "30"])
        try:
            r = subprocess.run(["busctl", f"--address={profiler.bus}", "call", "org.ebpfprofiler.Loader1",
                                "/org/ebpfprofiler/Loader1", "org.ebpfprofiler.Loader1", "OpenProcessMemory", "u",
                                str(other.pid)], capture_output=True, text=True)
            assert r.returncode != 0 and "runs no runtime" in r.stderr, (r.stdout, r.stderr)
        finally:
            other.kill()
            other.wait()
    finally:
        p.kill()
        p.wait()
    r = subprocess.run(["busctl", f"--address={profiler.bus}", "call", "org.ebpfprofiler.Loader1",
                        "/org/ebpfprofiler/Loader1", "org.ebpfprofiler.Loader1", "OpenProcessMemory", "u",
                        str(2**31 - 2)], capture_output=True, text=True)
    assert r.returncode != 0 and "There is no process" in r.stderr, r.stderr
