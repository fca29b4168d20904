# SPDX-License-Identifier: MIT
"""Helpers shared by the report sections of bench/run (bench/report-*.py): the profiler started
as the end-to-end tests start it (tests/integration/conftest.py: `ebpf-profiler run` on a
private bus), the eBPF programs it loaded and their run time (BPF_ENABLE_STATS), the CPU
time of its daemons, the workloads of the build tree, the machine description, JSON output."""
import ctypes
import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "integration"))
from conftest import BUILD, CLI, WORKLOADS, Profiler, otlp_endpoint  # noqa: E402,F401

SYS_BPF = 321  # x86-64
BPF_ENABLE_STATS = 32
BPF_STATS_RUN_TIME = 0
DAEMONS = ["ebpf-profiler-loader", "ebpf-profiler-symbolizer", "ebpf-profiler-collector",
           "ebpf-profiler-exporter"]
CLK_TCK = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1


def need_root(name):
    if os.geteuid() != 0:
        sys.exit(f"{name}: needs root (BPF and perf events)")
    if not CLI.exists():
        sys.exit(f"{name}: {CLI} missing (ninja -C build)")


def bpf_progs():
    """{id: bpftool's JSON of the program} for every loaded BPF program."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"]: p for p in json.loads(out)}


class BpfStats:
    """The kernel's BPF run-time accounting on for the duration: bpf(BPF_ENABLE_STATS) holds it
    on while its descriptor is open, counted per holder, so benchmarks running at once (the
    smoke tests' two workers) never switch it off under each other, and a killed benchmark
    leaves nothing behind. Writing kernel.bpf_stats_enabled (one global value each saved and
    restored) did both."""

    def __enter__(self):
        libc = ctypes.CDLL(None, use_errno=True)
        attr = ctypes.create_string_buffer(struct.pack("I", BPF_STATS_RUN_TIME), 8)
        fd = libc.syscall(SYS_BPF, BPF_ENABLE_STATS, attr, ctypes.sizeof(attr))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"bpf(BPF_ENABLE_STATS): {os.strerror(err)}")
        self.fd = fd
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


class ProfiledMachine:
    """A profiler started on a private bus, with the ids of the BPF programs it loaded (those
    that appeared while it started; on_sample is the sampling program) and its daemons' pids."""

    def __init__(self, frequency, extra_args=()):
        before = set(bpf_progs())
        # The collector's default interval (5 s), not the tests' 2 s.
        self.profiler = Profiler(["--frequency", str(frequency), "--interval", "5s", *extra_args])
        try:
            progs = bpf_progs()
            self.prog_ids = sorted(set(progs) - before)
            samplers = [i for i in self.prog_ids if progs[i].get("name") == "on_sample"]
            if len(samplers) > 1:  # another profiler started at the same time: ask our loader
                held = held_prog_ids(self.profiler.daemon_pid("ebpf-profiler-loader"))
                self.prog_ids = [i for i in self.prog_ids if i in held]
                samplers = [i for i in samplers if i in held]
            if len(samplers) != 1:
                raise RuntimeError(f"cannot tell the profiler's on_sample program (new: {self.prog_ids})")
            self.on_sample = samplers[0]
            self.pids = {d: self.profiler.daemon_pid(d) for d in DAEMONS}
            missing = [d for d, p in self.pids.items() if not p]
            if missing:
                raise RuntimeError(f"daemons not found: {missing}")
        except BaseException:
            self.profiler.stop()
            raise

    def set_frequency(self, hz):
        self.profiler.busctl("call", "org.ebpfprofiler.Loader1", "/org/ebpfprofiler/Loader1",
                             "org.ebpfprofiler.Loader1", "SetFrequency", "u", str(hz))

    def bpf(self):
        """(run time ns of all the profiler's programs, run count of on_sample)."""
        progs = bpf_progs()
        ns = sum(progs[i].get("run_time_ns", 0) for i in self.prog_ids if i in progs)
        return ns, progs[self.on_sample].get("run_cnt", 0)

    def daemon_cpu_ns(self):
        """{daemon: utime + stime in ns} from /proc/PID/stat (all threads, also exited ones)."""
        return {d: cpu_ns(p) for d, p in self.pids.items()}

    def daemon_run_ns(self):
        """{daemon: time on CPU in ns} summed over /proc/PID/task/*/schedstat (ns resolution;
        threads that exited are missing)."""
        return {d: run_ns(p) for d, p in self.pids.items()}

    def others(self):
        """{name: pid} of the run command's other children (the private bus) and itself: not
        counted as the profiler's cost (systemd and the system bus stand in for them)."""
        out = {"ebpf-profiler run": self.profiler.proc.pid}
        mine = set(self.pids.values())
        for d in Path("/proc").iterdir():
            if not d.name.isdigit() or int(d.name) in mine:
                continue
            try:
                stat = (d / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == self.profiler.proc.pid:
                    out[os.path.basename(os.readlink(d / "exe"))] = int(d.name)
            except (OSError, ValueError, IndexError):
                continue
        return out

    def stop(self):
        self.profiler.stop()


def start_machine(hz, extra):
    """ProfiledMachine, tried again once when another profiler loaded its programs at the same
    moment (its on_sample cannot be told from ours)."""
    try:
        return ProfiledMachine(hz, extra)
    except RuntimeError as e:
        if "on_sample" not in str(e):
            raise
        time.sleep(2)
        return ProfiledMachine(hz, extra)


def held_prog_ids(pid):
    """Ids of the BPF programs a process holds a descriptor of (a program or a link to one)."""
    ids = set()
    try:
        fds = list(Path(f"/proc/{pid}/fdinfo").iterdir())
    except OSError:
        return ids
    for f in fds:
        try:
            for line in f.read_text().splitlines():
                if line.startswith("prog_id:"):
                    ids.add(int(line.split()[1]))
        except (OSError, ValueError, IndexError):
            pass
    return ids


def cpu_ns(pid):
    """utime + stime of a process (all its threads), in ns; resolution 1/CLK_TCK."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // CLK_TCK


def run_ns(pid):
    """Time on CPU of a process's live threads, in ns (/proc/PID/task/TID/schedstat)."""
    total = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0
    for t in tasks:
        try:
            total += int((t / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def machine():
    """One line describing the machine: CPU model and count, memory, kernel, date."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem = int(line.split()[1]) // 1024
    u = os.uname()
    import datetime
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"{NCPU} CPUs ({model}), {mem / 1024:.1f} GiB, kernel {u.release} {u.machine}, {now}"


def write_json(path, obj):
    if path:
        Path(path).write_text(json.dumps(obj, indent=1, sort_keys=True) + "\n")
