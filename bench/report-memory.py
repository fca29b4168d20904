#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Section 4 of bench/run: the resident memory of the four daemons (loader, symbolizer,
collector, exporter) over a run with process churn, against the design goal of 64 MB together
in steady state (docs: DESIGN.md, "Performance goals").

One profiler (`ebpf-profiler run` on a private bus, as the end-to-end tests start it; the
collector closes an interval every 2 s there) at the installed service's default rate, 20 Hz
per CPU (--frequency). Three kinds of churn run together for the whole run, all from one small
C program compiled with cc into a temporary directory at start:

- short processes: several per second (--spawn-rate), each spinning 20-50 ms, then exiting;
  thousands over a 10-minute run;
- one process with thousands of threads (--threads, default 2000): every thread alternately
  spins ~0.5 ms and sleeps ~1 s, and after a life of 20-100 s exits and is replaced by a new
  thread (a new tid) with the same name, so the count stays constant and the tids churn;
- hundreds of distinct executables (--executables, default 300): copies of the program, each
  with its own GNU build ID and a different trailing byte (so a distinct file ID: content hash
  of the first and last 4 KiB and the size), run one after the other for 100 ms, spread evenly
  over the run, each new to the profiler when it starts.

Every --every seconds (default 5) /proc/PID/smaps_rollup of each daemon is read: Rss, Pss and
Anonymous. Printed: start (first sample, as the churn starts) / peak / end (last sample, churn
still running) RSS and PSS per daemon and summed; the growth check (least-squares slope of the
summed RSS and PSS over the first third and over the last third of the run, in MB per minute:
the memory levels off when the last third's slope is small); a time series, one row a minute.
MB here is 2^20 bytes. A daemon restarted by the supervisor (pid change) is followed and
counted. Usage:

    sudo bench/report-memory.py [--minutes 10] [--smoke] [--json FILE] [--every 5]
                                [--frequency 20] [--threads 2000] [--executables 300]
                                [--spawn-rate 8]
"""
import argparse
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reportlib as rl  # noqa: E402

SHORT = {"ebpf-profiler-loader": "loader", "ebpf-profiler-symbolizer": "symbolizer",
         "ebpf-profiler-collector": "collector", "ebpf-profiler-exporter": "exporter"}
GOAL_MB = 64
MB = 1024 * 1024

CHURN_C = r'''
/* churn spin MS: spin MS milliseconds, exit.
 * churn threads N SECONDS: N threads, each alternately spinning ~SPIN_US and sleeping ~PERIOD_MS,
 * replaced by a new thread of the same name after a life of LIFE_MIN..LIFE_MAX seconds. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define SPIN_US 500
#define PERIOD_MS 1000
#define LIFE_MIN 20
#define LIFE_MAX 100

static volatile uint64_t sink;
static double deadline;
static volatile long created;

static double now(void) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double) ts.tv_sec + (double) ts.tv_nsec / 1e9;
}

__attribute__((noinline)) static void spin_for(double seconds) {
        double until = now() + seconds;
        uint64_t x = sink;
        while (now() < until)
                for (int i = 0; i < 20000; i++)
                        x = x * 6364136223846793005u + 1442695040888963407u;
        sink = x;
}

static void start_worker(long slot);

__attribute__((noinline)) static void *worker(void *arg) {
        long slot = (long) arg;
        unsigned seed = (unsigned) (slot * 2654435761u) ^ (unsigned) (now() * 1000);
        char name[16];

        snprintf(name, sizeof name, "churn-%ld", slot);
        pthread_setname_np(pthread_self(), name);
        double end = now() + LIFE_MIN + (double) (rand_r(&seed) % ((LIFE_MAX - LIFE_MIN) * 1000)) / 1000;
        while (now() < end && now() < deadline) {
                spin_for(SPIN_US * (0.5 + (double) (rand_r(&seed) % 1000) / 1000) / 1e6);
                long ms = PERIOD_MS / 2 + rand_r(&seed) % PERIOD_MS;
                struct timespec ts = { ms / 1000, (ms % 1000) * 1000000 };
                nanosleep(&ts, NULL);
        }
        if (now() < deadline)
                start_worker(slot);
        return NULL;
}

static void start_worker(long slot) {
        pthread_attr_t attr;
        pthread_t t;

        pthread_attr_init(&attr);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        while (pthread_create(&t, &attr, worker, (void *) slot) != 0)
                usleep(10000);
        __atomic_add_fetch(&created, 1, __ATOMIC_RELAXED);
        pthread_attr_destroy(&attr);
}

int main(int argc, char **argv) {
        if (argc == 3 && strcmp(argv[1], "spin") == 0) {
                spin_for(atof(argv[2]) / 1000);
                return 0;
        }
        if (argc == 4 && strcmp(argv[1], "threads") == 0) {
                long n = atol(argv[2]);
                deadline = now() + atof(argv[3]);
                for (long i = 0; i < n; i++)
                        start_worker(i);
                printf("started %ld\n", n);
                fflush(stdout);
                while (now() < deadline)
                        sleep(1);
                printf("created %ld\n", created);
                fflush(stdout);
                _exit(0); /* the workers may still be in their last sleep */
        }
        fprintf(stderr, "usage: churn spin MS | churn threads N SECONDS\n");
        return 2;
}
'''


def build_id_note(data):
    """(offset, size) of the GNU build ID's descriptor in an ELF64 file, or None."""
    if data[:4] != b"\x7fELF" or data[4] != 2:
        return None
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize) for i in range(shnum)]
    stroff = sections[shstrndx][4]
    for name, _type, _flags, _addr, off, size, *_ in sections:
        end = data.index(b"\0", stroff + name)
        if data[stroff + name:end] == b".note.gnu.build-id":
            namesz, descsz, _ = struct.unpack_from("<III", data, off)
            desc = off + 12 + ((namesz + 3) & ~3)
            return desc, descsz
    return None


def make_executables(src, tmp, count):
    """count copies of src, each with its own build ID and trailing bytes."""
    data = bytearray(src.read_bytes())
    note = build_id_note(data)
    out = []
    for i in range(count):
        copy = bytearray(data)
        if note:
            off, size = note
            copy[off + size - 4:off + size] = struct.pack("<I", i + 1)
        copy += struct.pack("<I", i + 1)  # a distinct tail: a distinct file ID even without a note
        path = tmp / f"distinct-{i:04d}"
        path.write_bytes(copy)
        path.chmod(0o755)
        out.append(path)
    return out


def read_rollup(pid):
    """{Rss, Pss, Anonymous, ...} in bytes from /proc/PID/smaps_rollup, or None."""
    try:
        text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines()[1:]:
        key, _, rest = line.partition(":")
        parts = rest.split()
        if len(parts) == 2 and parts[1] == "kB":
            out[key] = int(parts[0]) * 1024
    return out


def vm_hwm(pid):
    """The kernel's high-water mark of the process's RSS (VmHWM), in bytes, or 0."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def top_mappings(pid, n=4):
    """[(name, rss bytes, anonymous bytes)] of the n biggest mappings by RSS, mappings of one
    file (or [heap], [stack], anonymous) added up."""
    try:
        text = Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return []
    sizes, name = {}, None
    for line in text.splitlines():
        first = line.split(None, 1)[0]
        if "-" in first and not first.endswith(":"):
            parts = line.split(None, 5)
            name = os.path.basename(parts[5].strip()) if len(parts) > 5 and parts[5].strip() else "[anon]"
            if name.startswith("[stack:") or name.startswith("[anon:"):
                name = "[anon]"
        elif first in ("Rss:", "Anonymous:"):
            e = sizes.setdefault(name, [0, 0])
            e[0 if first == "Rss:" else 1] += int(line.split()[1]) * 1024
    return sorted(((k, v[0], v[1]) for k, v in sizes.items()), key=lambda x: -x[1])[:n]


def store_counts(profiler, tmp, thread_pid, wait):
    """What of the churn reached the store: {samples, processes (of our programs), files (the
    distinct executables with samples), tids (of the many-threads process)}."""
    try:
        profiler.flush()
        time.sleep(wait)
        with profiler.db() as con:
            q = lambda sql, *args: con.execute(sql, args).fetchone()[0]  # noqa: E731
            return {
                "samples": q("SELECT COALESCE(SUM(count), 0) FROM samples"),
                "processes": q("SELECT COUNT(*) FROM processes WHERE exe LIKE ?", f"{tmp}/%"),
                "files": q("SELECT COUNT(*) FROM files WHERE path LIKE ?", f"{tmp}/distinct-%"),
                "tids": q("SELECT COUNT(DISTINCT s.tid) FROM samples s JOIN processes p ON p.id = s.process "
                          "WHERE p.pid = ?", thread_pid),
            }
    except Exception as e:  # the figures are a cross-check only
        print(f"report-memory.py: store counts: {e}", file=sys.stderr)
        return {}


class Churn:
    """The three workloads, in background threads until stop()."""

    def __init__(self, churn, executables, seconds, threads, spawn_rate):
        self.stop_flag = threading.Event()
        self.spawned = 0
        self.spawn_failed = 0
        self.distinct_run = 0
        self.threads_created = None
        self.children = []
        self.lock = threading.Lock()
        self.churn = churn
        self.seconds = seconds
        self.thread_proc = subprocess.Popen([str(churn), "threads", str(threads), str(seconds)],
                                            stdout=subprocess.PIPE, text=True)
        first = self.thread_proc.stdout.readline().strip()
        if not first.startswith("started"):
            raise RuntimeError(f"thread workload failed: {first!r}")
        self.workers = [threading.Thread(target=self.short_loop, args=(spawn_rate,), daemon=True),
                        threading.Thread(target=self.distinct_loop, args=(executables,), daemon=True)]
        for w in self.workers:
            w.start()

    def _run(self, argv):
        try:
            p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        except OSError:
            self.spawn_failed += 1
            return None
        with self.lock:
            self.children.append(p)
            self.children = [c for c in self.children if c.poll() is None]
        return p

    def short_loop(self, rate):
        rnd = random.Random(1)
        next_t = time.monotonic()
        while not self.stop_flag.is_set():
            if self._run([str(self.churn), "spin", str(rnd.randint(20, 50))]):
                self.spawned += 1
            next_t += rnd.expovariate(rate)
            delay = next_t - time.monotonic()
            if delay > 0:
                self.stop_flag.wait(delay)
            else:
                next_t = time.monotonic()

    def distinct_loop(self, executables):
        gap = self.seconds / max(len(executables), 1)
        start = time.monotonic()
        for i, path in enumerate(executables):
            if self.stop_flag.wait(max(0.0, start + i * gap - time.monotonic())):
                return
            if self._run([str(path), "spin", "100"]):
                self.distinct_run += 1

    def stop(self):
        self.stop_flag.set()
        for w in self.workers:
            w.join(timeout=10)
        with self.lock:
            for c in self.children:
                c.wait()
        try:  # it ends at its deadline, about now, and says how many threads it created
            out, _ = self.thread_proc.communicate(timeout=10)
            for line in out.splitlines():
                if line.startswith("created"):
                    self.threads_created = int(line.split()[1])
        except subprocess.TimeoutExpired:
            self.thread_proc.kill()
            self.thread_proc.wait()


def slope(points):
    """Least-squares slope of [(t seconds, bytes)] in MB per minute."""
    if len(points) < 2:
        return float("nan")
    n = len(points)
    mx = sum(t for t, _ in points) / n
    my = sum(v for _, v in points) / n
    den = sum((t - mx) ** 2 for t, _ in points)
    if not den:
        return float("nan")
    return sum((t - mx) * (v - my) for t, v in points) / den * 60 / MB


def mb(v):
    return f"{v / MB:.1f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="~15 s, tiny counts: only checks that it works")
    ap.add_argument("--json", help="write the key results here")
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--every", type=float, help="sampling period in seconds (default 5; smoke 1)")
    ap.add_argument("--frequency", type=int, default=20,
                    help="samples per second per CPU (default 20, the installed service's default)")
    ap.add_argument("--threads", type=int, help="threads of the many-threads process (default 2000; smoke 50)")
    ap.add_argument("--executables", type=int, help="distinct executables (default 300; smoke 5)")
    ap.add_argument("--spawn-rate", type=float, help="short processes per second (default 8; smoke 4)")
    a = ap.parse_args()
    rl.need_root("report-memory.py")
    seconds = 12.0 if a.smoke else a.minutes * 60
    every = a.every or (1.0 if a.smoke else 5.0)
    nthreads = a.threads or (50 if a.smoke else 2000)
    nexec = a.executables if a.executables is not None else (5 if a.smoke else 300)
    rate = a.spawn_rate or (4.0 if a.smoke else 8.0)
    cc = shutil.which("cc")
    if not cc:
        sys.exit("report-memory.py: needs a C compiler (cc)")

    tmp = Path(tempfile.mkdtemp(prefix="ep-mem-"))
    tmp.chmod(0o755)
    samples = []  # (t, {daemon: rollup dict or None})
    restarts = {d: 0 for d in rl.DAEMONS}
    churn = None
    m = None
    try:
        (tmp / "churn.c").write_text(CHURN_C)
        subprocess.run([cc, "-O2", "-pthread", "-Wl,--build-id", "-o", str(tmp / "churn"), str(tmp / "churn.c")],
                       check=True)
        executables = make_executables(tmp / "churn", tmp, nexec)
        m = rl.ProfiledMachine(a.frequency)
        pids = dict(m.pids)
        time.sleep(0.5 if a.smoke else 3.0)  # the daemons' start-up allocations done

        def sample(t):
            row = {}
            for d in rl.DAEMONS:
                r = read_rollup(pids[d])
                if r is None:  # restarted by the supervisor: follow the new process
                    new = m.profiler.daemon_pid(d)
                    if new and new != pids[d]:
                        restarts[d] += 1
                        pids[d] = new
                        r = read_rollup(new)
                row[d] = r
            samples.append((t, row))

        t0 = time.monotonic()
        sample(0.0)
        churn = Churn(tmp / "churn", executables, seconds, nthreads, rate)
        k = 1
        while True:
            target = t0 + k * every
            if target > t0 + seconds + 1e-6:
                break
            time.sleep(max(0.0, target - time.monotonic()))
            sample(time.monotonic() - t0)
            k += 1
        hwm = {d: vm_hwm(pids[d]) for d in rl.DAEMONS}
        top = {d: top_mappings(pids[d]) for d in rl.DAEMONS}
        churn.stop()
        seen = store_counts(m.profiler, tmp, churn.thread_proc.pid, 1.0 if a.smoke else 3.0)
        store_bytes = m.profiler.store.stat().st_size if m.profiler.store.exists() else 0
    finally:
        if churn and not churn.stop_flag.is_set():
            churn.stop()
        if m:
            m.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    def val(row, d, key):
        r = row.get(d)
        return r.get(key, 0) if r else 0

    def total(row, key):
        return sum(val(row, d, key) for d in rl.DAEMONS)

    last = samples[-1][1]
    print("### Memory of the four daemons under process churn\n")
    print(f"Machine: {rl.machine()}.  ")
    print(f"Profiler: `ebpf-profiler run` on a private bus (collector interval 2 s), {a.frequency} Hz per CPU "
          f"({'the installed service default' if a.frequency == 20 else 'not the service default of 20 Hz'}); "
          f"{seconds / 60:.1f} min, sampled every {every:g} s from /proc/PID/smaps_rollup. MB = 2^20 bytes.  ")
    print(f"Churn: {churn.spawned} short processes (20-50 ms each, {rate:g}/s; {churn.spawn_failed} failed to start), "
          f"one process with {nthreads} threads ({churn.threads_created if churn.threads_created is not None else '?'} "
          f"threads created over the run: each lives 20-100 s), {churn.distinct_run} distinct executables "
          f"run 100 ms each. In the store at the end ({mb(store_bytes)} MB): {seen.get('samples', '?')} samples, "
          f"{seen.get('processes', '?')} of the churn processes, {seen.get('files', '?')} of the distinct "
          f"executables, {seen.get('tids', '?')} tids of the many-threads process (only what was sampled "
          f"is stored).\n")

    print("| daemon | RSS start | RSS peak | RSS end | VmHWM | PSS start | PSS peak | PSS end | anon end | restarts |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    per = {}
    for d in rl.DAEMONS:
        rss = [val(r, d, "Rss") for _, r in samples]
        pss = [val(r, d, "Pss") for _, r in samples]
        per[SHORT[d]] = dict(rss_start_mb=rss[0] / MB, rss_peak_mb=max(rss) / MB, rss_end_mb=rss[-1] / MB,
                             pss_start_mb=pss[0] / MB, pss_peak_mb=max(pss) / MB, pss_end_mb=pss[-1] / MB,
                             anon_end_mb=val(last, d, "Anonymous") / MB, vm_hwm_mb=hwm[d] / MB,
                             restarts=restarts[d],
                             top_mappings=[[k, r / MB, an / MB] for k, r, an in top[d]])
        print(f"| {SHORT[d]} | {mb(rss[0])} | {mb(max(rss))} | {mb(rss[-1])} | {mb(hwm[d])} | {mb(pss[0])} | {mb(max(pss))} "
              f"| {mb(pss[-1])} | {mb(val(last, d, 'Anonymous'))} | {restarts[d]} |")
    rss_sum = [total(r, "Rss") for _, r in samples]
    pss_sum = [total(r, "Pss") for _, r in samples]
    print(f"| **sum** | {mb(rss_sum[0])} | {mb(max(rss_sum))} | {mb(rss_sum[-1])} | {mb(sum(hwm.values()))} "
          f"| {mb(pss_sum[0])} "
          f"| {mb(max(pss_sum))} | {mb(pss_sum[-1])} | {mb(total(last, 'Anonymous'))} "
          f"| {sum(restarts.values())} |")
    print(f"\nGoal: ≤ {GOAL_MB} MB together in steady state: RSS sum at the end {mb(rss_sum[-1])} MB "
          f"({'met' if rss_sum[-1] <= GOAL_MB * MB else 'NOT met'}), peak {mb(max(rss_sum))} MB. The peak of the "
          f"sum is the highest summed sample; per-daemon peaks need not coincide. VmHWM is the "
          f"kernel's high-water mark of a daemon's RSS since it started (between samples too). RSS "
          f"counts shared library pages in every daemon; PSS divides them among the processes that "
          f"map them.\n")
    print("Where each daemon's RSS is at the end (biggest mappings, MB RSS / of which anonymous):\n")
    print("| daemon | biggest mappings |")
    print("|---|---|")
    for d in rl.DAEMONS:
        print(f"| {SHORT[d]} | " + ", ".join(f"{k} {mb(r)} / {mb(an)}" for k, r, an in top[d]) + " |")
    print()

    third = seconds / 3
    head = [(t, v) for (t, _), v in zip(samples, rss_sum) if t <= third]
    tail = [(t, v) for (t, _), v in zip(samples, rss_sum) if t >= seconds - third]
    phead = [(t, v) for (t, _), v in zip(samples, pss_sum) if t <= third]
    ptail = [(t, v) for (t, _), v in zip(samples, pss_sum) if t >= seconds - third]
    s_head, s_tail, p_head, p_tail = slope(head), slope(tail), slope(phead), slope(ptail)
    # Levels off: in the last third the sum and every daemon grow by under 0.1 MB a minute (6 MB
    # an hour); per daemon too, so that one daemon's fall does not hide another's growth.
    levels = s_tail == s_tail and s_tail < 0.1
    growing = []
    print("| growth (MB/min) | first third | last third |")
    print("|---|---:|---:|")
    for d in rl.DAEMONS:
        series = [(t, val(r, d, "Rss")) for t, r in samples]
        dh = slope([x for x in series if x[0] <= third])
        dt = slope([x for x in series if x[0] >= seconds - third])
        per[SHORT[d]].update(rss_slope_first_third_mb_per_min=dh, rss_slope_last_third_mb_per_min=dt)
        print(f"| {SHORT[d]} RSS | {dh:+.3f} | {dt:+.3f} |")
        if not dt < 0.1:
            levels = False
            growing.append(SHORT[d])
    print(f"| **sum RSS** | {s_head:+.3f} | {s_tail:+.3f} |")
    print(f"| **sum PSS** | {p_head:+.3f} | {p_tail:+.3f} |")
    print(f"\nGrowth check: {'levels off' if levels else 'STILL GROWING'} (last-third RSS slope "
          f"{s_tail:+.3f} MB/min, first third {s_head:+.3f}; levelling off = the sum and every daemon "
          f"under 0.1 MB/min; growing: {', '.join(growing) or 'none'})"
          f"{'; smoke run: too short to mean anything' if a.smoke else ''}.\n")

    step = 60.0 if seconds >= 180 else max(every, seconds / 6)
    print("| time | " + " | ".join(f"{SHORT[d]} RSS / PSS" for d in rl.DAEMONS) + " | sum RSS / PSS |")
    print("|---:|" + "---:|" * (len(rl.DAEMONS) + 1))
    next_t = 0.0
    for i, (t, row) in enumerate(samples):
        if t + 1e-6 >= next_t or i == len(samples) - 1:
            cells = [f"{mb(val(row, d, 'Rss'))} / {mb(val(row, d, 'Pss'))}" for d in rl.DAEMONS]
            print(f"| {int(t) // 60}:{int(t) % 60:02d} | " + " | ".join(cells) + f" | {mb(total(row, 'Rss'))} / {mb(total(row, 'Pss'))} |")
            while next_t <= t + 1e-6:
                next_t += step

    rl.write_json(a.json, {
        "rss_steady_mb": rss_sum[-1] / MB,
        "rss_peak_mb": max(rss_sum) / MB,
        "rss_start_mb": rss_sum[0] / MB,
        "pss_steady_mb": pss_sum[-1] / MB,
        "pss_peak_mb": max(pss_sum) / MB,
        "goal_mb": GOAL_MB,
        "goal_met": rss_sum[-1] <= GOAL_MB * MB,
        "rss_slope_first_third_mb_per_min": s_head,
        "rss_slope_last_third_mb_per_min": s_tail,
        "pss_slope_first_third_mb_per_min": p_head,
        "pss_slope_last_third_mb_per_min": p_tail,
        "levels_off": bool(levels),
        "growing_last_third": growing,
        "daemons": per,
        "minutes": seconds / 60,
        "frequency_hz": a.frequency,
        "short_processes": churn.spawned,
        "threads": nthreads,
        "threads_created": churn.threads_created,
        "distinct_executables": churn.distinct_run,
        "store_mb": store_bytes / MB,
        "store_counts": seen,
        "smoke": a.smoke,
        "series": [{"t": round(t, 1), **{SHORT[d]: [val(r, d, "Rss") // 1024, val(r, d, "Pss") // 1024]
                                         for d in rl.DAEMONS}} for t, r in samples],
        "series_unit": "KiB [rss, pss]",
    })


if __name__ == "__main__":
    main()
