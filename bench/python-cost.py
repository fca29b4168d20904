#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""eBPF cost per CPython frame: the sampling program's run time per sample while a CPython
recursion D deep spins, for D = 5, 50, 100, and the slope over D (ns per Python frame).

The workload recurses D - 1 times (f → f → ... → f, D Python frames under <module>) and spins
in the deepest one. One copy per CPU (--copies), at nice -20, so the samples are of it and
not of whatever else the machine runs; what is left of the others is measured (a window with
no workload, before each interpreter) and taken out: with n samples of the workload in the
store, c_bg the background's ns per sample and N, T the program's run count and time over
the window, ns per sample = (T - (N - n) * c_bg) / n. The kernel's own accounting
(BPF_ENABLE_STATS: run_time_ns / run_cnt of the profiler's on_sample) gives T and N.

3.11+ run Python-to-Python calls in one eval-loop activation, so D adds Python frames only;
up to 3.10 every Python call is also a few native frames (the eval loop and its callers),
unwound from their tables, so the slope there is per Python frame *and* its native frames.
The "py frames" columns are from the store (CPython frames per sample of the workload) and
from Loader1.PythonCounters (frames / samples over the window, every CPython process); "chain
complete" is the share of the workload's samples whose Python chain is whole: D frames of f and
<module> (the walk never gave up on a frame). The same run measures the native unwinder the same
way on tests/workloads/recurse (no frame pointers, every frame from its table) at the same
depths, for the ns per native frame beside the ns per Python frame.

    sudo /usr/bin/python3 bench/python-cost.py [--seconds 6] [--frequency 99] [--depths 5,50,100]
                                               [--python PATH ...] [--copies N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from conftest import WORKLOADS, Profiler  # noqa: E402
from reportlib import BpfStats  # noqa: E402

CPYTHON, NATIVE = 5, 1

SCRIPT = r'''
import sys, time
def f(n, deadline):
    if n > 1:
        return f(n - 1, deadline)
    x = 0
    while time.time() < deadline:
        for i in range(2000):
            x += i
    return x
sys.setrecursionlimit(10000)
f(int(sys.argv[1]), time.time() + float(sys.argv[2]))
'''


def on_sample_ids():
    progs = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True,
                                      text=True, check=True).stdout)
    return {p["id"]: p for p in progs if p.get("name") == "on_sample"}


def prog_stats(prog_id):
    p = on_sample_ids()[prog_id]
    return p.get("run_time_ns", 0), p.get("run_cnt", 0)


def py_counters(profiler):
    out = subprocess.run(["busctl", f"--address={profiler.bus}", "--json=short", "get-property",
                          "org.ebpfprofiler.Loader1", "/org/ebpfprofiler/Loader1",
                          "org.ebpfprofiler.Loader1", "PythonCounters"],
                         capture_output=True, text=True, check=True, timeout=30).stdout
    return {k: int(v) for k, v in json.loads(out)["data"].items()}


def store_frames(profiler, pids):
    """[(python frames, native frames)] per sample of pids, from the store."""
    out = []
    with profiler.db() as con:
        kinds = dict(con.execute("SELECT id, kind FROM frames"))
        for pid in pids:
            for blob, count in con.execute(
                    "SELECT st.frames, SUM(s.count) FROM samples s JOIN processes p ON p.id = s.process "
                    "JOIN stacks st ON st.id = s.stack WHERE p.pid = ? GROUP BY st.id", (pid,)):
                ks = [kinds.get(int.from_bytes(blob[o:o + 8], "little")) for o in range(0, len(blob), 8)]
                out += [(ks.count(CPYTHON), ks.count(NATIVE))] * count
    return out


def window(profiler, prog, argvs, seconds):
    """Runs argvs (at nice -20) for `seconds`; returns (run time ns, run count, pids)."""
    t0, c0 = prog_stats(prog)
    procs = [subprocess.Popen(a, preexec_fn=lambda: os.nice(-20)) for a in argvs]
    if not argvs:
        time.sleep(seconds)
    for p in procs:
        p.wait()
    t1, c1 = prog_stats(prog)
    return t1 - t0, c1 - c0, [p.pid for p in procs]


def measure(profiler, prog, argv, depths, seconds, copies):
    """argv(depth, seconds): the workload's command line. One row per depth."""
    # Warm-up: the loader examines the runtime (and loads the tables) when a process maps it first.
    subprocess.run(argv(3, 0.5), check=True)
    time.sleep(1)
    bt, bn, _ = window(profiler, prog, [], seconds)
    c_bg = bt / bn if bn else 0.0
    rows = []
    for d in depths:
        k0 = py_counters(profiler)
        t, n, pids = window(profiler, prog, [argv(d, seconds)] * copies, seconds)
        time.sleep(2.5)  # PythonCounters are emitted every 2 s
        k1 = py_counters(profiler)
        profiler.flush()
        time.sleep(1.5)
        frames = store_frames(profiler, pids)
        mine = len(frames)
        ns = (t - max(n - mine, 0) * c_bg) / mine if mine else float("nan")
        ks = k1.get("samples", 0) - k0.get("samples", 0)
        kf = k1.get("frames", 0) - k0.get("frames", 0)
        rows.append(dict(depth=d, samples=n, mine=mine, share=mine / n if n else 0, raw=t / n if n else 0,
                         ns=ns, py=statistics.median(f[0] for f in frames) if frames else 0,
                         native=statistics.median(f[1] for f in frames) if frames else 0,
                         complete=sum(f[0] == d + 1 for f in frames) / mine if mine else float("nan"),
                         counters=kf / ks if ks else float("nan"),
                         truncated=k1.get("truncated", 0) - k0.get("truncated", 0)))
    return c_bg, bn, rows


def slope(xs, ys):
    mx, my = statistics.mean(xs), statistics.mean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else float("nan")


def default_pythons():
    home = Path(os.environ.get("BENCH_PYENV", Path.home() / ".pyenv" / "versions"))
    out = []
    for minor in ("3.12", "3.9"):
        found = sorted(home.glob(f"{minor}.*/bin/python{minor}"))
        if found:
            out.append(str(found[-1]))
    return out


def measure_pythons(args, depths, pythons, script):
    """The native baseline and each interpreter's rows, under one profiler."""
    before = set(on_sample_ids())
    profiler = Profiler(["--frequency", str(args.frequency)])
    results = []
    try:
        new = sorted(set(on_sample_ids()) - before)
        if len(new) != 1:
            sys.exit(f"python-cost.py: cannot tell the profiler's on_sample program (new: {new})")
        native = measure(profiler, new[0], lambda d, sec: [str(WORKLOADS / "recurse"), str(sec), str(d)],
                         depths, args.seconds, args.copies)
        for py in pythons:
            results.append((py, *measure(profiler, new[0], lambda d, sec, py=py: [py, str(script), str(d), str(sec)],
                                         depths, args.seconds, args.copies)))
    finally:
        profiler.stop()
    return native, results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--frequency", type=int, default=99)
    ap.add_argument("--depths", default="5,50,100")
    ap.add_argument("--copies", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--python", action="append")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("python-cost.py: needs root")
    depths = [int(d) for d in args.depths.split(",")]
    pythons = args.python or default_pythons()
    if not pythons:
        sys.exit("python-cost.py: no pyenv 3.12 / 3.9 (give --python)")

    tmp = Path(tempfile.mkdtemp(prefix="ep-pycost-"))
    tmp.chmod(0o755)
    script = tmp / "recurse.py"
    script.write_text(SCRIPT)
    script.chmod(0o644)
    try:
        with BpfStats():
            native, results = measure_pythons(args, depths, pythons, script)
    finally:
        script.unlink()
        tmp.rmdir()

    print("| python | D | samples (workload share) | py frames/sample (store / counters) | chain complete "
          "| native frames/sample | ns per sample (raw) | ns per sample |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for py, c_bg, bn, rows in results:
        name = "python" + Path(py).name.removeprefix("python")
        for r in rows:
            print(f"| {name} | {r['depth']} | {r['samples']} ({100 * r['share']:.0f} %) "
                  f"| {r['py']:.0f} / {r['counters']:.1f} | {100 * r['complete']:.1f} % | {r['native']:.0f} "
                  f"| {r['raw']:,.0f} "
                  f"| {r['ns']:,.0f}{' *' if r['share'] < 0.9 else ''} |")
    if any(r["share"] < 0.9 for _, _, _, rows in results for r in rows):
        print("\n* under 90 % of the samples were the workload's: the machine was busy, the background "
              "correction (its cost measured without the workload) is approximate")
    print()
    c_bg, bn, rows = native
    nat_ns = slope([r["native"] for r in rows], [r["ns"] for r in rows])
    points = ", ".join(f"D={r['depth']} {r['ns']:,.0f} ns ({r['native']:.0f} frames)" for r in rows)
    print(f"native (recurse, every frame from its table): {nat_ns:.1f} ns per native frame ({points}); "
          f"background {c_bg:,.0f} ns per sample")
    for py, c_bg, bn, rows in results:
        name = "python" + Path(py).name.removeprefix("python")
        s = slope([r["py"] for r in rows], [r["ns"] for r in rows])
        sd = slope([r["depth"] for r in rows], [r["ns"] for r in rows])
        nat = slope([r["py"] for r in rows], [r["native"] for r in rows])
        trunc = sum(r["truncated"] for r in rows)
        print(f"{name}: {sd:.1f} ns per unit of D, {s:.1f} ns per Python frame "
              f"(with {nat:.1f} native frames per Python frame); background {c_bg:,.0f} ns per sample "
              f"over {bn} samples; truncated walks {trunc}")


if __name__ == "__main__":
    main()
