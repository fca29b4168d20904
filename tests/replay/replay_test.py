#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""One replay test: capture a core of a workload (capture.py), run the native unwinder over it
(ep-replay unwind) and assert, for every thread:
  1. the unwind reached the thread's root frame (stop reason "ok");
  2. the frames are EXACTLY the expected ones, by name, innermost first;
  3. the frames are exactly those gdb finds in the same core (same PCs, same count).
The expectations are first checked against gdb's frames alone, so a wrong capture or a
wrong expectation is told apart from an unwinder bug.

Debian's own stripped programs (gzip, xz, sha256sum, openssl, sqlite3, clang++ with
libLLVM) have no expected names; their frames must equal gdb's, and end in
__libc_start_main <- the executable's _start.

Names of libc's internal functions (__libc_start_call_main, start_thread, __clone3,
__restore_rt) come from libc's separate debug file (package libc6-dbg); without it such a
frame may be "[unknown] libc.so.6", which the expectations accept in their place.

cpython (--python INTERPRETER, a path or a glob such as ~/.pyenv/versions/3.9.*/bin/python3.9):
python_chain.py runs main -> outer -> middle -> inner, inner spinning, and prints its code
objects' addresses. ep-replay walks the Python frames too (bpf/cpython-walk.h, the BPF walk as
ordinary C, from the py_procs entry the loader's code makes of the core's mapped files). The
main thread must carry exactly the Python frames inner, middle, outer, main, <module>, in
order, each run of them right before the native eval-loop frame that runs it (3.6-3.10: one
frame per activation; 3.11+: inner, which middle calls from C, in one, the other four in
another), offsets inside each code's bytecode, native
frames down to _start; and the native frames alone must be gdb's. The frames BPF would send
unplaced (a native walk that stopped before any eval loop) must be the same chain, each
activation's first frame marked.

Usage: replay_test.py WORKLOAD --replay EP_REPLAY --workloads DIR --cores DIR [--python PATH]
"""
import argparse
import glob
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capture import capture  # noqa: E402
from expected_frames import (CHAINS, CXXSORT_TAIL, SYSCALLS_TAIL, chain_equal,  # noqa: E402
                             describe_mismatch, ends_with, normalize, strip_clock_frames)

SKIP = 77
THREADS = {"threads": 3}
WORKLOADS = sorted(CHAINS) + ["cxxsort", "syscalls"]
# Debian's own stripped programs (no expected names: checked against gdb, and for reaching
# __libc_start_main and _start), with how long each runs before the dump (CPU seconds).
DEBIAN = {"gzip": 0.5, "xz": 0.5, "sha256sum": 0.5, "openssl": 0.5, "sqlite3": 0.5, "clang": 2.0}
BIG_CORE = 64 << 20
EVAL_LOOP = "_PyEval_EvalFrameDefault"  # and its .cold part


class Failure(Exception):
    pass


def names_of(frames):
    """Names of the frames, leaf first, without leading clock_gettime / vDSO frames."""
    return [n for n, _ in strip_clock_frames([(f["name"], f["module"]) for f in frames])]


def check_threads(workload, stacks, what):
    """stacks: {tid: [frame dicts]}; every thread must run one expected chain exactly, and each
    chain must be run by exactly one thread."""
    if workload in ("cxxsort", "syscalls"):
        tail = CXXSORT_TAIL if workload == "cxxsort" else SYSCALLS_TAIL
        for tid, frames in stacks.items():
            names = names_of(frames)
            if not ends_with(names, tail):
                raise Failure(f"{what}: thread {tid} does not end in {tail}:\n"
                              + describe_mismatch(names[-len(tail):], tail))
            above = frames[:len(frames) - len(tail)]
            # read() in libc, or the loop's clock: libc/vDSO clock_gettime under the workload's
            # own now() (a capture lands wherever the loop is).
            if workload == "syscalls" and any(f["module"] not in ("libc.so.6", "[vdso]") and f["name"] != "now"
                                              for f in above):
                raise Failure(f"{what}: thread {tid}: frames above read_zeroes outside libc: {above}")
        return
    expected = CHAINS[workload]
    if len(stacks) != len(expected):
        raise Failure(f"{what}: {len(stacks)} threads, expected {len(expected)}")
    unmatched = list(expected)
    for tid, frames in sorted(stacks.items()):
        names = names_of(frames)
        chain = next((c for c in unmatched if chain_equal(names, c)), None)
        if chain is None:
            raise Failure(f"{what}: thread {tid} runs none of the expected chains:\n"
                          + "\n--\n".join(describe_mismatch(names, c) for c in unmatched))
        unmatched.remove(chain)


def parse_unwind(text):
    """ep-replay unwind output → ({tid: [frames]}, {tid: stop}, "#" lines: tables, cpython)."""
    stacks, stops, tables, tid = {}, {}, [], None
    for line in text.splitlines():
        if line.startswith("#"):
            tables.append(line)
        elif line.startswith("thread "):
            parts = line.split()
            tid = int(parts[1])
            stops[tid] = parts[3]
            stacks[tid] = []
        elif line and tid is not None:
            pc, kind, where, name = line.split(" ", 3)
            module, offset = where.rsplit("+", 1)
            stacks[tid].append({"pc": int(pc, 16), "kind": kind, "module": module,
                                "offset": int(offset, 0), "name": name})
    return stacks, stops, tables


def symbolize_gdb(replay, core, gdb_threads):
    """Names gdb's frames with our own symbolization, so both are compared on equal terms."""
    lines = [f"{f['pc']:x} {f['kind']}" for t in gdb_threads for f in t["frames"]]
    r = subprocess.run([replay, "symbolize", str(core)], input="\n".join(lines) + "\n",
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise Failure(f"ep-replay symbolize failed: {r.stderr}")
    out = iter(r.stdout.splitlines())
    stacks = {}
    for t in gdb_threads:
        frames = []
        for f in t["frames"]:
            pc, kind, where, name = next(out).split(" ", 3)
            frames.append({"pc": f["pc"], "kind": f["kind"], "module": where.rsplit("+", 1)[0],
                           "name": name, "gdb_name": f["name"]})
        stacks[t["tid"]] = frames
    return stacks


def compare_with_gdb(ours, gdb):
    if sorted(ours) != sorted(gdb):
        raise Failure(f"threads differ from gdb's: {sorted(ours)} vs {sorted(gdb)}")
    for tid in ours:
        a = [(f["pc"], f["kind"]) for f in ours[tid]]
        b = [(f["pc"], f["kind"]) for f in gdb[tid]]
        if a != b:
            lines = []
            for i in range(max(len(a), len(b))):
                x = ours[tid][i] if i < len(a) else None
                y = gdb[tid][i] if i < len(b) else None
                mark = " " if x and y and (x["pc"], x["kind"]) == (y["pc"], y["kind"]) else "!"
                fx = f"{x['pc']:#x} {x['kind']} {x['name']}" if x else "-"
                fy = f"{y['pc']:#x} {y['kind']} {y['name']}" if y else "-"
                lines.append(f"  {mark} #{i}: ours {fx:60} gdb {fy}")
            raise Failure(f"thread {tid}: frames differ from gdb's:\n" + "\n".join(lines[:80]))


def make_text(path, megabytes):
    """Text over a 5000-word vocabulary: compressible, but not trivially."""
    if path.exists() and path.stat().st_size >= megabytes << 20:
        return
    rng = random.Random(1)
    syllables = ["ka", "to", "ri", "mu", "sen", "do", "la", "vi", "quo", "ter", "an", "el"]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(5000)]
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        size = 0
        while size < megabytes << 20:
            chunk = " ".join(rng.choices(words, k=200000)) + "\n"
            f.write(chunk)
            size += len(chunk)
    tmp.rename(path)


def make_database(path):
    if path.exists():
        return
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    subprocess.run(["sqlite3", str(tmp),
                    "CREATE TABLE t(a INTEGER PRIMARY KEY, b INTEGER, c TEXT);"
                    "WITH RECURSIVE s(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM s WHERE x < 200000) "
                    "INSERT INTO t SELECT x, (x * 7919) % 10007, printf('row-%d-%x', x, x * 2654435761) "
                    "FROM s;"], check=True, timeout=120)
    tmp.rename(path)


def debian_command(name, cores, source_root):
    """argv of a Debian program that runs for longer than the capture needs."""
    text = cores / "input.txt"
    if name in ("gzip", "xz", "sha256sum"):
        make_text(text, 64)
    if name == "gzip":
        return ["gzip", "-9", "-c", str(text)]
    if name == "xz":
        return ["xz", "-9", "-c", str(text)]
    if name == "sha256sum":
        return ["sha256sum"] + [str(text)] * 100
    if name == "openssl":
        return ["openssl", "speed", "-seconds", "60", "-bytes", "16384", "sha256"]
    if name == "sqlite3":
        make_database(cores / "input.db")
        return ["sqlite3", str(cores / "input.db"),
                "SELECT count(*) FROM t t1, t t2 WHERE (t1.b + t2.b) % 1000 = 7;"]
    if name == "clang":
        return ["clang++", "-O2", "-std=c++17", "-c",
                str(source_root / "tests" / "workloads" / "clang-input.cpp"),
                "-o", str(cores / "clang-input.o")]
    raise KeyError(name)


def check_debian(stacks, exe, what):
    """Stripped programs: every thread ends in __libc_start_main, then _start in the
    executable (named or not)."""
    for tid, frames in stacks.items():
        if len(frames) < 2 or frames[-1]["module"] != exe.name or \
                normalize(frames[-2]["name"]) not in ("__libc_start_main", "__libc_start_main_impl"):
            tail = [f"{f['module']}:{f['name']}" for f in frames[-3:]]
            raise Failure(f"{what}: thread {tid} does not end in __libc_start_main <- {exe.name}: {tail}")


def find_python(spec):
    """The interpreter a path or glob names (the newest match), or None."""
    matches = sorted(glob.glob(os.path.expanduser(spec)))
    return Path(os.path.realpath(matches[-1])) if matches else None


def check_cpython(frames, chain, minor, exe):
    """The main thread's frames (ours, leaf first; Python frames are kind "P") against the
    chain python_chain.py printed: [[name, code address, bytecode size]], innermost first."""
    label = {addr: name for name, addr, _ in chain}
    py = [i for i, f in enumerate(frames) if f["kind"] == "P"]
    got = [frames[i]["pc"] for i in py]
    if got != [addr for _, addr, _ in chain]:
        raise Failure(f"Python frames {[label.get(a, hex(a)) for a in got]}, expected "
                      f"{[name for name, _, _ in chain]}")
    for i, (name, _, size) in zip(py, chain):
        if not 0 <= frames[i]["offset"] < size:
            raise Failure(f"{name}: instruction offset {frames[i]['offset']} outside its {size} bytes")
    # Each activation's Python frames come right before its eval-loop native frame, and every
    # eval-loop frame has some: 3.6-3.10 run one frame per activation, 3.11+ inner (called from
    # C) in one and the four others in another.
    runs = [i for i in py if i + 1 < len(frames) and frames[i + 1]["kind"] != "P"]
    evals = [i - 1 for i, f in enumerate(frames) if f["kind"] != "P" and f["name"].startswith(EVAL_LOOP)]
    if runs != evals or len(runs) != (len(chain) if minor <= 10 else 2):
        raise Failure(f"Python frames not right before their eval loops (runs end at {runs}, "
                      f"eval-loop frames follow {evals})")
    tail = [(f["module"], normalize(f["name"])) for f in frames[-2:]]
    if tail[-1] != (exe.name, "_start") or tail[0][1] not in ("__libc_start_main", "__libc_start_main_impl"):
        raise Failure(f"the main thread does not end in __libc_start_main <- {exe.name}'s _start: {tail}")


def check_unplaced(notes, tid, chain, minor):
    """The "# unplaced" lines of thread tid (the frames BPF sends after a native walk that
    stopped before any eval loop): the same chain, each activation's first frame marked."""
    unplaced = [n.split()[3:] for n in notes if n.startswith(f"# unplaced {tid} ")]
    got = [int(code, 16) for code, _, _ in unplaced]
    if got != [addr for _, addr, _ in chain]:
        label = {addr: name for name, addr, _ in chain}
        raise Failure(f"unplaced Python frames {[label.get(a, hex(a)) for a in got]}, expected "
                      f"{[name for name, _, _ in chain]}")
    firsts = [mark == "first" for _, _, mark in unplaced]
    if firsts != [minor <= 10 or i <= 1 for i in range(len(chain))]:
        raise Failure(f"unplaced Python frames: activation marks {firsts}")


def run_cpython(a, cores):
    """The cpython workload: 0, 1 or SKIP."""
    exe = find_python(a.python)
    if not exe:
        print(f"SKIP: no CPython matches {a.python}: not installed on this machine")
        return SKIP
    name = f"cpython-{exe.parent.parent.name}-{exe.name}"  # pyenv: 3.9.18-python3.9; Debian: usr-python3.11
    out = cores / f"{name}.stdout"
    script = Path(__file__).resolve().parent / "python_chain.py"
    with open(out, "w") as f:
        cap = capture(a.replay, cores, name, [str(exe), str(script), "60"], stdout=f)
    info = json.loads(out.read_text().splitlines()[0])
    minor = info["version"][1]
    print(f"core: {cap['core']} ({cap['core'].stat().st_size} bytes), CPython 3.{minor} {exe}")
    gdb = symbolize_gdb(a.replay, cap["core"], json.loads(cap["gdb"].read_text()))

    r = subprocess.run([a.replay, "unwind", str(cap["core"])], capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(f"FAIL: ep-replay unwind exited {r.returncode}:\n{r.stderr}\n{r.stdout[-4000:]}")
        return 1
    ours, stops, notes = parse_unwind(r.stdout)
    print("\n".join(notes))
    try:
        if not any(n.startswith(f"# cpython 3.{minor}") for n in notes):
            raise Failure(f"no CPython 3.{minor} entry made of the core's files: {r.stderr}")
        bad = {tid: s for tid, s in stops.items() if s != "ok"}
        if bad:
            raise Failure(f"unwind did not reach the root frame: {bad}")
        check_cpython(ours[cap["pid"]], info["codes"], minor, exe)
        check_unplaced(notes, cap["pid"], info["codes"], minor)
        compare_with_gdb({tid: [f for f in frames if f["kind"] != "P"] for tid, frames in ours.items()}, gdb)
    except Failure as e:
        print(f"FAIL: {e}\n--- ep-replay output ---\n{r.stdout[-6000:]}")
        return 1
    label = {addr: name for name, addr, _ in info["codes"]}
    frames = ours[cap["pid"]]
    print(f"main thread: {len(frames)} frames OK: "
          + " <- ".join(f"[{label[f['pc']]}]" if f["kind"] == "P" else f["name"] for f in frames))
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=WORKLOADS + sorted(DEBIAN) + ["cpython"])
    ap.add_argument("--replay", required=True)
    ap.add_argument("--workloads", required=True)
    ap.add_argument("--cores", required=True)
    ap.add_argument("--source-root", default=str(Path(__file__).resolve().parents[2]))
    ap.add_argument("--keep-core", action="store_true", help="keep the core even when it is big")
    ap.add_argument("--python", help="cpython: the interpreter (a path or a glob, ~ expanded)")
    a = ap.parse_args()
    cores = Path(a.cores)
    cores.mkdir(parents=True, exist_ok=True)
    if a.workload == "cpython":
        if not a.python:
            ap.error("cpython needs --python")
        return run_cpython(a, cores)

    if a.workload in DEBIAN:
        argv = debian_command(a.workload, cores, Path(a.source_root))
        path = shutil.which(argv[0])
        if not path:
            print(f"SKIP: {argv[0]} is not installed")
            return SKIP
        exe = Path(os.path.realpath(path))
        argv[0] = str(exe)
        cap = capture(a.replay, cores, a.workload, argv, settle=DEBIAN[a.workload])
    else:
        exe = Path(a.workloads) / a.workload
        cap = capture(a.replay, cores, a.workload, [str(exe), "60"],
                      threads=THREADS.get(a.workload, 1))
    print(f"core: {cap['core']} ({cap['core'].stat().st_size} bytes)")
    gdb_threads = json.loads(cap["gdb"].read_text())
    gdb = symbolize_gdb(a.replay, cap["core"], gdb_threads)

    try:
        if a.workload in DEBIAN:
            check_debian(gdb, exe, "gdb (reference)")
        else:
            check_threads(a.workload, gdb, "gdb (reference)")
    except Failure as e:
        print(f"FAIL: the reference does not match the expectations (capture or expectations "
              f"are wrong):\n{e}")
        return 1

    r = subprocess.run([a.replay, "unwind", str(cap["core"])], capture_output=True, text=True,
                       timeout=600)
    if r.returncode != 0:
        print(f"FAIL: ep-replay unwind exited {r.returncode}:\n{r.stderr}\n{r.stdout[-4000:]}")
        return 1
    ours, stops, tables = parse_unwind(r.stdout)
    print("\n".join(tables))
    try:
        bad = {tid: s for tid, s in stops.items() if s != "ok"}
        if bad:
            raise Failure(f"unwind did not reach the root frame: {bad}")
        if a.workload in DEBIAN:
            check_debian(ours, exe, "native unwinder")
        else:
            check_threads(a.workload, ours, "native unwinder")
        compare_with_gdb(ours, gdb)
    except Failure as e:
        print(f"FAIL: {e}\n--- ep-replay output ---\n{r.stdout[-6000:]}")
        return 1
    for tid, frames in sorted(ours.items()):
        print(f"thread {tid}: {len(frames)} frames OK: "
              + " <- ".join(f["name"] for f in frames[:6]) + (" ..." if len(frames) > 6 else ""))
    if not a.keep_core and cap["core"].stat().st_size > BIG_CORE:
        cap["core"].unlink()  # passed, and too big to keep around in the build directory
    return 0


if __name__ == "__main__":
    sys.exit(main())
