# SPDX-License-Identifier: MIT
"""CPython call shapes end to end (issue #8), for every CPython on the machine (the pyenv
builds 3.6-3.13 and Debian's stripped python3.11), all sampled together by one profiler:

  - a Python function called back from C: functools.reduce, json.dumps(default=...) through
    the C encoder (_json), a ctypes CFUNCTYPE comparator called by libc's qsort through
    libffi: Python caller -> native frames (of those modules) -> Python callback, in order;
  - a generator consumed by a for loop, and a coroutine awaited by a coroutine under asyncio:
    the whole chain the interpreter runs, up to asyncio's loop frames and <module>;
  - 500 frames of a recursive function: all of them, then the callers, down to the root;
  - bad input: Python processes that exit while being sampled (exec'd and forked), and a
    runtime whose version is unknown (a copy of a real libpython renamed or patched to say
    3.99): native frames only, the reason counted once, nothing crashes.

Each workload prints, once it reached its hot spot, the frame chain the interpreter itself
sees there (sys._getframe() and f_back: function as the symbolizer names it, co_qualname from
3.11, file, line). The store's Python frames of a sample must be exactly that chain (the
leaf's line anywhere in the leaf function, the callers' lines exact), and native frames must
sit where C called: between a callback and its caller, and below <module> down to the root.
Only samples taken once every table the processes map is loaded count for the shares."""

import collections
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import (cli, cpython_interpreters, frame_ids, machine_load, output_so_far, read_lines, running_profiler,
                      stacks_query, stop_threads)
from waiting import wait_until

NATIVE, KERNEL, ABORT, CPYTHON = 1, 2, 4, 5
MAX_DEPTH = 1        # EP_STOP_MAX_DEPTH, the address of an abort frame
USER_FRAMES = 1536   # EP_BPF_MAX_USER_FRAMES: frame slots for the user stack
STEADY_SAMPLES = 30  # samples past the baseline every workload must have before the checks
SHARE = 0.9          # of a workload's samples that must have exactly the expected shape
DEPTH = 500          # frames of the recursive function


PYTHONS = cpython_interpreters()


def minor(name):
    return int(name.rsplit(".", 1)[1])


# Every workload starts with this: report() prints, once, the chain of frames of its caller as
# the interpreter sees it, as JSON, with whatever else the test needs to know (each keyword
# argument a function giving a value).
PRELUDE = '''\
import json as _json_mod, os as _os, sys as _sys
_REPORTED = []
def report(**extra):
    if _REPORTED:
        return
    _REPORTED.append(1)
    try:
        f = _sys._getframe(1)
        chain = []
        while f is not None:
            c = f.f_code
            chain.append([getattr(c, "co_qualname", c.co_name), _os.path.basename(c.co_filename), f.f_lineno])
            f = f.f_back
        extra = {k: v() for k, v in extra.items()}
        extra["chain"] = chain
        print(_json_mod.dumps(extra), flush=True)
    except BaseException:  # a callback's exception would be ignored by its C caller
        import traceback
        traceback.print_exc()
        _os._exit(1)
'''

# functools.reduce is C (_functools): reducer -> reduce's C code -> eval loop -> add.
REDUCE = PRELUDE + '''
import functools

def add(acc, v):
    report(native=list)
    x = 0
    for i in range(300):
        x += i
    return acc + v

def reducer():
    while True:
        functools.reduce(add, range(1000))  # CALL

reducer()
'''

# json.dumps with default= through the C encoder: dumps -> encode -> iterencode -> _json's
# encoder (c_make_encoder) -> default.
JSON = PRELUDE + '''
import json, json.encoder
import _json
assert json.encoder.c_make_encoder is _json.make_encoder, "no C encoder"

class Thing:
    pass

def default(o):
    report(native=lambda: [_json.__file__])
    x = 0
    for i in range(300):
        x += i
    return x

def dumper():
    things = [Thing() for _ in range(1000)]
    while True:
        json.dumps(things, default=default)  # CALL

dumper()
'''

# A ctypes callback called by libc's qsort: sorter -> _ctypes -> libffi -> qsort -> libffi's
# closure -> _ctypes -> eval loop -> compare.
CTYPES = PRELUDE + '''
import ctypes, ctypes.util, _ctypes

libc = ctypes.CDLL(ctypes.util.find_library("c"))
CMP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int), ctypes.POINTER(ctypes.c_int))

def maps_of(word):
    with open("/proc/self/maps") as f:
        return sorted({l.split()[-1] for l in f if word in l.split()[-1]})

def compare(a, b):
    # libffi is linked statically into some builds' _ctypes (pyenv 3.7)
    report(native=lambda: [(maps_of("libffi") or [_ctypes.__file__])[0], maps_of("libc.so")[0]])
    x = 0
    for i in range(300):
        x += i
    return a[0] - b[0]

def sorter():
    cmp = CMP(compare)
    n = 500
    template = (ctypes.c_int * n)(*range(n, 0, -1))
    arr = (ctypes.c_int * n)()
    while True:
        ctypes.memmove(arr, template, ctypes.sizeof(arr))
        libc.qsort(arr, n, ctypes.sizeof(ctypes.c_int), cmp)  # CALL

sorter()
'''

GENERATOR = PRELUDE + '''
def numbers():
    x = 0
    while True:
        report()
        for i in range(100000):
            x += i
        yield x

def consumer():
    total = 0
    for v in numbers():  # CALL
        total += v

consumer()
'''

# work never awaits: it is the running coroutine of the task asyncio's loop steps.
COROUTINE = PRELUDE + '''
import asyncio

async def work():
    report()
    x = 0
    while True:
        for i in range(1000):
            x += i

async def main():
    await work()  # CALL

def runner():
    if hasattr(asyncio, "run"):
        asyncio.run(main())
    else:  # 3.6
        asyncio.get_event_loop().run_until_complete(main())

runner()
'''

DEEP = PRELUDE + '''
_sys.setrecursionlimit(10000)

def recurse(n):
    if n > 1:
        return recurse(n - 1) + 1  # CALL
    report()
    x = 0
    while True:
        x += 1

def main():
    recurse(%d)

main()
''' % DEPTH

WORKLOADS = {"reduce": REDUCE, "json": JSON, "ctypes": CTYPES, "generator": GENERATOR,
             "coroutine": COROUTINE, "deep": DEEP}
PHASES = [["reduce", "json", "ctypes"], ["generator", "coroutine"], ["deep"]]  # see session()
# What the test knows of each chain without the interpreter's word: the script's own frames,
# leaf first, the second of them at its "# CALL" line; and library frames that must be
# among the rest (qualified names from 3.11).
OWN_FRAMES = {"reduce": ["add", "reducer", "<module>"], "json": ["default", "dumper", "<module>"],
              "ctypes": ["compare", "sorter", "<module>"], "generator": ["numbers", "consumer", "<module>"],
              "coroutine": ["work", "main", "runner", "<module>"],
              "deep": ["recurse"] * DEPTH + ["main", "<module>"]}
LIBRARY_FRAMES = {"json": {"iterencode", "encode", "dumps"}, "coroutine": {"run_until_complete", "_run_once"}}


def line_of(script, marker):
    return next(n for n, text in enumerate(script.splitlines(), 1) if marker in text)


def body_lines(script, function):
    """The line numbers of a function's def and body in script (up to the next blank line)."""
    lines = script.splitlines()
    first = next(i for i, t in enumerate(lines) if re.match(rf"(async )?def {function}\(", t))
    last = next((i for i in range(first, len(lines)) if not lines[i].strip()), len(lines))
    return set(range(first + 1, last + 1))


def start(python, script, env=None):
    return subprocess.Popen([python, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=script.parent, env=env)


def store_frames(con):
    """{frame id: (kind, native file path or None, [(function, source basename, line)], addr)}."""
    lines = collections.defaultdict(list)
    for frame, function, source, line in con.execute(
            "SELECT frame, function, source_file, line FROM frame_lines ORDER BY frame, depth"):
        lines[frame].append((function, os.path.basename(source or ""), line))
    return {fid: (kind, path, lines.get(fid) or [(None, "", 0)], addr) for fid, kind, path, addr in con.execute(
        "SELECT f.id, f.kind, fi.path, f.addr FROM frames f LEFT JOIN files fi ON fi.id = f.file AND f.kind = 1")}


def store_stacks(profiler, pid, since=None):
    """{stack id: (frames, count, raw)} of pid's samples (after since, a Profiler.stack_counts()
    result), leaf first; a frame is (kind, native file path, function, source basename, line),
    one per (inline) line; raw has one (kind, addr) per frame, as the BPF record had them."""
    since = since or {}
    none = (None, None, [(None, "", 0)], None)
    with profiler.db() as con:
        info = store_frames(con)
        out = {}
        for sid, blob, count in con.execute(*stacks_query(pid)):
            count -= since.get(sid, 0)
            if count > 0:
                fids = frame_ids(blob)
                out[sid] = ([(info.get(fid, none)[0], info.get(fid, none)[1], *ln)
                             for fid in fids for ln in info.get(fid, none)[2]], count,
                            [(info.get(fid, none)[0], info.get(fid, none)[3]) for fid in fids])
        return out


def show(frames, n=40):
    return [(k, os.path.basename(p or ""), fn, src, line) for k, p, fn, src, line in frames[:n]]


@pytest.fixture(scope="module")
def scripts():
    d = Path(tempfile.mkdtemp(prefix="ep-pyshapes-"))
    d.chmod(0o755)
    for name, text in WORKLOADS.items():
        (d / f"shape_{name}.py").write_text(text)  # not json.py: that would be the json module
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def profiler():
    yield from running_profiler()


def sample_phase(profiler, scripts, workloads, procs, reports, baseline):
    """Starts workloads under every interpreter (into procs), takes their reports, waits for
    their tables, takes their baselines, and samples them together until each has
    STEADY_SAMPLES past its baseline. A workload sampled enough is stopped (SIGSTOP: its
    memory stays readable for the symbolizer), so the others get its CPU, and a profiler of
    another test running meanwhile does not record busy processes longer than needed."""
    new = {}
    for name, py in PYTHONS.items():
        for w in workloads:
            new[(name, w)] = procs[(name, w)] = start(py, scripts / f"shape_{w}.py")
    for key, p in new.items():
        try:
            reports[key] = json.loads(read_lines(p, 1)[0])
        except AssertionError:
            p.kill()
            raise AssertionError(f"{key}: {output_so_far(p.stderr, 2000)}") from None
        name, w = key
        chain = reports[key]["chain"]
        script = f"shape_{w}.py"
        own = [fn for fn, src, _ in chain if src == script]
        library = {fn.split(".")[-1] for fn, src, _ in chain if src != script}
        assert own == OWN_FRAMES[w] and LIBRARY_FRAMES.get(w, set()) <= library, (name, w, chain)
        own_lines = [line for _, src, line in chain if src == script]
        assert own_lines[1] == line_of(WORKLOADS[w], "# CALL"), (name, w, chain[:4])
    pids = [p.pid for p in new.values()]
    profiler.wait_for_tables(pids)
    profiler.flush()
    baseline.update({p.pid: profiler.stack_counts(p.pid) for p in new.values()})
    running = dict(new)

    def steady_enough():
        profiler.flush()
        short = []
        for k, p in list(running.items()):
            got = sum(profiler.stack_counts(p.pid).values()) - sum(baseline[p.pid].values())
            if got >= STEADY_SAMPLES:
                p.send_signal(signal.SIGSTOP)
                del running[k]
            else:
                short.append(f"{k}: {got}")
        return not short, f"{len(short)} short of {STEADY_SAMPLES} samples: {', '.join(short[:8])}"
    wait_until(steady_enough, f"enough samples of every {'/'.join(workloads)} workload past its baseline", 400,
               interval=1.0, diagnosis=lambda: profiler.diagnosis(pids))


@pytest.fixture(scope="module")
def session(profiler, scripts):
    """Every workload under every interpreter, sampled (sample_phase), then settled (names
    included: the processes exist while the symbolizer reads their code objects) and killed.
    The tests read the store afterwards. The workloads run in PHASES, not all 54 at once: a
    test running meanwhile has a profiler of its own that records them too (test_store.py's
    retention bounds are a few MiB), and the deep recursions' 1,500-frame stacks make big
    intervals, so they run on their own."""
    if not PYTHONS:
        pytest.skip("no CPython 3.6-3.13 on this machine")
    procs, reports, baseline = {}, {}, {}
    t0 = time.monotonic()
    try:
        with machine_load():
            for phase in PHASES:
                sample_phase(profiler, scripts, phase, procs, reports, baseline)
        t1 = time.monotonic()
        profiler.settle([p.pid for p in procs.values()])
        print(f"workloads: sampled {t1 - t0:.0f} s, settled {time.monotonic() - t1:.0f} s")
        for p in procs.values():  # the store holds what the tests read, and does not change
            p.kill()
            p.wait()
        yield {"procs": procs, "reports": reports, "baseline": baseline}
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def py_chain(frames):
    """The Python frames of a sample: [(index in frames, function, file, line)]."""
    return [(i, fn, src, line) for i, (k, _, fn, src, line) in enumerate(frames) if k == CPYTHON]


def chain_matches(got, want, leaf_lines):
    """got (from py_chain) is exactly want ([[function, file, line]] from report()), the leaf's
    line in leaf_lines, the others' exact."""
    if len(got) != len(want):
        return False
    for n, ((_, fn, src, line), (wfn, wsrc, wline)) in enumerate(zip(got, want)):
        if fn != wfn or src != wsrc or (line not in leaf_lines if n == 0 else line != wline):
            return False
    return True


def roots_ok(frames, chain):
    """Below the outermost Python frame: native frames only, down to the root (no abort)."""
    last = chain[-1][0]
    rest = frames[last + 1:]
    return bool(rest) and all(k == NATIVE for k, *_ in rest)


def steady(session, profiler, key):
    p = session["procs"][key]
    return [(frames, c) for frames, c, _ in store_stacks(profiler, p.pid, since=session["baseline"][p.pid]).values()]


CASES = [(name, w) for name in sorted(PYTHONS) for w in ("reduce", "json", "ctypes")]


@pytest.mark.parametrize("name,workload", CASES, ids=[f"{n}-{w}" for n, w in CASES])
def test_callback_from_c(session, profiler, name, workload):
    """Caller -> native -> callback: every sample is either in the callback with the whole
    chain and the C module's native frames between the callback and its caller, or in the
    caller (the C code between two calls) with the callers' chain."""
    report = session["reports"][(name, workload)]
    want = report["chain"]
    script = WORKLOADS[workload]
    callback = want[0][0]
    leaf_lines = body_lines(script, callback)
    caller_lines = {want[1][2]}
    stacks = steady(session, profiler, (name, workload))
    total = sum(c for _, c in stacks)
    in_callback = in_caller = 0
    bad = collections.Counter()
    for frames, c in stacks:
        chain = py_chain(frames)
        if chain and chain_matches(chain, want, leaf_lines) and roots_ok(frames, chain):
            between = frames[chain[0][0] + 1:chain[1][0]]
            paths = {p for k, p, *_ in between if k == NATIVE}
            if between and all(k == NATIVE for k, *_ in between) and all(
                    any(p and os.path.realpath(p) == os.path.realpath(n) for p in paths) for n in report["native"]):
                in_callback += c
                continue
        elif chain and chain_matches(chain, want[1:], caller_lines) and roots_ok(frames, chain):
            in_caller += c
            continue
        bad[tuple(show(frames))] += c
    assert total >= STEADY_SAMPLES, f"{name} {workload}: {total} samples"
    assert in_callback + in_caller >= SHARE * total and in_callback >= 0.3 * total, (
        f"{name} {workload}: {in_callback} samples in {callback} with the whole chain and native frames of "
        f"{report['native']} between it and {want[1][0]}, {in_caller} in {want[1][0]}, of {total}; "
        f"expected chain {want}; other stacks: {bad.most_common(3)}; why code objects went unnamed "
        f"(invalid-code, read-errors, not-python): {profiler.prop('Symbolizer', 'PythonCounters')}")


CHAIN_CASES = [(name, w) for name in sorted(PYTHONS) for w in ("generator", "coroutine")]


@pytest.mark.parametrize("name,workload", CHAIN_CASES, ids=[f"{n}-{w}" for n, w in CHAIN_CASES])
def test_generator_and_coroutine_chains(session, profiler, name, workload):
    """The generator's (coroutine's) frame, then every frame the interpreter has behind it: the
    consumer (the awaiting coroutine, asyncio's task step and loop frames, asyncio.run),
    <module>; then native frames to the root."""
    want = session["reports"][(name, workload)]["chain"]
    leaf_lines = body_lines(WORKLOADS[workload], want[0][0].split(".")[-1])
    stacks = steady(session, profiler, (name, workload))
    total = sum(c for _, c in stacks)
    good = 0
    bad = collections.Counter()
    for frames, c in stacks:
        chain = py_chain(frames)
        if chain and chain_matches(chain, want, leaf_lines) and roots_ok(frames, chain):
            good += c
        else:
            bad[tuple(show(frames))] += c
    assert total >= STEADY_SAMPLES, f"{name} {workload}: {total} samples"
    assert good >= SHARE * total, (f"{name} {workload}: {good}/{total} samples with the chain {want}; "
                                   f"other stacks: {bad.most_common(3)}")


def user_slots(raw):
    """BPF frame slots the user part of a stack took: 2 per Python frame, 1 per native frame."""
    return sum(2 if k == CPYTHON else 1 for k, _ in raw if k in (CPYTHON, NATIVE))


@pytest.mark.parametrize("name", sorted(PYTHONS))
def test_deep_recursion(session, profiler, name):
    """DEPTH frames of a recursive function, then main and <module>. 3.11+ run them all in one
    eval-loop activation: 2 frame slots each, the whole chain fits in EP_BPF_MAX_USER_FRAMES
    and must come out complete, down to the root. 3.6-3.10 run one eval-loop activation per
    call, several native frames each: the walk fills every user slot it has (all but at most
    one), keeps exactly the innermost calls in order and marks the cut (max-depth); how many
    calls that is goes to the test's output."""
    want = session["reports"][(name, "deep")]["chain"]
    assert [fn for fn, _, _ in want] == ["recurse"] * DEPTH + ["main", "<module>"], want[:3]
    leaf_lines = body_lines(DEEP, "recurse")
    p = session["procs"][(name, "deep")]
    since = session["baseline"][p.pid]
    stacks = store_stacks(profiler, p.pid, since=since)
    total = sum(c for _, c, _ in stacks.values())
    complete = cut = 0
    depths, per_call, seen = collections.Counter(), collections.Counter(), collections.Counter()
    for frames, c, r in stacks.values():
        chain = py_chain(frames)
        if chain and chain_matches(chain, want, leaf_lines) and roots_ok(frames, chain):
            complete += c
            continue
        # Cut at the slot budget: the innermost calls exactly, an abort marker for max-depth last.
        if (minor(name) <= 10 and chain and len(chain) < len(want) and
                chain_matches(chain, want[:len(chain)], leaf_lines) and r[-1] == (ABORT, MAX_DEPTH) and
                user_slots(r) >= USER_FRAMES - 1):
            cut += c
            depths[len(chain)] += c
            py_at = [i for i, (k, _) in enumerate(r) if k == CPYTHON]
            per_call[max(b - a - 1 for a, b in zip(py_at, py_at[1:]))] += c
            continue
        seen[(len(chain), sum(1 for k, _ in r if k == NATIVE), user_slots(r), r[-1])] += c
    print(f"{name}: {complete} complete, {cut} cut at the budget: Python frames {sorted(depths.items())}, "
          f"native frames between two calls at most {sorted(per_call.items())}")
    assert total >= STEADY_SAMPLES, f"{name}: {total} samples"
    assert complete + cut >= SHARE * total and (minor(name) <= 10 or complete == complete + cut), (
        f"{name}: {complete}/{total} samples with all {len(want)} Python frames, {cut} cut where the slots ran out; "
        f"others (Python frames, native frames, slots, last frame): {seen.most_common(4)}")


# ---- bad input ----

# Started again and again while the profiler samples: each process works a little, forks two
# children that work and exit, and exits; many are sampled while they exit.
SHORT = '''\
import os

def work():
    x = 0
    for i in range(300000):
        x += i
    return x

def main():
    work()
    kids = []
    for _ in range(2):
        pid = os.fork()
        if pid == 0:
            work()
            os._exit(0)
        kids.append(pid)
    print(" ".join(map(str, kids)), flush=True)
    for pid in kids:
        if os.waitpid(pid, 0)[1] != 0:
            os._exit(1)

main()
'''
SHORT_ROUNDS = 8  # processes per interpreter, one after the other (3 with the forked ones)
DAEMONS = ("ebpf-profiler-loader", "ebpf-profiler-symbolizer", "ebpf-profiler-collector",
           "ebpf-profiler-exporter")


def python_counters(profiler):
    out = profiler.busctl("get-property", "org.ebpfprofiler.Loader1", "/org/ebpfprofiler/Loader1",
                          "org.ebpfprofiler.Loader1", "PythonCounters")
    return dict(zip(re.findall(r'"([a-z-]+)"', out), map(int, re.findall(r'" (\d+)', out))))


def test_python_processes_exiting_while_sampled(profiler, scripts):
    """Many short-lived Python processes, exec'd and forked, every interpreter at once: the
    daemons live on (the same processes), the loader and BPF forget every one of them, the
    walk's counters stay consistent, and what was sampled of them is in the store with
    the right Python functions."""
    if not PYTHONS:
        pytest.skip("no CPython 3.6-3.13 on this machine")
    script = scripts / "shape_short.py"
    script.write_text(SHORT)
    daemons = {d: profiler.daemon_pid(d) for d in DAEMONS}
    assert all(daemons.values()), daemons
    before = python_counters(profiler)
    pids = []

    def one_round():
        batch = [subprocess.Popen([py, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  cwd=scripts) for py in PYTHONS.values()]
        for p in batch:
            out, err = p.communicate(timeout=300)
            assert p.returncode == 0, f"{p.args}: exited {p.returncode}: {err.decode()[-2000:]}"
            pids.extend([p.pid, *map(int, out.split())])

    def named_frames():
        with_python = 0
        names = collections.Counter()
        for pid in pids:
            for frames, c, _ in store_stacks(profiler, pid).values():
                chain = [(fn, src) for k, _, fn, src, _ in frames if k == CPYTHON]
                with_python += c if chain else 0
                names.update(fn for fn, src in chain if src == script.name)
        return with_python, names

    for _ in range(SHORT_ROUNDS):
        one_round()
    profiler.settle()
    # A frame is named by reading the process's memory, which is gone once it exits: on a
    # loaded machine the symbolizer can come too late for every process of a batch. More
    # rounds until one was in time (a deadline, not a window).
    deadline = time.monotonic() + 240
    while "work" not in named_frames()[1] and time.monotonic() < deadline:
        one_round()
        profiler.settle()
    assert profiler.proc.poll() is None, profiler.output()[-3000:]
    assert {d: profiler.daemon_pid(d) for d in DAEMONS} == daemons, "a daemon was restarted:\n" + profiler.output()[-3000:]

    # Gone processes are forgotten: by the loader, and in BPF (the exit hook, or the loader
    # when it wrote an entry after the exit). A pid already in use again is not judged.
    def forgotten():
        known = [pid for pid in pids if profiler.tables(pid) is not None and not Path(f"/proc/{pid}").exists()]
        return not known, f"{len(known)} still known to the loader: {known[:10]}"
    wait_until(forgotten, "the loader to forget the exited Python processes", 60, interval=0.5)
    for bpf_map in ("py_procs", "proc_mappings"):
        left = {pid for pid in profiler.loader_map_keys(bpf_map) & set(pids) if not Path(f"/proc/{pid}").exists()}
        assert not left, f"{bpf_map} still has entries of exited processes {sorted(left)}"

    after = python_counters(profiler)
    delta = {k: after[k] - before.get(k, 0) for k in after}
    print(f"{len(pids)} short-lived processes; PythonCounters grew by {delta}")
    assert all(after[k] >= before.get(k, 0) for k in ("samples", "frames", "eval-frames", "read-failed",
                                                       "thread-not-found", "frames-sent")), (before, after)
    assert delta["samples"] > 0 and delta["frames"] >= delta["samples"], delta
    assert delta["runtime-errors"] == 0, delta
    # Frames BPF could not place (the native walk stopped short) and the loader could not
    # either: counted and dropped; a few, not many of those sent unplaced.
    assert delta["unplaced-dropped"] <= 0.05 * delta["unplaced"], delta
    # A failed read ends one sample's Python frames; a process that exits mid-walk can cause
    # one, not one in ten of its samples.
    assert delta["read-failed"] + delta["thread-not-found"] <= 0.1 * delta["samples"], delta

    with_python, names = named_frames()
    assert with_python > 0, f"no sample of {len(pids)} short-lived processes has Python frames; {delta}"
    assert set(names) <= {"work", "main", "<module>"}, names
    assert "work" in names, names
    cli("status", env=profiler.env)


def fake_runtime(src_lib, src_exe, home, dest, py_version=False, debug_offsets=False):
    """A copy of a real --enable-shared build whose runtime says 3.99: libpython3.99.so.1.0
    (file name and SONAME), Py_Version (3.11+) and the 3.13+ _Py_DebugOffsets version set to
    3.99.0 when asked; and a copy of its executable that needs it. Returns (argv prefix, env,
    the fake runtime's path)."""
    dest.mkdir()
    old = os.path.basename(src_lib).encode()
    new = re.sub(rb"3\.\d+", b"3.99", old, count=1)
    assert len(new) == len(old), (old, new)
    data = bytearray(Path(src_lib).read_bytes())
    assert data.count(old) >= 1
    data = data.replace(old, new)
    hexver = (3 << 24 | 99 << 16 | 0xf0).to_bytes(8, "little")
    for name, wanted, at in (("Py_Version", py_version, 0), ("_PyRuntime", debug_offsets, 8)):
        if not wanted:
            continue
        offset = elf_symbol_offset(src_lib, name) + at
        if name == "_PyRuntime":
            assert data[offset - 8:offset] == b"xdebugpy", data[offset - 8:offset]
            assert data[offset + 3] == 3 and data[offset + 2] >= 13, data[offset:offset + 8].hex()
        else:
            assert data[offset + 3] == 3, data[offset:offset + 8].hex()
        data[offset:offset + 8] = hexver
    # Another build has another build ID. It also makes the file another file for the
    # profiler: a file's ID hashes its first and last 4 KiB and its size, not the middle where
    # the version is.
    notes = subprocess.run(["readelf", "-n", src_lib], capture_output=True, text=True, check=True).stdout
    build_id = bytes.fromhex(re.search(r"Build ID: ([0-9a-f]+)", notes).group(1))
    at = data.find(build_id)
    assert 0 < at < 4096 and data.count(build_id) == 1, at
    data[at:at + len(build_id)] = bytes(b ^ 0xff for b in build_id)
    lib = dest / new.decode()
    lib.write_bytes(bytes(data))
    exe = dest / "python3.99"
    exe.write_bytes(Path(src_exe).read_bytes().replace(old, new))
    exe.chmod(0o755)
    return [str(exe)], dict(os.environ, PYTHONHOME=home, LD_LIBRARY_PATH=str(dest)), lib


def elf_symbol_offset(path, name):
    """The file offset of a dynamic symbol's value (readelf)."""
    syms = subprocess.run(["readelf", "-W", "--dyn-syms", path], capture_output=True, text=True, check=True).stdout
    addr = next(int(f[1], 16) for f in (l.split() for l in syms.splitlines()) if len(f) >= 8 and f[7] == name)
    loads = subprocess.run(["readelf", "-W", "-l", path], capture_output=True, text=True, check=True).stdout
    for f in (l.split() for l in loads.splitlines()):
        if f and f[0] == "LOAD":
            off, vaddr, filesz = int(f[1], 16), int(f[2], 16), int(f[4], 16)
            if vaddr <= addr < vaddr + filesz:
                return addr - vaddr + off
    raise AssertionError(f"{name} of {path} is in no loaded segment")


FAKE_SCRIPT = '''\
def spin():
    x = 0
    while True:
        x += 1

print("ready", flush=True)
spin()
'''


def test_unknown_python_version(profiler, scripts, tmp_path):
    """Runtimes that say 3.99 (one per way a version is found: the file's name and SONAME
    (3.6-3.10), Py_Version (3.11, 3.12), the runtime's own debug offsets (3.13)), two processes
    each: native frames only, complete, through the fake runtime's eval loop; each file's
    reason counted and logged once; nothing crashes."""
    fakes = []
    by_minor = {minor(n): py for n, py in PYTHONS.items() if n.startswith("pyenv-")}
    for want, kind in (((10, 9, 8, 7), "name"), ((12, 11), "py_version"), ((13,), "debug_offsets")):
        m = next((m for m in want if m in by_minor), None)
        if m is None:
            continue
        exe = Path(by_minor[m])
        home = exe.parent.parent
        lib = next(home.glob("lib/libpython3.*.so.1.0"))
        fakes.append(fake_runtime(str(lib), str(exe), str(home), tmp_path / f"fake-{kind}",
                                  py_version=kind != "name", debug_offsets=kind == "debug_offsets"))
    if not fakes:
        pytest.skip("no pyenv CPython built with --enable-shared")
    tmp_path.chmod(0o755)
    script = scripts / "shape_fake.py"
    script.write_text(FAKE_SCRIPT)
    before = python_counters(profiler)
    # The loader's line, with the symbolizer's reason (DetectRuntime's UnusableRuntime).
    unusable = r"(\S+) looks like CPython but cannot be used for Python frames: .*CPython 3\.99: no usable layout"
    errors_logged = len(re.findall(unusable, profiler.output()))
    procs = []
    try:
        for argv, env, lib in fakes:
            for _ in range(2):
                procs.append((lib, subprocess.Popen(argv + [str(script)], stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE, env=env, cwd=scripts)))
        for lib, p in procs:
            assert read_lines(p, 1) == ["ready"], output_so_far(p.stderr)
            maps = Path(f"/proc/{p.pid}/maps").read_text()
            assert str(lib) in maps and all("libpython3." not in l or str(lib) in l for l in maps.splitlines()), maps
        pids = [p.pid for _, p in procs]
        profiler.wait_for_tables(pids)
        profiler.flush()
        baseline = {pid: profiler.stack_counts(pid) for pid in pids}
        for pid in pids:
            wait_until(lambda: profiler.sampled(pid, sum(baseline[pid].values()) + STEADY_SAMPLES),
                       f"{STEADY_SAMPLES} samples of pid {pid}", 300, interval=0.5,
                       diagnosis=lambda: profiler.diagnosis(pids))
        profiler.settle(pids)
        for lib, p in procs:
            assert profiler.process_runtime(p.pid) == ("", 0), lib
    finally:
        for _, p in procs:
            p.kill()
            p.wait()
    assert profiler.proc.poll() is None, profiler.output()[-3000:]
    after = python_counters(profiler)
    assert after["runtime-errors"] - before["runtime-errors"] == len(fakes), (before, after)
    assert after["runtimes"] == before["runtimes"], (before, after)
    logged = re.findall(unusable, profiler.output())
    assert len(logged) - errors_logged == len(fakes) and {str(l) for _, _, l in fakes} <= set(logged), logged
    for lib, p in procs:
        stacks = store_stacks(profiler, p.pid, since=baseline[p.pid])
        total = sum(c for _, c, _ in stacks.values())
        assert total >= STEADY_SAMPLES, (lib, total)
        # Of all its samples that ran the fake runtime (before the exec, the child of this
        # test's own Python had this test's Python frames, rightly).
        def runs_fake(frames):
            return any(k == NATIVE and p_ and os.path.realpath(p_) == os.path.realpath(lib) for k, p_, *_ in frames)
        python = sum(c for frames, c, _ in store_stacks(profiler, p.pid).values()
                     if runs_fake(frames) and any(k == CPYTHON for k, *_ in frames))
        assert python == 0, f"{lib}: {python} samples with Python frames"
        # Native frames to the root through the fake runtime's eval loop.
        good = sum(c for frames, c, _ in stacks.values()
                   if frames[-1][0] == NATIVE and any(
                       fn == "_PyEval_EvalFrameDefault" and p_ and os.path.realpath(p_) == os.path.realpath(lib)
                       for _, p_, fn, _, _ in frames))
        assert good >= SHARE * total, (
            f"{lib}: {good}/{total} complete native stacks through its eval loop; "
            f"{collections.Counter(tuple(show(f, 12)) for f, _, _ in stacks.values()).most_common(2)}")


def test_a_process_that_execs_into_python(profiler, scripts, tmp_path):
    """A process sampled while it runs native code (a shell polling for a file) exec()s into
    Python: the same pid's samples before the exec have no Python frame, and after it the
    generator's whole chain (the BPF side dropped the process's state at exec, the loader read
    its new mappings and asked about the interpreter)."""
    if not PYTHONS:
        pytest.skip("no CPython 3.6-3.13 on this machine")
    name = "debian-3.11" if "debian-3.11" in PYTHONS else sorted(PYTHONS)[-1]
    go = tmp_path / "go"
    sh = subprocess.Popen(["/bin/sh", "-c", 'while [ ! -e "$0" ]; do :; done; exec "$1" "$2"', str(go),
                           PYTHONS[name], str(scripts / "shape_generator.py")],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=scripts)
    try:
        wait_until(lambda: profiler.sampled(sh.pid, STEADY_SAMPLES), f"{STEADY_SAMPLES} samples of the shell",
                   300, interval=0.5, diagnosis=lambda: profiler.diagnosis([sh.pid]))
        before = profiler.stack_counts(sh.pid)
        native = store_stacks(profiler, sh.pid)
        go.touch()
        want = json.loads(read_lines(sh, 1)[0])["chain"]
        leaf_lines = body_lines(WORKLOADS["generator"], want[0][0].split(".")[-1])
        assert all(k != CPYTHON for frames, _, _ in native.values() for k, *_ in frames), \
            [show(f) for f, _, _ in native.values()][:3]

        def chained():
            flushed = profiler.sampled(sh.pid, 0)
            if not flushed[0]:
                return flushed
            good = sum(c for frames, c, _ in store_stacks(profiler, sh.pid, since=before).values()
                       if (chain := py_chain(frames)) and chain_matches(chain, want, leaf_lines)
                       and roots_ok(frames, chain))
            return good >= STEADY_SAMPLES, f"{good} samples with the chain {want} after the exec"
        wait_until(chained, f"{STEADY_SAMPLES} samples of {name} with its chain after the exec", 300,
                   interval=0.5, diagnosis=lambda: profiler.diagnosis([sh.pid]))
    finally:
        sh.kill()
        sh.wait()


# Run by one CPython: forks; the child reports its pid and chain and spins in Python until the
# file argv[1] exists, then execs argv[2:] (its stdout is the parent's); the parent waits for it.
# Only the child writes to stdout: two writers of one pipe interleave their lines' pieces when
# Python's output is unbuffered (PYTHONUNBUFFERED).
FORK_EXEC = PRELUDE + '''
def child_spin(go, argv):
    report(pid=_os.getpid)
    x = 0
    while not _os.path.exists(go):
        for i in range(10000):
            x += i
    _os.execv(argv[0], argv)

def main():
    pid = _os.fork()
    if pid == 0:
        child_spin(_sys.argv[1], _sys.argv[2:])
    _os.waitpid(pid, 0)

main()
'''


def other_version(name):
    """A CPython of another minor version than name's: pyenv's 3.7 if there is one (a
    test_callback_from_c[pyenv-3.7-*] process was started by pytest's 3.11), else the oldest."""
    others = sorted((n for n in PYTHONS if minor(n) != minor(name)), key=minor)
    return "pyenv-3.7" if "pyenv-3.7" in others else (others[0] if others else None)


def chain_samples(profiler, pid, want, leaf_lines, since=None):
    """How many of pid's samples (after since) have exactly the chain want, named, down to the root."""
    return sum(c for frames, c, _ in store_stacks(profiler, pid, since=since).values()
               if (chain := py_chain(frames)) and chain_matches(chain, want, leaf_lines) and roots_ok(frames, chain))


@contextlib.contextmanager
def forked_child_of(profiler, scripts, tmp_path, python, argv):
    """Runs FORK_EXEC under python; yields (the child's pid, the file that makes it exec argv,
    the parent), once the child's samples carry its chain, named: the symbolizer has read the
    child's memory with the first CPython's layout."""
    script = scripts / "shape_fork_exec.py"
    script.write_text(FORK_EXEC)
    go = tmp_path / "go"
    parent = subprocess.Popen([python, str(script), str(go), *argv], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, cwd=scripts, start_new_session=True)
    try:
        reported = json.loads(read_lines(parent, 1)[0])
        want, child = reported["chain"], reported["pid"]
        leaf_lines = body_lines(FORK_EXEC, "child_spin")

        def named():
            flushed = profiler.sampled(child, 0)
            if not flushed[0]:
                return flushed
            n = chain_samples(profiler, child, want, leaf_lines)
            return n >= STEADY_SAMPLES, f"{n} samples with the chain {want}"
        wait_until(named, f"{STEADY_SAMPLES} samples of the forked child {child} with its chain, named", 300,
                   interval=0.5, diagnosis=lambda: profiler.diagnosis([child]))
        yield child, go, parent
    finally:
        os.killpg(parent.pid, signal.SIGKILL)  # the child too, whether or not it reported
        parent.wait()


def test_fork_then_exec_into_another_python(profiler, scripts, tmp_path):
    """A child forked by one CPython (Debian's 3.11, like pytest's) runs that CPython, named,
    then execs another version (3.7): the same pid and start time, another image. From the
    first samples of the new image on, its Python frames are named with its own layout (the
    loader answers the new version, the symbolizer drops what it read of the old image): the
    generator's exact chain in every sample, no unnamed Python frame."""
    name = "debian-3.11" if "debian-3.11" in PYTHONS else sorted(PYTHONS, key=minor)[-1] if PYTHONS else None
    other = other_version(name) if name else None
    if not other:
        pytest.skip("no two CPython versions on this machine")
    argv = [PYTHONS[other], str(scripts / "shape_generator.py")]
    with forked_child_of(profiler, scripts, tmp_path, PYTHONS[name], argv) as (child, go, parent):
        go.touch()
        want = json.loads(read_lines(parent, 1)[0])["chain"]  # the generator reached its loop
        leaf_lines = body_lines(WORKLOADS["generator"], want[0][0].split(".")[-1])
        # The baseline once every sample of the start-up is stored: a sample that waited in the
        # loader for the new image's tables (its frames read after the code objects of the
        # modules imported meanwhile were freed) is not one "after the exec".
        profiler.settle([child])
        steady = profiler.stack_counts(child)
        profiler.wait_samples(child, sum(steady.values()) + STEADY_SAMPLES, timeout=300)
        stop_threads(child)  # each of its samples in the store named, below
        profiler.settle([child])
        assert profiler.process_runtime(child) == ("cpython", 3 << 8 | minor(other))
        stacks = store_stacks(profiler, child, since=steady)
    total = sum(c for _, c, _ in stacks.values())
    unnamed = [(frames, c) for frames, c, _ in stacks.values()
               if any(k == CPYTHON and fn is None for k, _, fn, *_ in frames)]
    good = sum(c for frames, c, _ in stacks.values()
               if (chain := py_chain(frames)) and chain_matches(chain, want, leaf_lines) and roots_ok(frames, chain))
    assert total >= STEADY_SAMPLES, total
    assert not unnamed and good >= SHARE * total, (
        f"{name} -> {other}: {sum(c for _, c in unnamed)} of {total} samples after the exec with an unnamed Python "
        f"frame ({[(show(f, 12), c) for f, c in unnamed[:3]]}), {good} with the chain {want}; "
        f"{collections.Counter(tuple(show(f, 12)) for f, _, _ in stacks.values()).most_common(3)}")


def test_fork_then_exec_out_of_python(profiler, scripts, tmp_path):
    """A child forked by CPython, named, then execs a shell that spins: no Python state is left
    (the loader answers no runtime, no sample has a Python frame)."""
    if not PYTHONS:
        pytest.skip("no CPython 3.6-3.13 on this machine")
    name = "debian-3.11" if "debian-3.11" in PYTHONS else sorted(PYTHONS)[-1]
    argv = ["/bin/sh", "-c", "echo native; while :; do :; done"]
    with forked_child_of(profiler, scripts, tmp_path, PYTHONS[name], argv) as (child, go, parent):
        go.touch()
        assert read_lines(parent, 1) == ["native"]
        profiler.settle([child])  # the baseline once the start-up's samples are stored (above)
        steady = profiler.stack_counts(child)
        profiler.wait_samples(child, sum(steady.values()) + STEADY_SAMPLES, timeout=300)
        profiler.settle([child])
        assert profiler.process_runtime(child) == ("", 0)
        stacks = store_stacks(profiler, child, since=steady)
    python = [show(f, 12) for f, _, _ in stacks.values() if any(k == CPYTHON for k, *_ in f)]
    assert sum(c for _, c, _ in stacks.values()) >= STEADY_SAMPLES
    assert not python, python[:3]
