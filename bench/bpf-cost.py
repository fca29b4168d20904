#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""eBPF cost per sample and per frame of the native (stack-delta) unwinder, against two
frame-pointer walks of the same depth, measured in the same run.

The workloads are the 1000-deep recursion of tests/workloads/recurse.c: `recurse` is built
without frame pointers (every frame unwound from its CFI table), `recurse-fp-nocfi` with frame
pointers and its .eh_frame removed. Rows:
  native tables          our unwinder on `recurse`;
  frame pointers (ours)  our unwinder on `recurse-fp-nocfi`: a frame-pointer step per frame,
                         each still looking the address up (a file may get a table any time);
  frame pointers (kernel) the kernel's own walk (bpf_get_stack, BPF_F_USER_STACK: what perf -g
                         and frame-pointer eBPF profilers use) on `recurse-fp-nocfi`, in a
                         program of its own (build/bpf/bench-fp-walk), kernel.perf_event_max_stack
                         raised so it is not cut at 127 frames.
One copy per CPU runs so samples are of the workload, not of idle CPUs. The kernel's own
accounting (BPF_ENABLE_STATS: run_time_ns / run_cnt of the sampling program) gives the
cost.

    sudo /usr/bin/python3 bench/bpf-cost.py [--seconds 6] [--frequency 99] [--depth 1000]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration"))
from conftest import BUILD, WORKLOADS, Profiler, stacks_for_pid  # noqa: E402
from reportlib import BpfStats  # noqa: E402

MAX_STACK = Path("/proc/sys/kernel/perf_event_max_stack")


def on_sample_ids():
    progs = json.loads(subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True,
                                      text=True, check=True).stdout)
    return {p["id"]: p for p in progs if p.get("name") == "on_sample"}


def held_prog_ids(pid):
    """Ids of the BPF programs a process holds a descriptor of (a program or a link to one)."""
    ids = set()
    for f in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            ids.update(int(line.split()[1]) for line in f.read_text().splitlines()
                       if line.startswith("prog_id:"))
        except (OSError, ValueError, IndexError):
            pass
    return ids


PROG_ID = None  # the on_sample of the profiler this script started (others may be running)


def prog_stats():
    p = on_sample_ids()[PROG_ID]
    return p.get("run_time_ns", 0), p.get("run_cnt", 0)


def measure(profiler, binary, seconds, depth):
    def start():
        return [subprocess.Popen([str(WORKLOADS / binary), str(seconds), str(depth)])
                for _ in range(os.cpu_count() or 1)]

    for w in start():  # warm-up: the process's files get their tables
        w.wait()
    t0, c0 = prog_stats()
    procs = start()
    for w in procs:
        w.wait()
    t1, c1 = prog_stats()
    profiler.flush()
    time.sleep(1.5)
    frames = []
    with profiler.db() as con:
        for w in procs:
            for stack, count in stacks_for_pid(con, w.pid):
                frames += [sum(1 for kind, _ in stack if kind == 1)] * count
    n = c1 - c0
    return n, (t1 - t0) / max(n, 1), statistics.median(frames) if frames else 0


def measure_kernel_walk(binary, seconds, depth, frequency):
    """The kernel's frame-pointer walk: (samples, ns per sample, frames per user stack)."""
    procs = [subprocess.Popen([str(WORKLOADS / binary), str(seconds + 2), str(depth)])
             for _ in range(os.cpu_count() or 1)]
    try:
        out = subprocess.run([str(BUILD / "bpf" / "bench-fp-walk"), str(BUILD / "bpf" / "fp-walk.bpf.o"),
                              str(frequency), str(seconds)], capture_output=True, text=True, check=True).stdout
    finally:
        for w in procs:
            w.wait()
    r = json.loads(out)
    return r["samples"], r["run_time_ns"] / max(r["samples"], 1), r["frames"] / max(r["user_stacks"], 1)


def restore_max_stack(value, timeout=60):
    """Puts kernel.perf_event_max_stack back; the kernel refuses while anything uses call chains
    (another profiler started meanwhile), so it tries again until that is over, or says so."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            MAX_STACK.write_text(value)
            return
        except OSError as e:
            if time.monotonic() > deadline:
                print(f"bpf-cost.py: cannot put kernel.perf_event_max_stack back to {value} ({e.strerror}); "
                      f"set it by hand", file=sys.stderr)
                return
            time.sleep(0.5)


def measure_all(args):
    """The rows of the table: our unwinders, then the kernel's walk."""
    before = set(on_sample_ids())
    profiler = Profiler(["--frequency", str(args.frequency)])
    try:
        new = sorted(set(on_sample_ids()) - before)
        if len(new) > 1:  # another profiler started at the same time: the one our loader holds
            held = held_prog_ids(profiler.daemon_pid("ebpf-profiler-loader"))
            new = [i for i in new if i in held]
        if len(new) != 1:
            sys.exit(f"bpf-cost.py: cannot tell the profiler's on_sample program (new: {new})")
        global PROG_ID
        PROG_ID = new[0]
        rows = [("native tables", *measure(profiler, "recurse", args.seconds, args.depth)),
                ("frame pointers (ours)", *measure(profiler, "recurse-fp-nocfi", args.seconds, args.depth))]
    finally:
        profiler.stop()
    # The depth limit can only change while no program or event uses call chains: after ours,
    # and not while another profiler (or perf) runs, when the kernel's walk stops at its limit.
    old_max = MAX_STACK.read_text().strip()
    raised = False
    try:
        try:
            MAX_STACK.write_text(str(max(int(old_max), args.depth + 64)))
            raised = True
        except OSError as e:
            print(f"kernel.perf_event_max_stack stays {old_max} ({e.strerror}: call chains in use): "
                  f"the kernel's walk stops there", file=sys.stderr)
        rows.append(("frame pointers (kernel)",
                     *measure_kernel_walk("recurse-fp-nocfi", args.seconds, args.depth, args.frequency)))
    finally:
        if raised:
            restore_max_stack(old_max)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--frequency", type=int, default=99)
    ap.add_argument("--depth", type=int, default=1000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bpf-cost.py: needs root")

    with BpfStats():
        rows = measure_all(args)

    print(f"| unwinder | samples | median user frames | ns per sample | ns per frame |")
    print(f"|---|---:|---:|---:|---:|")
    per_frame = {}
    for name, n, ns, frames in rows:
        per_frame[name] = ns / frames if frames else float("nan")
        print(f"| {name} | {n} | {frames:.0f} | {ns:,.0f} | {per_frame[name]:.1f} |")
    for baseline in ("frame pointers (ours)", "frame pointers (kernel)"):
        print(f"\nnative tables / {baseline}, cost per frame: "
              f"{per_frame['native tables'] / per_frame[baseline]:.2f}x")


if __name__ == "__main__":
    main()
