#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Unwind completeness per workload: runs the native-unwinding workloads and Debian's own
stripped programs under `ebpf-profiler run` (private bus, 99 Hz) and prints a markdown table:

  workload | samples | first run: reaching root | reaching root | expected leaf | median frames

Every workload runs twice: the first run meets its files for the first time (their unwind
tables are extracted while it runs, with a fresh cache), the second is measured for the other
columns.

- reaching root: the thread's root frame is in the stack (main thread: __libc_start_main then
  _start in the executable; other threads: start_thread under clone3);
- expected leaf: our workloads: the leaf is the spinning function of the thread's chain (or
  the vDSO clock read it calls); cxxsort: the leaf is in cxxsort itself; Debian programs: the
  leaf is in the file that does the work (their own functions have no names: stripped);
- median frames: user-space frames per sample.

A figure, not a test (tests/integration/test_native_unwind.py asserts the thresholds).
Needs root and a built tree (ninja -C build). Usage:
  bench/completeness.py [--build DIR] [--seconds N] [--only NAME[,NAME...]]
"""
import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=str(REPO / "build"))
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--only", default="", help="comma-separated workload names")
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("completeness.py: needs root (BPF and perf events)", file=sys.stderr)
        return 1

    # The test module holds the workload definitions and the classification; reuse them.
    os.environ["EP_BUILD_DIR"] = str(Path(a.build).resolve())
    sys.path.insert(0, str(REPO / "tests" / "integration"))
    import conftest
    import test_native_unwind as t
    from expected_frames import CHAINS, SPAWN_CHILD

    t.SECONDS = a.seconds
    only = set(filter(None, a.only.split(",")))
    names = [n for n in [*sorted(t.OURS), "spawn", *sorted(t.DEBIAN)] if not only or n in only]

    def our_leaf(chains):
        leaves = {c[0] for c in chains}

        def check(pid, tid, frames):
            names = t.names_without_clock(frames)  # as the tests name them (no inlined busy loop)
            return bool(frames) and (not names or t.normalize(names[0]) in leaves)
        return check

    leaf_checks = {n: our_leaf(c) for n, c in CHAINS.items()}
    leaf_checks["spawn"] = our_leaf([SPAWN_CHILD])
    leaf_checks["cxxsort"] = t.leaf_in("cxxsort")
    for n, (files, _, _) in t.DEBIAN.items():
        leaf_checks[n] = t.leaf_in(*files)

    cache = Path(tempfile.mkdtemp(prefix="ep-bench-cache-"))
    cache.chmod(0o755)
    data = Path(tempfile.mkdtemp(prefix="ep-bench-data-"))
    rows = []
    profiler = None
    try:
        if any(n in t.DEBIAN for n in names):
            t.make_big_file(data / "big.txt", t.BIG_FILE_MB)
            t.make_database(data / "test.db")
        profiler = conftest.Profiler(["--cache-dir", str(cache / "cache")])
        namer = t.FrameNamer()
        def run_once(name):
            if name in t.OURS:
                return t.profile_ours(profiler, namer, name)  # until t.SAMPLES are stored
            if name == "spawn":
                out = data / "spawn.out"
                with open(out, "w") as f:
                    w = subprocess.Popen([str(conftest.WORKLOADS / "spawn"), str(a.seconds), "0.5"], stdout=f)
                    w.wait(timeout=a.seconds + 60)
                pids = [int(line.split()[1]) for line in out.read_text().splitlines()]
                return t.collect(profiler, pids, namer)
            argv, stop_after, _ = t.debian_command(name, data)
            p = t.run_for(argv, stop_after)
            return t.collect(profiler, [p.pid], namer)

        for name in names:
            started = time.monotonic()
            if name in t.DEBIAN and not t.which(t.debian_command(name, data)[0][0]):
                rows.append((name, "not installed", "", "", "", ""))
                continue
            first = run_once(name)
            first_root, _ = first.share(first.reaches_root)
            profiler.wait_for_tables()  # every table loaded or known not to come
            prof = run_once(name)
            root, _ = prof.share(prof.reaches_root)
            leaf, _ = prof.share(leaf_checks[name])
            rows.append((name, str(prof.total), f"{first_root:.1%}", f"{root:.1%}", f"{leaf:.1%}",
                         str(prof.median_depth())))
            print(f"{name}: done in {time.monotonic() - started:.1f}s", file=sys.stderr)
        hits = profiler.prop("Symbolizer", "UnwindCacheHits")
        misses = profiler.prop("Symbolizer", "UnwindCacheMisses")
        errors = profiler.prop("Symbolizer", "UnwindExtractErrors")
    finally:
        if profiler:
            profiler.stop()
        subprocess.run(["rm", "-rf", str(cache), str(data)], check=False)

    print(f"Unwind completeness at 99 Hz, our workloads until {t.SAMPLES} samples are stored, the others "
          f"{a.seconds:g} s "
          f"(unwind tables: {misses} extracted, {hits} from the cache, {errors} errors)\n")
    print("| workload | samples | first run: reaching root | reaching root | expected leaf | median frames |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
