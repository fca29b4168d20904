#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Section 1 of bench/run: the profiler's cost per sample and its share of the machine at 20,
100 and 1000 Hz per CPU, every CPU busy with a native workload with deep stacks and no frame
pointers (tests/workloads/deepchain.c, one copy per CPU).

One profiler (`ebpf-profiler run`, private bus) for the three rates: Loader1.SetFrequency
switches the rate, then after a settling second a window of W seconds is measured:

- eBPF: the run time of the profiler's own BPF programs (BPF_ENABLE_STATS:
  run_time_ns of on_sample, plus the fork/exec/exit hooks, which this workload hardly calls);
- daemons: the CPU time of the loader, symbolizer, collector and exporter over the window, from
  /proc/PID/task/*/schedstat (time on CPU in ns, summed over the threads); utime + stime of
  /proc/PID/stat (10 ms ticks, exited threads included) is printed next to it as a check;
- samples: the run count of on_sample over the window (every sample the perf events took);
- total % of machine: (eBPF + daemons CPU time) / (W × CPUs).

The exporter sends every interval to a loopback OTLP/HTTP receiver in this script
(tests/integration/otlp_receiver.py; --no-otlp: no endpoint, the exporter idles). The private
bus daemon and the `ebpf-profiler run` supervisor are left out of the total (under
systemd the system bus and systemd stand in for them); their CPU time is printed below the
table. Usage:

    sudo bench/report-cost.py [--smoke] [--json FILE] [--seconds 60,30,20] [--rates 20,100,1000]
"""
import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reportlib as rl  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="1 s windows: only checks that it works")
    ap.add_argument("--json", help="write the key results here")
    ap.add_argument("--rates", default="20,100,1000")
    ap.add_argument("--seconds", help="window per rate, comma-separated (default 60,30,20; smoke 1)")
    ap.add_argument("--workload", default="deepchain")
    ap.add_argument("--no-otlp", action="store_true", help="no OTLP endpoint: the exporter idles")
    a = ap.parse_args()
    rl.need_root("report-cost.py")
    rates = [int(r) for r in a.rates.split(",")]
    if a.seconds:
        windows = [float(s) for s in a.seconds.split(",")]
    else:
        windows = [1.0] * len(rates) if a.smoke else [60.0, 30.0, 20.0][:len(rates)]
    windows += [windows[-1]] * (len(rates) - len(windows))
    warmup = 1.0 if a.smoke else 10.0
    settle = 0.5 if a.smoke else 2.0

    rows, others = [], {}
    receiver, extra = None, []
    if not a.no_otlp:
        from otlp_receiver import OtlpReceiver
        receiver = OtlpReceiver(port=0)
        receiver.start()
        extra = ["--otlp-endpoint", rl.otlp_endpoint(receiver)]
    with rl.BpfStats():
        m = rl.ProfiledMachine(rates[0], extra)
        work = []
        try:
            total = warmup + sum(windows) + settle * len(rates) + 30
            work = [subprocess.Popen([str(rl.WORKLOADS / a.workload), str(total)])
                    for _ in range(rl.NCPU)]
            time.sleep(warmup)  # the workload's files get their unwind tables
            other_pids = m.others()
            for hz, w in zip(rates, windows):
                m.set_frequency(hz)
                time.sleep(settle)
                o0 = {k: rl.run_ns(p) for k, p in other_pids.items()}
                s0, d0, b0, c0, t0 = m.daemon_cpu_ns(), m.daemon_run_ns(), *m.bpf(), time.monotonic()
                time.sleep(w)
                b1, c1, d1, s1, t1 = *m.bpf(), m.daemon_run_ns(), m.daemon_cpu_ns(), time.monotonic()
                o1 = {k: rl.run_ns(p) for k, p in other_pids.items()}
                if c1 == c0:
                    print(f"report-cost.py: no sample at {hz} Hz in {w} s (Loader1.LastError: "
                          f"{m.profiler.prop('Loader', 'LastError')})", file=sys.stderr)
                if any(p.poll() is not None for p in work):
                    sys.exit("report-cost.py: the workload ended before the window")
                n = c1 - c0
                bpf = b1 - b0
                daemons = {d: d1[d] - d0[d] for d in d0}
                dsum = sum(daemons.values())
                stat_sum = sum(s1[d] - s0[d] for d in s0)
                machine_ns = (t1 - t0) * rl.NCPU * 1e9
                rows.append(dict(hz=hz, seconds=t1 - t0, samples=n, bpf_ns=bpf, daemons_ns=dsum,
                                 per_daemon=daemons, stat_pct=100 * stat_sum / machine_ns,
                                 bpf_ns_per_sample=bpf / n if n else 0,
                                 daemons_us_per_sample=dsum / n / 1e3 if n else 0,
                                 bpf_pct=100 * bpf / machine_ns, daemons_pct=100 * dsum / machine_ns,
                                 total_pct=100 * (bpf + dsum) / machine_ns))
                others[hz] = {k: (o1[k] - o0[k]) / (t1 - t0) / 1e3 for k in o0}
        finally:
            for p in work:
                p.kill()
                p.wait()
            m.stop()
            if receiver:
                exported = len(receiver.requests)
                receiver.stop()

    print(f"{rl.NCPU} CPUs busy with `{a.workload}` (one copy per CPU, no frame pointers); "
          f"one profiler, rate switched with SetFrequency; "
          + (f"OTLP export to a loopback receiver ({exported} requests).\n" if receiver else "no OTLP export.\n"))
    print("| Hz per CPU | window s | samples | eBPF ns/sample | daemons µs/sample | eBPF % | daemons % "
          "(utime+stime) | total % of machine |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['hz']} | {r['seconds']:.0f} | {r['samples']:,} | {r['bpf_ns_per_sample']:,.0f} "
              f"| {r['daemons_us_per_sample']:,.1f} | {r['bpf_pct']:.3f} | {r['daemons_pct']:.3f} ({r['stat_pct']:.3f}) "
              f"| {r['total_pct']:.3f} |")
    print()
    print("Daemons' CPU time per second of window (ms/s), by daemon:\n")
    print("| Hz per CPU | " + " | ".join(d.removeprefix("ebpf-profiler-") for d in rl.DAEMONS)
          + " | not counted: " + ", ".join(sorted(next(iter(others.values()), {}))) + " |")
    print("|---:|" + "---:|" * len(rl.DAEMONS) + "---|")
    for r in rows:
        o = others.get(r["hz"], {})
        print(f"| {r['hz']} | " + " | ".join(f"{r['per_daemon'][d] / r['seconds'] / 1e6:.2f}"
                                              for d in rl.DAEMONS)
              + " | " + ", ".join(f"{o[k] / 1e3:.2f}" for k in sorted(o)) + " |")
    print(f"\nDaemons' CPU time from schedstat (ns); utime + stime in brackets ({1000 // rl.CLK_TCK} ms ticks). "
          f"eBPF = all the profiler's BPF programs (on_sample and the fork/exec/exit hooks); "
          f"{'smoke run: windows too short to mean anything' if a.smoke else 'machine: ' + rl.machine()}.")

    out = {"cpus": rl.NCPU, "workload": a.workload, "smoke": a.smoke}
    for r in rows:
        hz = r["hz"]
        out[f"samples_{hz}hz"] = r["samples"]
        out[f"window_s_{hz}hz"] = round(r["seconds"], 2)
        out[f"bpf_ns_per_sample_{hz}hz"] = round(r["bpf_ns_per_sample"], 1)
        out[f"daemons_us_per_sample_{hz}hz"] = round(r["daemons_us_per_sample"], 3)
        out[f"bpf_cost_pct_{hz}hz"] = round(r["bpf_pct"], 5)
        out[f"daemons_cost_pct_{hz}hz"] = round(r["daemons_pct"], 5)
        out[f"daemons_stat_cost_pct_{hz}hz"] = round(r["stat_pct"], 5)
        out[f"total_cost_pct_{hz}hz"] = round(r["total_pct"], 5)
    rl.write_json(a.json, out)


if __name__ == "__main__":
    main()
