#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Report section "Peers in the same run": our profiler against `perf record -a -g` (frame
pointers) and `perf record -a --call-graph dwarf` (a copy of the user stack per sample, unwound
by `perf report`/`perf script` later), one after the other in one invocation, on the same
workload at the same frequency for the same time.

The workload: one copy per CPU of tests/workloads/deepchain (a 25-deep call chain, -O2
-fomit-frame-pointer, f15 has an 8 KiB stack frame), so nearly every sample is of it. It has no
frame pointers: a frame-pointer walk (`perf -g`) cannot reach the thread's root, and perf's
default DWARF stack copy (8 KiB) stops at f15's frame; that is what the comparison shows. At
the first frequency perf also runs with the largest copy it allows (dwarf,65528), which reaches
the root at eight times the data.

Per tool:
- CPU: ours = the run time of its eBPF programs (BPF_ENABLE_STATS) + the four daemons'
  utime+stime over the profiled window (start-up not included, it is reported apart), in two
  windows on one profiler: "first sight" (the workload's unwind tables are extracted and its
  symbols read in the window) and "steady" (the same workload again); perf =
  the perf process's own utime+stime from start to exit (wait4), which includes writing
  perf.data and the build-id pass at its end. The kernel's own sampling work for perf (the
  frame-pointer walk, the copy of the user stack) runs in the sampled task and is not counted
  (the workloads' system time is given for it). `perf script`'s CPU to turn the data into
  stacks is given apart (post-processing: where the DWARF unwinding of perf happens).
- CPU % of machine = CPU / (window × CPUs), the window being the time the tool sampled (perf:
  from its start to the SIGINT, 0.5 s more than the workload); µs per sample = CPU / samples
  taken in it.
- bytes/sample: perf = perf.data size / samples in it; ours = growth of the store file over
  both windows (after `run` stopped: WAL checkpointed) / samples written.
- reaches root: share of the workload's samples whose stack ends at the thread's root: perf =
  the outermost frame of `perf script` is _start / __libc_start_call_main / __libc_start_main
  (main thread) or start_thread / clone3 (other threads); ours = as bench/completeness.py
  (__libc_start_main then _start in the executable; start_thread under clone3).

    sudo bench/report-peers.py [--seconds 15] [--frequencies 99,1000] [--big-dwarf first|all|none] [--smoke] [--json FILE]
"""
import argparse
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reportlib as rl  # noqa: E402

sys.path.insert(0, str(rl.REPO / "tests" / "replay"))
import test_native_unwind as tnu  # noqa: E402


MAIN_ROOTS = {"_start", "__libc_start_call_main", "__libc_start_main", "__libc_start_main_impl"}
THREAD_ROOTS = {"start_thread", "clone3", "__clone3", "__clone"}


def start_workloads(name, seconds):
    return [subprocess.Popen([str(rl.WORKLOADS / name), f"{seconds:g}"], stdout=subprocess.DEVNULL)
            for _ in range(rl.NCPU)]


def reap(procs):
    """Waits for the workloads; returns their summed (user, system) CPU seconds."""
    u = s = 0.0
    for p in procs:
        _, status, ru = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        u += ru.ru_utime
        s += ru.ru_stime
    return u, s


# ---- ours ------------------------------------------------------------------------------

def store_bytes(store):
    return sum(os.path.getsize(p) for p in (store, Path(f"{store}-wal")) if os.path.exists(p))


def ours_window(m, seconds, workload):
    p = m.profiler
    written0 = p.prop("Collector", "SamplesWritten")
    samples0, lost0 = p.prop("Loader", "Samples"), p.prop("Loader", "LostSamples")
    cpu0 = m.daemon_cpu_ns()
    bpf0, _ = m.bpf()
    t0 = time.monotonic()
    procs = start_workloads(workload, seconds)
    wu, ws = reap(procs)
    window = time.monotonic() - t0
    bpf1, _ = m.bpf()
    samples1, lost1 = p.prop("Loader", "Samples"), p.prop("Loader", "LostSamples")
    p.flush()
    time.sleep(1.5)
    cpu1 = m.daemon_cpu_ns()
    written = p.prop("Collector", "SamplesWritten") - written0
    with p.db() as con:
        prof = tnu.Profile(con, [w.pid for w in procs], tnu.FrameNamer())
    root, _ = prof.share(prof.reaches_root)
    daemons = {d: (cpu1[d] - cpu0[d]) / 1e9 for d in cpu0}
    bpf_s = (bpf1 - bpf0) / 1e9
    return dict(hz=m.hz, window_s=window, samples=samples1 - samples0, lost=lost1 - lost0,
                written=written, cpu_s=bpf_s + sum(daemons.values()), bpf_s=bpf_s, daemons_s=daemons,
                workload_samples=prof.total, root_share=root, workload_user_s=wu, workload_sys_s=ws,
                post_cpu_s=None)


def run_ours(hz, seconds, workload, cache):
    """Two windows on one profiler: the first meets the workload's files for the first time
    (their unwind tables extracted, symbols read), the second is the steady state."""
    t_start = time.monotonic()
    m = rl.start_machine(hz, ["--cache-dir", str(cache)])
    m.hz = hz
    startup_s = time.monotonic() - t_start
    p = m.profiler
    try:
        startup_cpu = sum(m.daemon_cpu_ns().values()) / 1e9
        store0 = store_bytes(p.store)
        first = ours_window(m, seconds, workload)
        steady = ours_window(m, seconds, workload)
        # Stop `run` (its Flush, the collector closes the store: WAL checkpointed) and weigh
        # the store before the temporary directory goes.
        p.proc.send_signal(signal.SIGTERM)
        p.proc.wait(timeout=30)
        store1 = store_bytes(p.store)
    finally:
        m.stop()
    written = first["written"] + steady["written"]
    for r, name in ((first, "ebpf-profiler, first sight"), (steady, "ebpf-profiler, steady")):
        r.update(tool=name, startup_s=startup_s, startup_cpu_s=startup_cpu, data_bytes=store1 - store0,
                 bytes_per_sample=(store1 - store0) / written if written else None)
    return [first, steady]


# ---- perf ------------------------------------------------------------------------------

def parse_perf_script(text, pids):
    """(samples, workload samples, workload samples reaching the root) from `perf script`
    output with comm,pid,tid and the callchain (ip,sym,dso)."""
    total = mine = rooted = 0
    for block in text.split("\n\n"):
        lines = [l for l in block.splitlines() if l.strip()]
        if not lines:
            continue
        m = re.match(r"\s*(.*?)\s+(-?\d+)/(-?\d+)\s*$", lines[0])
        if not m:
            continue
        total += 1
        pid, tid = int(m.group(2)), int(m.group(3))
        if pid not in pids:
            continue
        mine += 1
        user = [l.split(None, 1) for l in lines[1:] if "[kernel.kallsyms]" not in l]
        if not user:
            continue
        last = user[-1][1] if len(user[-1]) > 1 else ""
        sym = re.sub(r"\+0x[0-9a-f]+", "", last.rsplit(" (", 1)[0]).strip()
        if sym in (MAIN_ROOTS if pid == tid else THREAD_ROOTS):
            rooted += 1
    return total, mine, rooted


def run_perf(name, callgraph, hz, seconds, workload, tmp):
    data = tmp / (re.sub(r"[^a-z0-9]+", "-", name) + ".data")
    argv = ["perf", "record", "-a", *callgraph, "-F", str(hz), "-o", str(data)]
    t_perf = time.monotonic()
    perf = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(0.5)  # perf has opened its events and written the synthesized mmaps
    procs = start_workloads(workload, seconds)
    wu, ws = reap(procs)
    # Its samples are of the whole time it sampled, so that is its window.
    window = time.monotonic() - t_perf
    perf.send_signal(signal.SIGINT)
    _, status, ru = os.wait4(perf.pid, 0)
    perf.returncode = os.waitstatus_to_exitcode(status)
    err = perf.stderr.read().decode(errors="replace")
    # perf record re-raises the SIGINT it stopped on after writing its data.
    if perf.returncode not in (0, -signal.SIGINT) or not data.exists():
        raise RuntimeError(f"{' '.join(argv)} failed ({perf.returncode}): {err}")
    size = data.stat().st_size
    lost = re.search(r"lost (\d+) chunks", err)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,pid,tid,ip,sym,dso"],
                         capture_output=True, text=True, errors="replace")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    post = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    total, mine, rooted = parse_perf_script(out.stdout, {p.pid for p in procs})
    data.unlink()
    return dict(tool=name, hz=hz, window_s=window, samples=total,
                lost_chunks=int(lost.group(1)) if lost else 0, written=total,
                cpu_s=ru.ru_utime + ru.ru_stime, bpf_s=None, daemons_s=None, startup_s=None,
                startup_cpu_s=None, data_bytes=size, bytes_per_sample=size / total if total else None,
                workload_samples=mine, root_share=rooted / mine if mine else 0.0,
                workload_user_s=wu, workload_sys_s=ws, post_cpu_s=post)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--frequencies", default="99,1000")
    ap.add_argument("--workload", default="deepchain")
    ap.add_argument("--big-dwarf", choices=("first", "all", "none"), default="first",
                    help="also perf --call-graph dwarf,65528 (the largest stack copy perf allows) at the "
                         "first frequency (default), at all, or none")
    ap.add_argument("--smoke", action="store_true", help="a few seconds: proves the script works")
    ap.add_argument("--json")
    a = ap.parse_args()
    rl.need_root("report-peers.py")
    if not shutil.which("perf"):
        sys.exit("report-peers.py: perf is not installed")
    if a.smoke:
        a.seconds, a.frequencies, a.big_dwarf = 2, "99", "none"
    freqs = [int(f) for f in a.frequencies.split(",")]
    tools = [("perf -g", ["-g"]), ("perf --call-graph dwarf", ["--call-graph", "dwarf"])]
    big = ("perf --call-graph dwarf,65528", ["--call-graph", "dwarf,65528"])

    tmp = Path(tempfile.mkdtemp(prefix="ep-peers-"))
    tmp.chmod(0o755)
    rows = []
    try:
        with rl.BpfStats():
            for hz in freqs:
                rows += run_ours(hz, a.seconds, a.workload, tmp / f"cache-{hz}")
                print(f"ebpf-profiler {hz} Hz: done", file=sys.stderr)
                more = [big] if a.big_dwarf == "all" or (a.big_dwarf == "first" and hz == freqs[0]) else []
                for name, cg in tools + more:
                    rows.append(run_perf(name, cg, hz, a.seconds, a.workload, tmp))
                    print(f"{name} {hz} Hz: done", file=sys.stderr)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"### Peers in the same run\n")
    print(f"Machine: {rl.machine()}. Workload: {rl.NCPU}× `{a.workload}` (no frame pointers), "
          f"{a.seconds:g} s per tool, tools one after the other.\n")
    for hz in freqs:
        print(f"**{hz} Hz per CPU**\n")
        print("| tool | CPU % of machine | µs CPU per sample | bytes/sample | samples | reaches root % "
              "| workload system time % | post-processing µs/sample |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            if r["hz"] != hz:
                continue
            pct = 100 * r["cpu_s"] / (r["window_s"] * rl.NCPU)
            us = 1e6 * r["cpu_s"] / r["samples"] if r["samples"] else float("nan")
            bps = f"{r['bytes_per_sample']:,.0f}" if r["bytes_per_sample"] is not None else "–"
            post = (f"{1e6 * r['post_cpu_s'] / r['samples']:,.0f}" if r["post_cpu_s"] is not None
                    and r["samples"] else "– (symbolized live)")
            wsys = 100 * r["workload_sys_s"] / (r["window_s"] * rl.NCPU)
            print(f"| {r['tool']} | {pct:.3f} | {us:,.1f} | {bps} | {r['samples']:,} "
                  f"| {100 * r['root_share']:.1f} | {wsys:.2f} | {post} |")
        print()
    for r in rows:
        if r["tool"].startswith("ebpf-profiler"):
            d = ", ".join(f"{k.removeprefix('ebpf-profiler-')} {v * 1000:.0f}" for k, v in r["daemons_s"].items())
            print(f"- {r['tool']} {r['hz']} Hz: eBPF {r['bpf_s'] * 1000:.0f} ms, daemons (ms): {d}; "
                  f"{r['lost']} lost; start-up {r['startup_s']:.1f} s wall, "
                  f"{r['startup_cpu_s'] * 1000:.0f} ms daemon CPU (not in the table)")
    for r in rows:
        if r.get("lost_chunks"):
            print(f"- {r['tool']} {r['hz']} Hz: perf reported {r['lost_chunks']} lost chunks")
    print("- perf: CPU of the perf record process (start to exit, with the data write and build-id "
          "pass); its in-kernel sampling work is in the workload's system time. Post-processing = "
          "`perf script` (unwinding, symbols) per sample, which perf needs before any stack exists.")
    print("- bytes/sample: perf.data / samples; ours: store file growth / samples written "
          "(OTLP on the wire: see bench/README.md, 38–143 bytes per sample).")
    rl.write_json(a.json, {"machine": rl.machine(), "workload": a.workload, "seconds": a.seconds,
                           "ncpu": rl.NCPU, "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
