# SPDX-License-Identifier: MIT
"""Fixtures for the end-to-end tests: a build tree, a profiler started with `ebpf-profiler run`
on a private bus, its store, and a loopback OTLP receiver."""
import os
import signal
import sqlite3
import subprocess
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUILD = Path(os.environ.get("EP_BUILD_DIR", REPO / "build")).resolve()
CLI = BUILD / "cli" / "ebpf-profiler"
WORKLOADS = BUILD / "tests" / "workloads"

sys.path.insert(0, str(Path(__file__).parent))


def need_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (BPF and perf events)")


def cli(*args, env=None, check=True, timeout=60):
    """Runs the CLI and returns the CompletedProcess (text)."""
    p = subprocess.run([str(CLI), *map(str, args)], capture_output=True, text=True,
                       env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"ebpf-profiler {' '.join(map(str, args))} failed ({p.returncode}):\n"
                             f"{p.stdout}\n{p.stderr}")
    return p


class Profiler:
    """`ebpf-profiler run` in the background, with everything a test needs to talk to it."""

    def __init__(self, extra_args=()):
        # The unprivileged daemons must reach the private bus socket and the store, so this
        # cannot live under pytest's 0700 temporary directory.
        self.tmp = Path(tempfile.mkdtemp(prefix="ep-e2e-"))
        self.tmp.chmod(0o755)
        tmp = self.tmp
        self.store = tmp / "store" / "profiles.db"
        self.runtime = tmp / "run"
        self.log = open(tmp / "run.log", "w+")
        self.env = dict(os.environ, EBPF_PROFILER_RUNTIME_DIR=str(self.runtime))
        self.proc = subprocess.Popen(
            [str(CLI), "run", "--private-bus", "--store", str(self.store), "--interval", "2s",
             "--frequency", "99", *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.bus = None
        self.wait_ready()

    def wait_ready(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"ebpf-profiler run exited {self.proc.returncode}:\n{self.output()}")
            addr = self.runtime / "bus-address"
            if addr.exists():
                self.bus = addr.read_text().strip()
                self.env["DBUS_SYSTEM_BUS_ADDRESS"] = self.bus
                if cli("status", env=self.env, check=False).returncode == 0:
                    return
            time.sleep(0.2)
        raise AssertionError(f"profiler not ready after {timeout}s:\n{self.output()}")

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def busctl(self, *args, check=True):
        p = subprocess.run(["busctl", f"--address={self.bus}", *map(str, args)],
                           capture_output=True, text=True, timeout=30)
        if check and p.returncode != 0:
            raise AssertionError(f"busctl {' '.join(map(str, args))}: {p.stderr}")
        return p.stdout

    def prop(self, daemon, name):
        out = self.busctl("get-property", f"org.ebpfprofiler.{daemon}1", f"/org/ebpfprofiler/{daemon}1",
                          f"org.ebpfprofiler.{daemon}1", name)
        kind, _, value = out.strip().partition(" ")
        return int(value) if kind in ("t", "u", "i", "x") else value

    def flush(self):
        """Closes the collector's current interval so what was sampled so far is in the store."""
        self.busctl("call", "org.ebpfprofiler.Collector1", "/org/ebpfprofiler/Collector1",
                    "org.ebpfprofiler.Collector1", "Flush")

    def daemon_pid(self, binary):
        """PID of the supervised daemon whose executable is `binary`."""
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                stat = (d / "stat").read_text()
                ppid = int(stat.rsplit(")", 1)[1].split()[1])
                if ppid == self.proc.pid and os.readlink(d / "exe").endswith(binary):
                    return int(d.name)
            except (OSError, ValueError, IndexError):
                continue
        return None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def db(self):
        con = sqlite3.connect(f"file:{self.store}?mode=ro", uri=True, timeout=10)
        return con


def running_profiler(*args):
    """For module fixtures: `yield from running_profiler(...)` runs a profiler with those extra
    `run` options for the module's tests, and stops it after them."""
    need_root()
    p = Profiler(list(args))
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def profiler():
    """A profiler with the default options; modules that need others define their own."""
    yield from running_profiler()


@pytest.fixture(scope="module")
def receiver():
    """A loopback OTLP receiver (otlp_receiver.py) for the module's tests."""
    from otlp_receiver import OtlpReceiver
    r = OtlpReceiver(port=0)
    r.start()
    yield r
    r.stop()


def otlp_endpoint(receiver):
    return f"http://127.0.0.1:{receiver.port}/v1development/profiles"


def run_workload(name, seconds, *args):
    """Starts a workload from the build tree; returns the Popen."""
    return subprocess.Popen([str(WORKLOADS / name), str(seconds), *map(str, args)])


def stacks_for_pid(con, pid):
    """[(frames, samples)] for one process from the store, one entry per distinct stack. Frames
    are leaf first, each a (kind, function) pair; inline lines expand innermost first; an
    unsymbolized frame has function None. Kinds are EP_FRAME_* (1 native, 2 kernel)."""
    lines = {}
    for frame, function in con.execute(
            "SELECT frame, function FROM frame_lines ORDER BY frame, depth"):
        lines.setdefault(frame, []).append(function)
    kinds = dict(con.execute("SELECT id, kind FROM frames"))
    out = []
    rows = con.execute(
        "SELECT st.frames, SUM(s.count) FROM samples s JOIN processes p ON p.id = s.process "
        "JOIN stacks st ON st.id = s.stack WHERE p.pid = ? GROUP BY st.id", (pid,))
    for blob, count in rows:
        frames = []
        for off in range(0, len(blob), 8):
            fid = int.from_bytes(blob[off:off + 8], "little")
            frames.extend((kinds.get(fid), fn) for fn in lines.get(fid, [None]))
        out.append((frames, count))
    return out


NATIVE, KERNEL = 1, 2


def samples_with_frames(con, pid):
    """[(tid, thread_name, frames, samples)] for one process, one entry per thread and distinct
    stack. Frames are leaf first, each a dict: kind (EP_FRAME_*), function (None while
    unsymbolized), path (the file of a native frame, else None), addr (file offset of a native
    frame, kernel address of a kernel one). Inline lines expand innermost first, as in
    stacks_for_pid()."""
    lines = {}
    for frame, function in con.execute(
            "SELECT frame, function FROM frame_lines ORDER BY frame, depth"):
        lines.setdefault(frame, []).append(function)
    info = {fid: (kind, addr, path) for fid, kind, addr, path in con.execute(
        "SELECT f.id, f.kind, f.addr, fi.path FROM frames f LEFT JOIN files fi ON fi.id = f.file AND f.kind = 1")}
    out = []
    rows = con.execute(
        "SELECT s.tid, s.thread_name, st.frames, SUM(s.count) FROM samples s "
        "JOIN processes p ON p.id = s.process JOIN stacks st ON st.id = s.stack "
        "WHERE p.pid = ? GROUP BY s.tid, s.thread_name, st.id", (pid,))
    for tid, thread_name, blob, count in rows:
        frames = []
        for off in range(0, len(blob), 8):
            fid = int.from_bytes(blob[off:off + 8], "little")
            kind, addr, path = info.get(fid, (None, None, None))
            for fn in lines.get(fid, [None]):
                frames.append({"kind": kind, "function": fn, "path": path,
                               "addr": addr & 0xFFFFFFFFFFFFFFFF if addr is not None else None})
        out.append((tid, thread_name, frames, count))
    return out

