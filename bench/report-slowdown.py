#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Section 2 of bench/run: how much slower a fixed amount of CPU work gets under the profiler.

The benchmark is tests/workloads/fixedwork.c: BURSTS bursts of computation (~1 ms each) at the
bottom of a 30-deep recursion without frame pointers, one copy per CPU (so the daemons compete
with it for the CPUs, as on a busy host); its time is the wall time until every copy is done.
Runs alternate: without the profiler, with it at 20 Hz, with it at 1000 Hz, ROUNDS times,
rotating the order each round. A run "with" starts a fresh profiler (`ebpf-profiler run`,
private bus), runs a short warm-up copy of the benchmark (its files get their unwind tables),
waits 3 s (its start-up work done), then the timed run, then stops the profiler. No OTLP
endpoint: the exporter idles (a receiver here would take CPU from the benchmark). The slowdown is the median over rounds of
(time with / time without of the same round) - 1. Usage:

    sudo bench/report-slowdown.py [--smoke] [--json FILE] [--rounds 5] [--bursts 4000] [--rates 20,1000]
"""
import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reportlib as rl  # noqa: E402


def timed(bursts, depth, copies):
    t0 = time.monotonic()
    procs = [subprocess.Popen([str(rl.WORKLOADS / "fixedwork"), str(bursts), str(depth)])
             for _ in range(copies)]
    for p in procs:
        if p.wait() != 0:
            sys.exit(f"report-slowdown.py: fixedwork exited {p.returncode}")
    return time.monotonic() - t0


def run_once(hz, bursts, depth, copies, settle):
    if hz == 0:
        return timed(bursts, depth, copies)
    m = rl.ProfiledMachine(hz)
    try:
        timed(max(bursts // 20, 20), depth, copies)  # warm-up: unwind tables loaded
        time.sleep(settle)  # the daemons' start-up work done
        return timed(bursts, depth, copies)
    finally:
        m.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="1 round of tiny runs: only checks that it works")
    ap.add_argument("--json", help="write the key results here")
    ap.add_argument("--rounds", type=int)
    ap.add_argument("--bursts", type=int, help="bursts per copy (~1 ms each; default 4000, smoke 100)")
    ap.add_argument("--depth", type=int, default=30)
    ap.add_argument("--rates", default="20,1000")
    a = ap.parse_args()
    rl.need_root("report-slowdown.py")
    if not (rl.WORKLOADS / "fixedwork").exists():
        sys.exit(f"report-slowdown.py: {rl.WORKLOADS / 'fixedwork'} missing (ninja -C build)")
    rounds = a.rounds or (1 if a.smoke else 5)
    bursts = a.bursts or (100 if a.smoke else 4000)
    configs = [0] + [int(r) for r in a.rates.split(",")]

    times = {c: [] for c in configs}
    timed(max(bursts // 20, 20), a.depth, rl.NCPU)  # the binary and libc in the page cache
    for i in range(rounds):
        order = configs[i % len(configs):] + configs[:i % len(configs)]
        for c in order:
            times[c].append(run_once(c, bursts, a.depth, rl.NCPU, 0.5 if a.smoke else 3))

    base = times[0]
    print(f"`fixedwork {bursts} {a.depth}` (~{bursts / 1000:.1f} s of work), one copy per CPU "
          f"({rl.NCPU}), {rounds} round{'s' if rounds > 1 else ''} alternated; a fresh profiler per run.\n")
    print("| profiler | runs | median s | min s | max s | slowdown (median of per-round ratios) |")
    print("|---|---:|---:|---:|---:|---:|")
    out = {"cpus": rl.NCPU, "bursts": bursts, "depth": a.depth, "rounds": rounds, "smoke": a.smoke,
           "baseline_s": round(statistics.median(base), 4)}
    for c in configs:
        ts = times[c]
        name = "none" if c == 0 else f"{c} Hz per CPU"
        if c == 0:
            slow = "—"
        else:
            ratio = statistics.median(t / b for t, b in zip(ts, base))
            slow = f"{100 * (ratio - 1):+.2f} %"
            out[f"slowdown_pct_{c}hz"] = round(100 * (ratio - 1), 3)
            out[f"median_s_{c}hz"] = round(statistics.median(ts), 4)
        print(f"| {name} | {len(ts)} | {statistics.median(ts):.3f} | {min(ts):.3f} | {max(ts):.3f} | {slow} |")
    spread = 100 * (max(base) - min(base)) / statistics.median(base)
    out["baseline_spread_pct"] = round(spread, 3)
    print(f"\nRun-to-run spread without the profiler: {spread:.1f} % (max - min over median); "
          f"{'smoke run: too short to mean anything' if a.smoke else 'machine: ' + rl.machine()}.")
    rl.write_json(a.json, out)


if __name__ == "__main__":
    main()
