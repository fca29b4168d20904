#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Report section "Scale": what tracking many processes costs, how soon a running program has
complete stacks, and how many samples per second the pipeline takes before it drops some.

(a) Processes and executables: N sleeping processes (default 2000) over E distinct
    executables (default 200: copies of /usr/bin/sleep in a temporary directory, each with
    different bytes appended, so each is its own file ID). The loader tracks what runs when it
    starts (a scan of /proc) and later processes from their first sample (one that never runs
    is never read), so the figure is a profiler start with them running against a start
    without them: time to ready (and the scan), time until every tracked file's unwind table
    is loaded (PendingTables 0, TablesLoaded steady), Loader1.Processes/Files/TablesLoaded, the
    kernel memory of the BPF maps (`memlock` of every map the loader holds a descriptor of,
    /proc/PID/fdinfo) and Loader1.TableBytes (the per-file tables), the loader's RSS. A third
    start has the tables in the symbolizer's cache (a restart).
(b) Time to the first complete stack: one copy per CPU of tests/workloads/deepchain runs
    before the profiler starts; the store is polled (Collector1.Flush, then the samples of the
    workload) until a sample reaches the thread's root (as bench/completeness.py decides).
    Once with an empty unwind-table cache (first sight: the symbolizer extracts the tables),
    once with the cache that run left (a restart).
(c) Sustained sampling: all CPUs busy (deepchain per CPU), Loader1.SetFrequency to 1000,
    2000, 5000, 10000 Hz; per window the samples taken (Loader1.Samples), recorded
    (Collector1.SamplesWritten), and every counted loss: LostSamples (BPF ring buffer full),
    RingFullDrops (loader→collector ring full), DecodeErrors (collector); "unaccounted" is
    what no counter explains (should be 0: drops are counted, not silent). Then, at the last
    frequency, the collector and then the loader are stopped (SIGSTOP) for 4 s in a window, so
    their rings fill: the losses must show in RingFullDrops and LostSamples.
(d) Interpreters running before the start: every CPython on the machine in a busy loop, next
    to a process that maps the biggest files on the machine (their unwind tables are extracted
    at the same time, seconds each on a cold disk), empty cache: the time until the first and
    the last process has its Python frames on (Loader1.PythonCounters "processes", polled),
    against the time until every table is loaded. A process's Python frames wait for the
    symbolizer's DetectRuntime answer about its interpreter, not for the tables.

    sudo bench/report-scale.py [--processes 2000] [--executables 200] [--frequencies 1000,2000,5000,10000]
                               [--seconds 8] [--smoke] [--json FILE]
"""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reportlib as rl  # noqa: E402

import test_native_unwind as tnu  # noqa: E402  (tests/integration, on the path through reportlib)
from conftest import cpython_interpreters, read_lines  # noqa: E402


SLEEP = "/usr/bin/sleep"


# ---- measuring ---------------------------------------------------------------------------

def loader_maps(pid):
    """{map id: memlock bytes} of the BPF maps the process holds descriptors of."""
    out = {}
    for fd in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            info = dict(line.split(":", 1) for line in fd.read_text().splitlines() if ":" in line)
        except OSError:
            continue
        if "map_id" in info:
            out[int(info["map_id"])] = int(info.get("memlock", "0"))
    return out


def map_names(ids):
    maps = json.loads(subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True,
                                     text=True, check=True).stdout)
    return {m["id"]: m.get("name", "?") for m in maps if m["id"] in ids}


def rss_bytes(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def memory(m):
    loader = m.pids["ebpf-profiler-loader"]
    maps = loader_maps(loader)
    return dict(maps=maps, map_bytes=sum(maps.values()), table_bytes=m.profiler.prop("Loader", "TableBytes"),
                tables=m.profiler.prop("Loader", "TablesLoaded"), loader_rss=rss_bytes(loader))


def wait_until(pred, timeout, step=0.05):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if pred():
            return time.monotonic()
        time.sleep(step)
    return None


def settled(p, timeout=60):
    """Waits until the loader has no table pending and TablesLoaded stays put for 1 s."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        now = (p.prop("Loader", "TablesLoaded"), p.prop("Loader", "PendingTables"))
        if now == last and now[1] == 0:
            return True
        last = now
        time.sleep(1.0)
    return False


# ---- (a) processes and executables -------------------------------------------------------

def make_executables(tmp, n):
    paths = []
    data = Path(SLEEP).read_bytes()
    for i in range(n):
        p = tmp / f"sleeper-{i:04d}"
        p.write_bytes(data + i.to_bytes(4, "little"))
        p.chmod(0o755)
        paths.append(p)
    return paths


def profiler_start(cache):
    """Starts a profiler; returns (machine, seconds to ready, the loader's /proc scan in ms)."""
    t0 = time.monotonic()
    m = rl.start_machine(99, ["--cache-dir", str(cache)])
    ready = time.monotonic() - t0
    scan_ms = None
    for line in m.profiler.output().splitlines():
        if "scan of /proc took" in line:
            scan_ms = int(line.split("scan of /proc took")[1].split()[0])
    return m, ready, scan_ms, t0


def started_state(cache):
    """A profiler start: ready time, scan, time until the unwind tables of every tracked
    process's files are loaded, the counts and the memory then; the profiler is stopped."""
    m, ready, scan_ms, t0 = profiler_start(cache)
    try:
        p = m.profiler
        ok = settled(p, 180)
        tables_s = time.monotonic() - t0
        mem = memory(m)
        cpu = sum(m.daemon_cpu_ns().values()) / 1e9
        return dict(ready_s=ready, scan_ms=scan_ms, tables_s=tables_s if ok else None,
                    processes=p.prop("Loader", "Processes"), files=p.prop("Loader", "Files"),
                    tables=mem["tables"], map_bytes=mem["map_bytes"], table_bytes=mem["table_bytes"],
                    loader_rss=mem["loader_rss"], daemons_cpu_s=cpu,
                    maps=mem["maps"], names=map_names(set(mem["maps"])),
                    table_errors=p.prop("Loader", "TableErrors"),
                    mapping_overflows=p.prop("Loader", "MappingOverflows"))
    finally:
        m.stop()


def scale_processes(n_procs, n_exes, tmp, cache):
    """The loader tracks the processes that run when it starts (a scan of /proc), and later
    ones from their first sample (a process that never runs is never read): so N sleeping
    processes are measured as a start with them running, against a start without them."""
    exes = make_executables(tmp, n_exes)
    procs = []
    res = {"processes": n_procs, "executables": n_exes}
    try:
        res["without"] = started_state(cache)
        t0 = time.monotonic()
        for i in range(n_procs):
            procs.append(subprocess.Popen([str(exes[i % n_exes]), "3600"]))
        res["spawn_s"] = time.monotonic() - t0
        time.sleep(0.5)
        res["with"] = started_state(cache)
        res["with_again"] = started_state(cache)  # the 200 tables now from the cache
    finally:
        for w in procs:
            w.kill()
        for w in procs:
            w.wait()
    for k in ("without", "with", "with_again"):
        r = res[k]
        r["per_map"] = {}
        for i, b in r.pop("maps").items():
            name = r["names"].get(i, str(i))
            r["per_map"][name] = r["per_map"].get(name, 0) + b
        del r["names"]
    return res


# ---- (b) time to the first complete stack ------------------------------------------------

def first_complete(cache, seconds_max):
    workloads = [subprocess.Popen([str(rl.WORKLOADS / "deepchain"), str(seconds_max + 30)],
                                  stdout=subprocess.DEVNULL) for _ in range(rl.NCPU)]
    pids = [w.pid for w in workloads]
    namer = tnu.FrameNamer()
    res = {}
    m = None
    try:
        time.sleep(0.5)
        t0 = time.monotonic()
        m = rl.start_machine(99, ["--cache-dir", str(cache)])
        res["ready_s"] = time.monotonic() - t0
        p = m.profiler
        while time.monotonic() - t0 < seconds_max:
            p.flush()
            t = time.monotonic() - t0
            with p.db() as con:
                prof = tnu.Profile(con, pids, namer)
            if prof.total and "first_sample_s" not in res:
                res["first_sample_s"] = t
            _, n = prof.share(prof.reaches_root)
            if n:
                res["first_complete_s"] = t
                res["share_at_first"] = n / prof.total
                break
            time.sleep(0.1)
        res["unwind_tables_extracted"] = p.prop("Symbolizer", "UnwindCacheMisses")
        res["unwind_tables_cached"] = p.prop("Symbolizer", "UnwindCacheHits")
    finally:
        if m:
            m.stop()
        for w in workloads:
            w.kill()
            w.wait()
    return res


# ---- (c) sustained sampling --------------------------------------------------------------

COUNTERS = [("Loader", "Samples"), ("Loader", "LostSamples"), ("Loader", "RingFullDrops"),
            ("Loader", "TracesSent"), ("Collector", "Traces"), ("Collector", "DecodeErrors"),
            ("Collector", "SamplesWritten")]


def snapshot(m):
    p = m.profiler
    return dict({f"{d}.{n}": p.prop(d, n) for d, n in COUNTERS},
                t=time.monotonic(), cpu=sum(m.daemon_cpu_ns().values()), bpf=m.bpf()[0])


def window(m, s0, rate_before, rate_file, **row):
    """Closes a window opened with snapshot() s0: what was taken, where each sample went."""
    m.profiler.flush()
    s1 = snapshot(m)
    d = {k: s1[k] - s0[k] for k in s0}
    taken = d["Loader.Samples"]
    counted = (d["Loader.LostSamples"] + d["Loader.RingFullDrops"] + d["Collector.DecodeErrors"]
               + d["Collector.SamplesWritten"])
    return dict(row, seconds=d["t"], taken=taken, written=d["Collector.SamplesWritten"],
                lost=d["Loader.LostSamples"], ring_full=d["Loader.RingFullDrops"],
                decode_errors=d["Collector.DecodeErrors"], traces_sent=d["Loader.TracesSent"],
                traces_in=d["Collector.Traces"], unaccounted=taken - counted,
                cpu_s=(d["cpu"] + d["bpf"]) / 1e9, bpf_s=d["bpf"] / 1e9,
                max_sample_rate_before=rate_before, max_sample_rate_after=int(rate_file.read_text()))


def sustained(freqs, seconds, cache, pause):
    rows = []
    rate_file = Path("/proc/sys/kernel/perf_event_max_sample_rate")
    rate = rate_file.read_text()
    m = rl.start_machine(freqs[0], ["--cache-dir", str(cache)])
    workloads = [subprocess.Popen([str(rl.WORKLOADS / "deepchain"), str(3600)], stdout=subprocess.DEVNULL)
                 for _ in range(rl.NCPU)]
    try:
        time.sleep(1.0)
        settled(m.profiler, 30)
        for hz in freqs:
            m.set_frequency(hz)
            time.sleep(1.0)
            m.profiler.flush()
            rate_before = int(rate_file.read_text())
            s0 = snapshot(m)
            time.sleep(seconds)
            rows.append(window(m, s0, rate_before, rate_file, hz=hz,
                               set_frequency=m.profiler.prop("Loader", "Frequency")))
            print(f"{hz} Hz: done", file=sys.stderr)
        # No drop at these rates: stop one daemon for a while at the last frequency so its
        # ring fills, and show the loss in the counters (loader stopped: the BPF ring buffer,
        # LostSamples; collector stopped: the trace ring, RingFullDrops).
        for who in ("ebpf-profiler-collector", "ebpf-profiler-loader"):
            m.profiler.flush()
            s0 = snapshot(m)
            os.kill(m.pids[who], signal.SIGSTOP)
            time.sleep(pause)
            os.kill(m.pids[who], signal.SIGCONT)
            time.sleep(max(seconds - pause, 1.0))
            rows.append(window(m, s0, rate_before, rate_file, hz=freqs[-1], stopped=who, pause_s=pause))
            print(f"{who} stopped: done", file=sys.stderr)
    finally:
        for w in workloads:
            w.kill()
            w.wait()
        m.stop()
        # The kernel lowers the limit when sampling interrupts take too long: give it back.
        if rate_file.read_text() != rate:
            rate_file.write_text(rate)
    return rows


# ---- (d) interpreters running before the start ----------------------------------------------

PY_BUSY = "print('ready', flush=True)\nx = 0\nwhile True:\n    x += 1\n"
# Maps its arguments executable, so that the loader asks for their tables.
HOLD_MAPPED = """import mmap, os, sys, time
held = [mmap.mmap(os.open(f, os.O_RDONLY), 0, prot=mmap.PROT_READ | mmap.PROT_EXEC) for f in sys.argv[1:]]
print('ready', flush=True)
time.sleep(3600)
"""
BIG_FILES = ["/usr/lib/x86_64-linux-gnu/libLLVM-15.so.1", "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1",
             "/usr/bin/node", "/usr/bin/x86_64-linux-gnu-lto-dump-12"]


def runtime_file(pid):
    """The file that holds pid's CPython runtime: its libpython, else its executable."""
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        path = line.split(maxsplit=5)[5] if len(line.split(maxsplit=5)) == 6 else ""
        if "libpython" in os.path.basename(path):
            return os.path.realpath(path)
    return os.path.realpath(f"/proc/{pid}/exe")


def runtimes_on(p):
    """{runtime file: True} for each the loader has turned Python frames on for (its log line
    "CPython 3.X in PATH: Python frames on.")."""
    marker = ": Python frames on."
    return {line.split(" in ", 1)[1].removesuffix(marker): True
            for line in p.output().splitlines() if line.endswith(marker) and " in " in line}


def pythons_before(tmp, cache, big, seconds_max):
    pythons = cpython_interpreters()
    if not pythons:
        return None
    script = tmp / "busy.py"
    script.write_text(PY_BUSY)
    procs = []
    m = None
    res = {"interpreters": len(pythons), "big_files": [f for f in big if os.access(f, os.R_OK)]}
    try:
        procs.append(subprocess.Popen(["/usr/bin/python3", "-c", HOLD_MAPPED, *res["big_files"]],
                                      stdout=subprocess.PIPE))
        procs += [subprocess.Popen([py, str(script)], stdout=subprocess.PIPE) for py in pythons.values()]
        for w in procs:
            read_lines(w, 1)
        files = {runtime_file(w.pid) for w in procs[1:]}
        res["runtime_files"] = len(files)
        t0 = time.monotonic()
        m = rl.start_machine(99, ["--cache-dir", str(cache)])
        res["ready_s"] = time.monotonic() - t0
        p = m.profiler
        seen = {}
        while time.monotonic() - t0 < seconds_max and len(seen) < len(files):
            t = time.monotonic() - t0
            for f in files & runtimes_on(p).keys():
                seen.setdefault(f, t)
            time.sleep(0.01)
        if seen:
            res["first_s"] = min(seen.values())
        if len(seen) == len(files):
            res["last_s"] = max(seen.values())
        res["tables_s"] = time.monotonic() - t0 if settled(p, seconds_max) else None
        res["extracted"] = p.prop("Symbolizer", "UnwindCacheMisses")
    finally:
        for w in procs:
            w.kill()
            w.wait()
        if m:
            m.stop()
    return res


def mib(b):
    return f"{b / 1048576:.2f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=2000)
    ap.add_argument("--executables", type=int, default=200)
    ap.add_argument("--frequencies", default="1000,2000,5000,10000")
    ap.add_argument("--seconds", type=float, default=8, help="window per frequency in (c)")
    ap.add_argument("--smoke", action="store_true", help="a few seconds: proves the script works")
    ap.add_argument("--json")
    a = ap.parse_args()
    rl.need_root("report-scale.py")
    if a.smoke:
        a.processes, a.executables, a.frequencies, a.seconds = 50, 5, "1000", 2
    freqs = [int(f) for f in a.frequencies.split(",")]

    tmp = Path(tempfile.mkdtemp(prefix="ep-scale-"))
    tmp.chmod(0o755)
    out = {"machine": rl.machine(), "ncpu": rl.NCPU}
    try:
        with rl.BpfStats():
            out["processes"] = scale_processes(a.processes, a.executables, tmp, tmp / "cache-a")
            print("(a) done", file=sys.stderr)
            out["first_stack_cold"] = first_complete(tmp / "cache-b", 20 if a.smoke else 60)
            out["first_stack_warm"] = first_complete(tmp / "cache-b", 20 if a.smoke else 60)
            print("(b) done", file=sys.stderr)
            out["sustained"] = sustained(freqs, a.seconds, tmp / "cache-b", 1.5 if a.smoke else 4)
            print("(c) done", file=sys.stderr)
            out["pythons_before"] = pythons_before(tmp, tmp / "cache-d", [] if a.smoke else BIG_FILES,
                                                   30 if a.smoke else 180)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    r = out["processes"]
    print("### Scale\n")
    print(f"Machine: {out['machine']}.\n")
    print(f"**(a) {r['processes']} sleeping processes over {r['executables']} distinct executables**: "
          f"a profiler start with them running against one without them (starting them took "
          f"{r['spawn_s']:.1f} s)\n")
    fmt = lambda v: f"{v:.2f}" if isinstance(v, (int, float)) else "not reached"
    w0, w1, w2 = r["without"], r["with"], r["with_again"]
    print("| start | ready (on the bus) | /proc scan | tables loaded after | Processes | Files | TablesLoaded "
          "| BPF maps (memlock) | TableBytes | loader RSS | daemons' CPU by then |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, x in ((f"without them", w0), (f"with them, tables extracted", w1), (f"with them, tables from the cache", w2)):
        print(f"| {name} | {x['ready_s']:.2f} s | {x['scan_ms']} ms | {fmt(x['tables_s'])} s | {x['processes']} "
              f"| {x['files']} | {x['tables']} | {mib(x['map_bytes'])} MiB | {mib(x['table_bytes'])} MiB "
              f"| {mib(x['loader_rss'])} MiB | {x['daemons_cpu_s'] * 1000:.0f} ms |")
    dp = w2["processes"] - w0["processes"]
    df = w2["files"] - w0["files"]
    if dp > 0:
        print(f"\nDifference for {dp} more processes and {df} more files (cached start): BPF maps "
              f"{(w2['map_bytes'] - w0['map_bytes']) / 1024:,.0f} KiB "
              f"({(w2['map_bytes'] - w0['map_bytes']) / dp:,.0f} bytes per process), tables "
              f"{(w2['table_bytes'] - w0['table_bytes']) / 1024:,.0f} KiB "
              f"({(w2['table_bytes'] - w0['table_bytes']) / max(df, 1):,.0f} bytes per file), loader RSS "
              f"{(w2['loader_rss'] - w0['loader_rss']) / 1048576:.1f} MiB, scan "
              f"{(w2['scan_ms'] or 0) - (w0['scan_ms'] or 0)} ms.")
    grown = {k: (w0["per_map"].get(k, 0), v) for k, v in w2["per_map"].items() if v != w0["per_map"].get(k, 0)}
    if grown:
        print("Maps that grew (memlock bytes): " + ", ".join(f"{k} {a:,} → {b:,}" for k, (a, b) in grown.items()))
    print("\n**(b) Time from start to the first complete stack** (workload running before the start; "
          "store polled with Collector1.Flush)\n")
    print("| unwind-table cache | ready (on the bus) | first sample of the workload stored | first complete stack stored | complete share then |")
    print("|---|---:|---:|---:|---:|")
    for name, key in (("empty (first sight)", "first_stack_cold"), ("warm (restart)", "first_stack_warm")):
        b = out[key]
        print(f"| {name} | {b['ready_s']:.2f} s | {fmt(b.get('first_sample_s'))} s "
              f"| {fmt(b.get('first_complete_s'))} s | {100 * b.get('share_at_first', 0):.0f} % |")

    print(f"\n**(c) Sustained sampling**, {rl.NCPU} CPUs busy ({rl.NCPU}× deepchain), {a.seconds:g} s per frequency\n")
    print("| Hz per CPU | asked samples/s | taken/s | recorded/s | LostSamples | RingFullDrops | DecodeErrors "
          "| unaccounted | profiler CPU % of machine |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in out["sustained"]:
        name = f"{c['hz']}" + (f", {c['stopped'].removeprefix('ebpf-profiler-')} stopped {c['pause_s']:g} s"
                               if c.get("stopped") else "")
        print(f"| {name} | {c['hz'] * rl.NCPU:,} | {c['taken'] / c['seconds']:,.0f} | {c['written'] / c['seconds']:,.0f} "
              f"| {c['lost']:,} | {c['ring_full']:,} | {c['decode_errors']:,} | {c['unaccounted']:,} "
              f"| {100 * c['cpu_s'] / (c['seconds'] * rl.NCPU):.1f} |")
    rates = {(c["max_sample_rate_before"], c["max_sample_rate_after"]) for c in out["sustained"]}
    print(f"\nkernel.perf_event_max_sample_rate during (c): {sorted(rates)}. "
          "unaccounted = taken − (recorded + LostSamples + RingFullDrops + DecodeErrors); the windows are "
          "closed with Collector1.Flush, so samples in flight at a window's edge move to the next, and the "
          "seven counters are read one after the other over the bus (tens of ms: ~1 % of a window at "
          "20,000 samples/s). A stopped daemon's losses appear in its ring's counter.")
    d = out["pythons_before"]
    if d is None:
        print("\n**(d) Interpreters running before the start**: no CPython on this machine.")
    else:
        big = ", ".join(os.path.basename(f) for f in d["big_files"]) or "none (smoke run)"
        print(f"\n**(d) Interpreters running before the start**: {d['interpreters']} CPythons in a busy loop "
              f"({d['runtime_files']} runtime files), next to a process mapping {big}; empty cache\n")
        print("| ready (on the bus) | first runtime on | last runtime on | every table loaded | tables extracted |")
        print("|---:|---:|---:|---:|---:|")
        print(f"| {d['ready_s']:.2f} s | {fmt(d.get('first_s'))} s | {fmt(d.get('last_s'))} s "
              f"| {fmt(d.get('tables_s'))} s | {d['extracted']} |")
        print("\nA runtime is on when the loader logs \"CPython 3.X in FILE: Python frames on.\" (polled every "
              "10 ms from ready on: a time equal to ready means on before the bus answered); from then on BPF walks "
              "the Python frames of every process that maps the file.")
    rl.write_json(a.json, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
