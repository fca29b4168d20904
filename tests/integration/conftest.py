# SPDX-License-Identifier: MIT
"""Fixtures for the end-to-end tests: a build tree, a profiler started with `ebpf-profiler run`
on a private bus, its store, and a loopback OTLP receiver."""
import collections
import contextlib
import fcntl
import glob
import itertools
import json
import os
import re
import select
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
# How long a Flush() may take to be answered (closing the interval, writing it) on a loaded
# machine before a test calls it failed.
FLUSH_TIMEOUT = 120

sys.path.insert(0, str(Path(__file__).parent))

from waiting import wait_until  # noqa: E402  (the one way tests wait: see waiting.py)


def machine_lock_path():
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID", str(os.getpid()))
    return Path(tempfile.gettempdir()) / f"ep-e2e-machine-{run}.lock"


@contextlib.contextmanager
def machine_load(exclusive=False):
    """Keeps apart, within one test run, a test that judges what a system-wide profiler records
    of the whole machine (exclusive: test_store's size bounds) and tests that load the machine
    with dozens of busy interpreters and 1,500-frame stacks (shared among themselves): the
    other pytest worker's profiler records those too. A blocking file lock named by the run
    (pytest-xdist's run id, shared by its workers), so two runs never wait for each other."""
    with open(machine_lock_path(), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)  # released when f closes
        yield


def cpython_interpreters():
    """{name: path} of every CPython 3.6+ on the machine: the pyenv builds ("pyenv-3.X") and
    Debian's stripped python3.11 ("debian-3.11")."""
    found = {}
    for path in sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3.*"))):
        m = re.search(r"/versions/(3\.(\d+))\.\d+/bin/python3\.\d+$", path)
        if m and int(m.group(2)) >= 6 and os.access(path, os.X_OK):
            found.setdefault(f"pyenv-{m.group(1)}", path)
    if os.access("/usr/bin/python3.11", os.X_OK):
        found["debian-3.11"] = "/usr/bin/python3.11"
    return found


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


def stacks_query(pid, tid=None):
    """SQL and parameters for (stack id, frames blob, samples) of pid (and tid) in the store."""
    query = ("SELECT st.id, st.frames, SUM(s.count) FROM samples s JOIN processes p ON p.id = s.process "
             "JOIN stacks st ON st.id = s.stack WHERE p.pid = ?")
    params = [pid]
    if tid is not None:
        query += " AND s.tid = ?"
        params.append(tid)
    return query + " GROUP BY st.id", params


def read_lines(p, n, timeout=120):
    """The first n lines process p prints on its stdout pipe, within timeout (a program's first
    start from a cold disk can take many seconds)."""
    fd, buf, deadline = p.stdout.fileno(), b"", time.time() + timeout
    while buf.count(b"\n") < n:
        ready, _, _ = select.select([fd], [], [], max(0, deadline - time.time()))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            got = buf.count(b"\n")
            raise AssertionError(f"{p.args}: {got} of {n} lines after {timeout}s (exit status {p.poll()})")
        buf += chunk
    return buf.decode().splitlines()[:n]


def output_so_far(stream, limit=4000):
    """The last limit characters a pipe holds now, without waiting: for the message about a
    process that may still run (a blocking read would wait for it, and its children, to exit)."""
    fd, buf = stream.fileno(), b""
    os.set_blocking(fd, False)
    try:
        while chunk := os.read(fd, 65536):
            buf += chunk
    except BlockingIOError:
        pass
    return buf.decode(errors="replace")[-limit:]


# Forks: the child prints its pid and runs what follows (it ends with its parent, whose Popen
# kill() ends both); the parent calls release() (the script's, before this) and waits. The
# loader reads a process's mappings when a first sample shows it the process, and then only when
# a sample has a PC in no mapping it knows: a process sampled between its start and an mmap
# would keep that mapping unknown to it (no PC is ever in that file), where the child is new to
# it with every mapping made before the fork from its first sample on.
FORK_CHILD = """
import ctypes, os, sys
parent = os.getpid()
if os.fork() != 0:
    release()
    os.wait()
    sys.exit(0)
ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
if os.getppid() != parent:
    os._exit(0)  # the parent ended before the line above
print(os.getpid(), flush=True)
"""

# Maps the file argv[1] executable, then FORK_CHILD: the child's mapping is the file's only one.
MAPPED_CHILD = """
import mmap, sys, threading, time
f = open(sys.argv[1], "rb")
m = mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC)
f.close()  # m.close() lets the file go
release = m.close
""" + FORK_CHILD

# MAPPED_CHILD staying busy (so it is sampled): the loader asks for the file's unwind table.
MAP_EXECUTABLE = MAPPED_CHILD + """
while True:
    pass
"""


def start_mapped_child(path, script=MAP_EXECUTABLE, stdin=None, args=(), user=None):
    """Runs a FORK_CHILD script on path (and args), as user (a passwd entry) if given: (the
    Popen of its parent, the child's pid)."""
    argv = [sys.executable, "-c", script, str(path), *map(str, args)]
    if user:
        argv = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", "--inh-caps=-all",
                *argv]
    p = subprocess.Popen(argv, stdin=stdin, stdout=subprocess.PIPE)
    try:
        return p, int(read_lines(p, 1)[0])
    except BaseException:
        p.kill()
        p.wait()
        raise


def uncached_copy(src, dst):
    """A copy of the file src at dst with bytes of its own appended (an ELF file ignores what
    follows its last section): a file ID that no cache and no daemon knows yet, so its unwind
    table is extracted when asked for. dst is readable by the unprivileged daemons."""
    shutil.copyfile(src, dst)
    with open(dst, "ab") as f:
        f.write(os.urandom(16))
    os.chmod(dst, 0o755)
    return Path(dst)


# A sandbox older than this is not held: the block holding it must end before the symbolizer's
# wall-clock limit for a sandbox (300 s) ends it.
HELD_SANDBOX_MAX_AGE = 30


def child_state(pid, parent):
    """(comm, state letter, seconds since it started) of pid if it is a child of parent, else
    None (gone, or not one)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except OSError:
        return None
    comm, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 1:].split()
    age = uptime - int(rest[19]) / os.sysconf("SC_CLK_TCK")  # field 22: start time, in ticks
    return (comm, rest[0], age) if int(rest[1]) == parent else None


def stop_threads(pid, timeout=30):
    """SIGSTOPs pid and waits until each of its threads is stopped. A sample is written while
    its thread runs, so from then on every sample of pid is in the BPF ring: a settle() after
    this names every frame of it the store will hold, where one of a process still running
    may store a sample whose new frame (a leaf address not seen before) is still unnamed."""
    os.kill(pid, signal.SIGSTOP)

    def all_stopped():
        states = []
        for stat in glob.glob(f"/proc/{pid}/task/*/stat"):
            try:
                text = Path(stat).read_text()
            except OSError:
                continue  # a thread that ended meanwhile
            states.append(text[text.rindex(")") + 2])
        return bool(states) and all(s in "tT" for s in states), "thread states " + "".join(states)
    wait_until(all_stopped, f"every thread of {pid} stopped", timeout)


def frame_ids(blob):
    """The frame ids of a stacks.frames blob (little-endian 64-bit), leaf first."""
    return [int.from_bytes(blob[o:o + 8], "little") for o in range(0, len(blob), 8)]


class Profiler:
    """`ebpf-profiler run` in the background, with everything a test needs to talk to it."""

    def __init__(self, extra_args=(), env=None):
        # The unprivileged daemons must reach the private bus socket and the store, so this
        # cannot live under pytest's 0700 temporary directory.
        self.tmp = Path(tempfile.mkdtemp(prefix="ep-e2e-"))
        self.tmp.chmod(0o755)
        tmp = self.tmp
        self.store = tmp / "store" / "profiles.db"
        self.runtime = tmp / "run"
        self.log = open(tmp / "run.log", "w+")
        self.env = dict(os.environ, **(env or {}), EBPF_PROFILER_RUNTIME_DIR=str(self.runtime))
        # A cache of its own unless the test names one: what a test's profiler learns (or
        # wrongly learns) stays with it, never reaches the host's /var/cache/ebpf-profiler or
        # another test, and profilers running at once do not share files.
        if "--cache-dir" not in extra_args:
            extra_args = ["--cache-dir", str(tmp / "cache"), *extra_args]
        self.proc = subprocess.Popen(
            [str(CLI), "run", "--private-bus", "--store", str(self.store), "--interval", "2s",
             "--frequency", "99", *extra_args],
            stdout=self.log, stderr=subprocess.STDOUT, env=self.env, start_new_session=True)
        self.bus = None
        try:
            self.wait_ready()
        except BaseException:
            self.stop()  # a profiler that never got ready must not outlive the test
            raise

    def wait_ready(self, timeout=30):
        def ready():
            if self.proc.poll() is not None:
                raise AssertionError(f"ebpf-profiler run exited {self.proc.returncode}:\n{self.output()}")
            addr = self.runtime / "bus-address"
            if not addr.exists():
                return False, "no bus-address file yet"
            self.bus = addr.read_text().strip()
            self.env["DBUS_SYSTEM_BUS_ADDRESS"] = self.bus
            st = cli("status", env=self.env, check=False)
            return st.returncode == 0, f"status exited {st.returncode}: {st.stderr.strip()[-200:]}"
        wait_until(ready, "the profiler to answer `status`", timeout, diagnosis=self.output)

    def output(self):
        self.log.flush()
        self.log.seek(0)
        return self.log.read()

    def busctl(self, *args, check=True, timeout=25):
        p = subprocess.run(["busctl", f"--address={self.bus}", f"--timeout={timeout}", *map(str, args)],
                           capture_output=True, text=True, timeout=timeout + 30)
        if check and p.returncode != 0:
            raise AssertionError(f"busctl {' '.join(map(str, args))}: {p.stderr}")
        return p.stdout

    def prop(self, daemon, name):
        out = self.busctl("get-property", f"org.ebpfprofiler.{daemon}1", f"/org/ebpfprofiler/{daemon}1",
                          f"org.ebpfprofiler.{daemon}1", name)
        kind, _, value = out.strip().partition(" ")
        return int(value) if kind in ("t", "u", "i", "x") else value

    def flush(self, diagnose=True):
        """Closes the collector's current interval so what was sampled so far is in the store.
        The reply comes once the interval is written, which a loaded machine (a disk flushing
        another test's writes, every core busy) can hold up for longer than busctl's default
        25 s: a deadline, not a window. A Flush that still fails says where the daemons were."""
        try:
            self.busctl("call", "org.ebpfprofiler.Collector1", "/org/ebpfprofiler/Collector1",
                        "org.ebpfprofiler.Collector1", "Flush", timeout=FLUSH_TIMEOUT)
        except AssertionError as e:
            if not diagnose:
                raise
            raise AssertionError(f"{str(e).strip()}\n{self.thread_stacks()}the daemons' last lines:\n" +
                                 "\n".join("  " + l for l in self.output().splitlines()[-20:])) from None

    def flush_failure(self):
        """flush(), for a wait: None when it worked, else why not (a wait then goes on until
        its deadline and names what it waited for, with this as what it last saw)."""
        try:
            self.flush(diagnose=False)
        except AssertionError as e:
            return str(e).strip()
        return None

    def tables(self, pid=0):
        """Loader1.ListTables: [(path, state, seconds in that state, waited for, bytes, attempts)]
        of the files pid maps (0: of every file). None while the loader does not know pid yet."""
        p = subprocess.run(["busctl", f"--address={self.bus}", "--json=short", "call", "org.ebpfprofiler.Loader1",
                            "/org/ebpfprofiler/Loader1", "org.ebpfprofiler.Loader1", "ListTables", "u", str(pid)],
                           capture_output=True, text=True, timeout=30)
        if p.returncode != 0:
            if pid and "not known to the loader" in p.stderr:
                return None
            raise AssertionError(f"ListTables {pid}: {p.stderr}")
        return [(path, state, usec / 1e6, waited, size, attempts)
                for path, state, usec, waited, size, attempts in json.loads(p.stdout)["data"][0]]

    def tables_ready(self, pids=None):
        """No table that samples wait for is still to come: of the files the processes pids map
        (a test's own workloads: another process on the machine is none of its business), or of
        every file when pids is None."""
        if pids is None:
            return self.prop("Loader", "TablesLoaded") > 0 and self.prop("Loader", "PendingTables") == 0
        for pid in pids:
            rows = self.tables(pid)
            if rows is None and not Path(f"/proc/{pid}").exists():
                continue  # gone and forgotten: the loader keeps a process while samples wait
            if not rows or any(waited for _, _, _, waited, _, _ in rows):
                return False
        return True

    def diagnosis(self, pids=None):
        """What a timeout message needs to tell where the pipeline stands: the counters, the
        tables still waited for (oldest first), the symbolizer's queue and the daemons' last lines."""
        try:
            return self._diagnosis(pids)
        except (AssertionError, OSError, subprocess.SubprocessError, ValueError) as e:
            return (f"(the daemons did not answer all questions: {e})\n" + self.thread_stacks() +
                    "\n".join(self.output().splitlines()[-10:]))

    def thread_stacks(self):
        """Where each daemon's threads are: what a daemon that does not answer its bus is doing
        (kernel wait channel, and the user stack when gdb is there)."""
        lines = []
        for binary in ("ebpf-profiler-loader", "ebpf-profiler-symbolizer", "ebpf-profiler-collector"):
            pid = self.daemon_pid(binary)
            if pid is None:
                continue
            for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
                try:
                    lines.append(f"{binary} {task.name}: {(task / 'comm').read_text().strip()} "
                                 f"in {(task / 'wchan').read_text() or 'running'}")
                except OSError:
                    continue
            if shutil.which("gdb"):
                p = subprocess.run(["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 25"],
                                   capture_output=True, text=True, timeout=60)
                lines += ["  " + l for l in p.stdout.splitlines() if l.startswith(("#", "Thread"))]
        return "\n".join(lines) + "\n"

    def _diagnosis(self, pids):
        waited = sorted((r for r in self.tables() if r[3]), key=lambda r: -r[2])
        def props(daemon, *names):
            return " ".join(f"{n} {self.prop(daemon, n)}" for n in names)
        lines = [self.table_state() + ", loader " + props("Loader", "FileProbeTimeouts") + ", collector " +
                 props("Collector", "Frames", "PendingSymbols", "RetryingSymbols", "FirstPendingFrame", "TableRestarts") +
                 ", symbolizer " + props("Symbolizer", "Requests", "Resolved", "NotFound", "FileErrors",
                                         "UnwindQueue", "UnwindTables", "UnwindExtractErrors",
                                         "UnwindExtractNsec")]
        lines.append(f"{len(waited)} tables waited for (state, seconds in it, attempts, path):")
        lines += [f"  {state} {age:.1f}s x{attempts} {path}" for path, state, age, _, _, attempts in waited[:12]]
        for pid in pids or ():
            rows = self.tables(pid)
            lines.append(f"pid {pid}: " + ("unknown to the loader" if rows is None else
                         ", ".join(f"{Path(path).name}={state}" for path, state, *_ in rows)))
        lines.append("the daemons' last lines:")
        lines += ["  " + l for l in self.output().splitlines()[-10:]]
        return "\n".join(lines)

    def wait_for_tables(self, pids=None, timeout=120):
        """Until the unwind tables of pids' files (of every file without pids) are loaded or
        known not to come: what those processes run is unwound from here on. On a first start
        from a cold disk this takes seconds, not milliseconds."""
        wait_until(lambda: self.tables_ready(pids), f"the unwind tables of {pids or 'every file'}",
                   timeout, diagnosis=lambda: self.diagnosis(pids))

    def process_runtime(self, pid):
        """The interpreter runtime the loader found in pid and its version (major << 8 | minor),
        as Loader1.OpenProcessMemory tells the symbolizer; ("", 0) when it refuses because the
        process runs none, or none it knows of yet, or is gone (unwinder-loader/process-memory.c)."""
        p = subprocess.run(["busctl", f"--address={self.bus}", "--timeout=25", "call", "org.ebpfprofiler.Loader1",
                            "/org/ebpfprofiler/Loader1", "org.ebpfprofiler.Loader1", "OpenProcessMemory", "u",
                            str(pid)], capture_output=True, text=True, timeout=55)
        if p.returncode != 0:
            assert re.search(r"runs no runtime|is not known yet|There is no process", p.stderr), p.stderr
            return "", 0
        out = p.stdout.split()
        return json.loads(out[2]), int(out[3])

    def runtime_of(self, pid):
        """The interpreter runtime the loader found in pid ("" for none, or none yet)."""
        return self.process_runtime(pid)[0]

    def wait_for_runtimes(self, pids, runtime="cpython", timeout=120):
        """Until the loader knows that each of pids runs runtime: the symbolizer has answered
        for the file that holds it, so BPF walks its frames from here on. The answer comes
        after the file's unwind table when the symbolizer has many files to read."""
        def known():
            found = {pid: self.runtime_of(pid) for pid in pids}
            return all(r == runtime for r in found.values()), f"runtimes found: {found}"
        wait_until(known, f"the loader to find {runtime} in {pids}", timeout,
                   diagnosis=lambda: self.diagnosis(pids))

    @contextlib.contextmanager
    def table_worker_held(self, workdir, big, timeout=300):
        """Holds the symbolizer's table worker for the `with` block: tables asked for meanwhile
        stay pending (ListTables says so) until the block ends, while DetectRuntime, which has
        a worker of its own, is answered. A busy process maps an uncached copy of the file big
        (in workdir) executable, so the loader asks for its table; the sandbox of an extraction
        is stopped (SIGSTOP) while it runs (the copy's, or one queued before it: the worker
        takes them in order), and goes on (SIGCONT) at the end. An extraction that ends before
        a look at /proc catches it is tried again with another copy: a bigger file gives a look
        more time.

        The block gets a function that raises AssertionError when the hold ended early: the
        symbolizer ends a sandbox at its wall-clock limit (symbolizer/sandbox.c, 5 min), stopped
        or not, so a sandbox is held only if it started less than HELD_SANDBOX_MAX_AGE ago, and
        the block's waits must end within the rest of that limit; a wait that calls the
        function fails at once, naming the cause, instead of waiting out its deadline."""
        sym = self.daemon_pid("ebpf-profiler-symbolizer")
        assert sym, self.output()
        count = itertools.count()
        held = {}
        deadline = time.monotonic() + timeout  # wait_until's: the look below must not outlast it

        def extraction(pid):
            return (child_state(pid, sym) or ("",))[0] == "ep-extract"

        def stop_one():
            """A sandbox of a table extraction (named ep-extract: symbolizer/sandbox.c) that
            started recently, stopped, as (pid, pidfd); None when there is none or it ended
            first."""
            for pid in (d.name for d in Path("/proc").iterdir() if d.name.isdigit()):
                if not extraction(pid):
                    continue
                try:
                    pidfd = os.pidfd_open(int(pid))
                except OSError:
                    continue  # ended meanwhile
                # Looked at again with the pidfd open: the pid cannot be another process's now.
                if not extraction(pid):
                    os.close(pidfd)
                    continue
                signal.pidfd_send_signal(pidfd, signal.SIGSTOP)

                def settled(pid=pid):
                    state = (child_state(pid, sym) or ("", "gone"))[1]
                    return state in ("T", "Z", "gone"), state
                if wait_until(settled, f"sandbox {pid} stopped or ended", 30) == "T":
                    if (child_state(pid, sym) or ("", "", HELD_SANDBOX_MAX_AGE))[2] < HELD_SANDBOX_MAX_AGE:
                        return pid, pidfd
                    signal.pidfd_send_signal(pidfd, signal.SIGCONT)  # too close to its limit
                os.close(pidfd)
            return None

        def attempt():
            n = next(count)
            copy = uncached_copy(big, Path(workdir) / f"held-{n}-{Path(big).name}")
            mapper, busy = start_mapped_child(copy)
            try:
                states, rows = [], None
                while time.monotonic() < deadline:
                    stopped = stop_one()
                    if stopped is not None:
                        held.update(pid=stopped[0], pidfd=stopped[1], mapper=mapper)
                        return True, f"held after {n + 1} extractions"
                    # Not asked for yet (idle), or being asked for: a sandbox is still to be seen.
                    rows = self.tables(busy)
                    states = [state for path, state, *_ in rows or () if path == str(copy)]
                    if states and states[0] not in ("idle", "queued", "asking"):
                        return False, f"{n + 1} extractions ended before a look caught them (the last: {states[0]})"
                return False, (f"the table of copy {n + 1} was never extracted (last state: {states}; the "
                               f"tables of its mapper {busy}: {rows})")
            finally:
                if "mapper" not in held:
                    mapper.kill()
                    mapper.wait()
                    copy.unlink()

        def still_held():
            state = child_state(held["pid"], sym)
            assert state and state[1] == "T", (
                f"the held extraction (sandbox {held['pid']}) ended while held, "
                f"{state[2] if state else 'more than'} s after it started: "
                "the symbolizer's wall-clock limit for a sandbox is 300 s")

        wait_until(attempt, "an extraction of the symbolizer stopped while it ran", timeout, interval=0,
                   diagnosis=lambda: self.diagnosis())
        try:
            yield still_held
        finally:
            with contextlib.suppress(ProcessLookupError):  # it ended (still_held says why)
                signal.pidfd_send_signal(held["pidfd"], signal.SIGCONT)
            os.close(held["pidfd"])
            held["mapper"].kill()
            held["mapper"].wait()

    def settle(self, pids=None, timeout=120):
        """Until everything sampled so far is in the store, names included: no table pending
        (of pids' files, with pids), no sample waiting for one, and every frame the collector
        knew once that was so has its symbol. Frames that come later (the other processes of a
        busy machine, which may never pause) are not waited for: the symbolizer answers in
        order, so this ends even while they keep coming. A test that checks the names of every
        sample of a process stops it first (stop_threads()). The last flush writes the names that
        came after the interval before it (late names are UPDATEs)."""
        mark = {}

        def settled():
            if not (self.tables_ready(pids) and (pids is not None or self.prop("Loader", "WaitingSamples") == 0)):
                mark.clear()
                self.flush()
                return False
            # After the look: the samples that waited for those tables were sent when they
            # came, so this flush stores them, and the mark below counts their frames.
            self.flush()
            restarts = self.prop("Collector", "TableRestarts")
            if mark.get("restarts") != restarts:  # frame indices start over with the tables
                mark.update(restarts=restarts, frames=self.prop("Collector", "Frames"))
            return self.prop("Collector", "FirstPendingFrame") >= mark["frames"]
        wait_until(settled, f"the profiler to settle (pids {pids or 'all'}: no table, sample or symbol pending)",
                   timeout, diagnosis=lambda: self.diagnosis(pids))
        self.flush()

    def sampled(self, pid, n, tid=None):
        """For a wait: flushes, then (whether the store holds at least n samples of pid (and
        tid), "<how many> samples"), or (False, why the flush failed)."""
        failed = self.flush_failure()
        if failed:
            return False, failed
        got = sum(self.stack_counts(pid, tid).values())
        return got >= n, f"{got} samples"

    def wait_samples(self, pid, n, timeout=120, tid=None):
        """Flushes until the store holds at least n samples of pid (and tid); returns how many.
        A busy machine gives a workload less CPU, so it takes longer, never fewer samples."""
        return int(wait_until(lambda: self.sampled(pid, n, tid), f"{n} samples of pid {pid} in the store",
                              timeout, interval=0.5, diagnosis=lambda: self.diagnosis([pid])).split()[0])

    def wait_collector_restarted(self, old, timeout=20):
        """Until a collector other than pid old reads the loader's trace ring; returns its pid."""
        def restarted():
            new = self.daemon_pid("ebpf-profiler-collector")
            if not new or new == old:
                return False, new
            try:
                return self.prop("Collector", "LoaderAttached") == "true", new
            except AssertionError:
                return False, new  # not on the bus yet
        return wait_until(restarted, f"a collector other than pid {old} attached to the loader (last seen: its pid)",
                          timeout, interval=0.3, diagnosis=self.output)

    def stack_counts(self, pid, tid=None):
        """{stack id: samples} of pid (and tid) in the store now: a baseline that the samples
        taken later are told apart from."""
        with self.db() as con:
            return collections.Counter({sid: n for sid, _, n in con.execute(*stacks_query(pid, tid))})

    def table_state(self):
        return ", ".join(f"{name} {self.prop('Loader', name)}" for name in (
            "TablesLoaded", "PendingTables", "TableErrors", "WaitingSamples", "DeferredSamples", "DeferredExpired"))

    def loader_map_keys(self, map_name):
        """The keys (u32) of the loader's BPF map map_name: the map of that name among the ones the
        loader holds open (its descriptors' fdinfo names their map_id), dumped with bpftool."""
        loader = self.daemon_pid("ebpf-profiler-loader")
        held = set()
        for fdinfo in Path(f"/proc/{loader}/fdinfo").iterdir():
            try:
                m = re.search(r"^map_id:\s*(\d+)", fdinfo.read_text(), re.M)
            except OSError:
                continue  # closed meanwhile
            if m:
                held.add(int(m.group(1)))
        maps = json.loads(subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True,
                                         check=True).stdout)
        ids = [m["id"] for m in maps if m.get("name") == map_name and m["id"] in held]
        assert len(ids) == 1, f"{map_name}: maps {ids} of the loader (pid {loader})"
        entries = json.loads(subprocess.run(["bpftool", "-j", "map", "dump", "id", str(ids[0])], capture_output=True,
                                            text=True, check=True).stdout)
        return {int.from_bytes(bytes(int(b, 16) for b in e["key"]), "little") for e in entries}

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
        """A read-only connection whose reads all see one snapshot of the store, until `with`
        ends it (or the connection is closed). The profiler writes on while a test reads: read
        one query at a time, the stacks could name frames written after the frames were read."""
        con = sqlite3.connect(f"file:{self.store}?mode=ro", uri=True, timeout=10, isolation_level=None)
        con.execute("BEGIN")
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


# When each process a test started was started (time.time_ns()), by pid: pid_max is often
# 32768, so over a run a pid is given to other processes, which the store keeps under the same
# pid; samples_with_frames() takes the process that started with the pid first after launch().
LAUNCHED = {}


def launch(argv, **kwargs):
    """subprocess.Popen(argv, **kwargs), its start time kept in LAUNCHED."""
    started = time.time_ns()
    p = subprocess.Popen(argv, **kwargs)
    LAUNCHED[p.pid] = started
    return p


def run_workload(name, seconds, *args):
    """Starts a workload from the build tree; returns the Popen."""
    return launch([str(WORKLOADS / name), str(seconds), *map(str, args)])


def run_until_sampled(profiler, argv, n, timeout=300):
    """Runs argv until the store holds n of its samples, then SIGKILLs it (or until it ends by
    itself); returns the Popen. A busy machine takes longer, never gives fewer samples."""
    p = launch([str(a) for a in argv], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        def enough():
            if p.poll() is not None:
                return True, f"exited {p.returncode}"
            return profiler.sampled(p.pid, n)
        wait_until(enough, f"{n} samples of {Path(str(argv[0])).name} (pid {p.pid}) in the store", timeout,
                   interval=0.5, diagnosis=lambda: profiler.diagnosis([p.pid]))
    finally:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait()
    return p


def profile_until(profiler, name, n, *args, timeout=120):
    """Runs workload `name` until the store holds n of its samples, stops it, settles the
    profiler and returns its pid. The workload's own duration is only a backstop."""
    w = run_until_sampled(profiler, [WORKLOADS / name, timeout + 60, *args], n, timeout)
    assert w.returncode == -signal.SIGKILL, f"{name} exited {w.returncode} before it was stopped"
    profiler.settle()
    return w.pid


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
    for _, blob, count in con.execute(*stacks_query(pid)):
        out.append(([(kinds.get(fid), fn) for fid in frame_ids(blob) for fn in lines.get(fid, [None])], count))
    return out


NATIVE, KERNEL, ABORT = 1, 2, 4  # EP_FRAME_* (common/wire.h)


def samples_with_frames(con, pid):
    """[(tid, thread_name, frames, samples)] for one process, one entry per thread and distinct
    stack. Frames are leaf first, each a dict: kind (EP_FRAME_*), function (None while
    unsymbolized), path (the file of a native frame, else None), addr (file offset of a native
    frame, kernel address of a kernel one). Inline lines expand innermost first, as in
    stacks_for_pid(). A process started by launch() is told from the ones given its pid
    before or after it by its start time."""
    lines = {}
    for frame, function in con.execute(
            "SELECT frame, function FROM frame_lines ORDER BY frame, depth"):
        lines.setdefault(frame, []).append(function)
    info = {fid: (kind, addr, path) for fid, kind, addr, path in con.execute(
        "SELECT f.id, f.kind, f.addr, fi.path FROM frames f LEFT JOIN files fi ON fi.id = f.file AND f.kind = 1")}
    out = []
    which, params = "p.pid = ?", [pid]
    # The first to start with the pid after the launch (no other can meanwhile), or one whose
    # start the loader could not read (gone first).
    if pid in LAUNCHED:
        which += (" AND (p.start_time_ns = (SELECT MIN(start_time_ns) FROM processes"
                  " WHERE pid = ? AND start_time_ns >= ?) OR COALESCE(p.start_time_ns, 0) = 0)")
        params += [pid, LAUNCHED[pid] - 10**9]  # start times are in clock ticks
    rows = con.execute(
        "SELECT s.tid, s.thread_name, st.frames, SUM(s.count) FROM samples s "
        "JOIN processes p ON p.id = s.process JOIN stacks st ON st.id = s.stack "
        f"WHERE {which} GROUP BY s.tid, s.thread_name, st.id", params)
    for tid, thread_name, blob, count in rows:
        frames = []
        for fid in frame_ids(blob):
            kind, addr, path = info.get(fid, (None, None, None))
            for fn in lines.get(fid, [None]):
                frames.append({"kind": kind, "function": fn, "path": path,
                               "addr": addr & 0xFFFFFFFFFFFFFFFF if addr is not None else None})
        out.append((tid, thread_name, frames, count))
    return out



def assert_delivered_once(exported, local):
    """Every stored sample of the process is in the export exactly once: the same stacks with
    the same counts. A frame still unnamed on one side ("") stands for whatever the other side
    named it (one or more names, with inline frames): the store names a frame when its name
    arrives, an OTLP request carries the names known when it was encoded (a retried one may
    know more than the store's first write, a first one less)."""
    def key(names):
        return "".join(n + "\x1f" for n in names)

    def pattern(names):
        return re.compile("".join("(?:[^\x1f]*\x1f)+?" if not n else re.escape(n) + "\x1f" for n in names))

    def take(sources, targets):
        """Matches each source stack's count against the targets it stands for (exact names
        first); returns what no target took."""
        left = {}
        for names, c in sorted(sources.items(), key=lambda kv: "" in kv[0]):
            rx = pattern(names)
            for k in [k for k, n in targets.items() if n and rx.fullmatch(k)]:
                t = min(c, targets[k])
                c, targets[k] = c - t, targets[k] - t
            if c:
                left[names] = c
        return left

    stored = {key(names): c for names, c in local.items()}
    unmatched = take(exported, stored)
    missing = {tuple(k.split("\x1f")[:-1]): c for k, c in stored.items() if c}
    # What the store has left unnamed, against what the export has left.
    rest = {key(names): c for names, c in unmatched.items()}
    missing = take(missing, rest)
    unmatched = {tuple(k.split("\x1f")[:-1]): c for k, c in rest.items() if c}
    assert not unmatched and not missing, (
        f"exported but not stored (or twice): {unmatched}; stored but not exported: {missing}")



def assert_same_stacks_as_the_store(profiler, exported, local):
    """The export holds exactly the store's stacks and counts. Where it does not, the
    difference is frames the collector handed over before the symbolizer named them (the
    interval waited 1.5 s, longer on a loaded machine): named in the store, unnamed in the
    export, and counted by the collector."""
    exact = {k: v for k, v in exported.items() if v} == {k: v for k, v in local.items() if v}
    if not exact:
        late = profiler.prop("Collector", "ExportedUnnamedFrames")
        assert late > 0, f"the export differs from the store with no frame exported unnamed:\n{exported}\n{local}"
    assert_delivered_once(exported, local)


def decode_otlp(path):
    """protoc's text form of an ExportProfilesServiceRequest file (skips the test without protoc)."""
    protoc = shutil.which("protoc")
    if not protoc:
        pytest.skip("protoc not installed")
    with open(path, "rb") as f:
        p = subprocess.run([protoc, f"--proto_path={REPO / 'proto'}",
                            "--decode=opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest",
                            "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto"],
                           stdin=f, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return p.stdout


@pytest.fixture(autouse=True)
def otlp_requests_conform():
    """Every OTLP request a receiver decodes during a test keeps the conformance rules
    (otlp_conformance.py, checked in otlp_receiver.py): a violation fails the test."""
    import otlp_receiver
    before = len(otlp_receiver.CONFORMANCE["violations"])
    yield
    new = otlp_receiver.CONFORMANCE["violations"][before:]
    assert not new, f"{len(new)} OTLP conformance violations:\n" + "\n".join(new[:20])


# Under pytest-xdist (scripts/test.sh runs two workers) each worker checks the requests its
# receivers decode; the workers hand their counts to the controller, which prints the sum.
CONFORMANCE_TOTAL = {"checked": 0, "violations": 0}


def pytest_sessionfinish(session):
    # The run's lock file: a worker still running opens it again if it needs it.
    machine_lock_path().unlink(missing_ok=True)
    receiver = sys.modules.get("otlp_receiver")
    workeroutput = getattr(session.config, "workeroutput", None)
    if receiver and workeroutput is not None:
        workeroutput["otlp_conformance"] = (receiver.CONFORMANCE["checked"],
                                            len(receiver.CONFORMANCE["violations"]))


def pytest_testnodedown(node, error):
    checked, violations = getattr(node, "workeroutput", {}).get("otlp_conformance", (0, 0))
    CONFORMANCE_TOTAL["checked"] += checked
    CONFORMANCE_TOTAL["violations"] += violations


def pytest_terminal_summary(terminalreporter):
    receiver = sys.modules.get("otlp_receiver")
    checked, violations = CONFORMANCE_TOTAL["checked"], CONFORMANCE_TOTAL["violations"]
    if receiver:
        checked += receiver.CONFORMANCE["checked"]
        violations += len(receiver.CONFORMANCE["violations"])
    if receiver or checked:
        terminalreporter.write_line(f"OTLP conformance: {checked} requests checked, {violations} violations")
