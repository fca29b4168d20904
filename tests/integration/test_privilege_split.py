"""The split between the daemons holds against one of them taken over (issues 17 and 28): the
symbolizer parses hostile files from every process on the host, so its user must gain nothing
from the other daemons. Tried as that user would: no daemon's environment or memory is
readable, nor the store, the spool or the exporter's configuration, and the exporter's settings
(a backend's credentials among them) reach the exporter alone; the loader hands it the memory
of profiled runtimes only; and a consumer of a shared-memory ring that writes impossible
positions into it (the less privileged side) cannot harm the daemon that writes the records."""

import grp
import hashlib
import json
import mmap
import os
import pwd
import re
import shutil
import signal
import struct
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

from conftest import (BUILD, FORK_CHILD, MAPPED_CHILD, Profiler, need_root, read_lines, samples_with_frames,
                      start_mapped_child, stop_threads, uncached_copy)
from waiting import wait_until

SYMBOLIZER_USER = "ebpf-profiler-symbolizer"  # run's default for the symbolizer
EXPORTER_USER = "ebpf-profiler-exporter"
STORE_GROUP = "ebpf-profiler"  # the collector's group: who may read the store
DAEMONS = ("ebpf-profiler-loader", "ebpf-profiler-symbolizer", "ebpf-profiler-collector",
           "ebpf-profiler-exporter")
SECRET = f"Authorization=Bearer ep-test-{uuid.uuid4().hex}"
URL_SECRET = f"ep-url-{uuid.uuid4().hex}"

# Run as the symbolizer's user: for each path, "read" (a directory: listed) or the error that
# refused it. /proc/PID/mem is opened and read at the start of the stack, as a debugger would.
PROBE = r"""
import json, os, sys
out = {}
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            os.listdir(path)
            out[path] = "read"
            continue
        with open(path, "rb") as f:
            if path.endswith("/mem"):
                with open(path.replace("/mem", "/maps")) as m:
                    stack = next(l for l in m if l.rstrip().endswith("[stack]"))
                f.seek(int(stack.split("-")[0], 16))
            f.read(64)
        out[path] = "read"
    except OSError as e:
        out[path] = e.__class__.__name__
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def profiler():
    need_root()
    # An endpoint nothing listens on: the exporter keeps its settings and retries, and spools.
    # Credentials in its URL too (user information, query), which nothing may show.
    p = Profiler(env={"OTEL_EXPORTER_OTLP_HEADERS": SECRET,
                      "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://ep:{URL_SECRET}@127.0.0.1:9/v1development/profiles"
                                                     f"?token={URL_SECRET}"})
    try:
        yield p
    finally:
        p.stop()


def pids(profiler):
    found = {d: profiler.daemon_pid(d) for d in DAEMONS}
    assert all(found.values()), found
    return found


def capability_numbers():
    """CAP_* names to bit numbers, from the kernel headers the build used."""
    header = Path("/usr/include/linux/capability.h").read_text()
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^#define (CAP_[A-Z_]+)\s+(\d+)\s*$", header, re.M)}


def loaders_unit_capabilities():
    """The bit mask of the rendered loader unit's CapabilityBoundingSet=."""
    unit = (BUILD / "units" / "ebpf-profiler-loader.service").read_text()
    names = re.search(r"^CapabilityBoundingSet=(.+)$", unit, re.M).group(1).split()
    numbers = capability_numbers()
    return sum(1 << numbers[name] for name in names)


def test_run_gives_the_loader_its_units_capabilities_and_programs_are_still_listed(profiler):
    """`ebpf-profiler run` starts the loader with what its unit gives it (CapabilityBoundingSet=,
    NoNewPrivileges=), not all of root's capabilities; CAP_PERFMON is gone once it samples. Without
    CAP_SYS_ADMIN, ListBpfPrograms still lists every BPF function with its real extent (the
    loader's own sampling program among them)."""
    numbers = capability_numbers()
    expected = loaders_unit_capabilities()
    if int(Path("/proc/sys/kernel/perf_event_paranoid").read_text()) > 2:  # run's documented exception
        expected |= 1 << numbers["CAP_SYS_ADMIN"]
    status = dict(line.split(":\t", 1) for line in
                  Path(f"/proc/{pids(profiler)['ebpf-profiler-loader']}/status").read_text().splitlines()
                  if ":\t" in line)
    held = {k: int(status[k], 16) for k in ("CapBnd", "CapPrm", "CapEff", "CapInh", "CapAmb")}
    assert held["CapBnd"] == expected, held
    assert held["CapPrm"] == held["CapEff"] == expected & ~(1 << numbers["CAP_PERFMON"]), held
    assert held["CapInh"] == held["CapAmb"] == 0, held
    assert status["NoNewPrivs"].strip() == "1", status["NoNewPrivs"]

    out = profiler.busctl("--json=short", "call", "org.ebpfprofiler.Loader1", "/org/ebpfprofiler/Loader1",
                          "org.ebpfprofiler.Loader1", "ListBpfPrograms")
    funcs = json.loads(out)["data"][0]
    assert all(start > 0 and length > 0 for start, length, _, _ in funcs), funcs[:5]
    on_sample = [f for f in funcs if re.fullmatch(r"bpf_prog_[0-9a-f]{16}_on_sample", f[3])]
    assert on_sample, [f[3] for f in funcs]


def probe_as_symbolizer_user(paths):
    pw = pwd.getpwnam(SYMBOLIZER_USER)  # scripts/setup.sh makes it
    p = subprocess.run(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                        "--inh-caps=-all", "/usr/bin/python3", "-c", PROBE, *map(str, paths)],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_no_daemon_environment_or_memory_is_readable_by_the_symbolizers_user(profiler):
    targets = [f"/proc/{pid}/{what}" for pid in pids(profiler).values() for what in ("environ", "mem")]
    got = probe_as_symbolizer_user(targets)
    readable = {path: how for path, how in got.items() if how == "read"}
    assert not readable, got
    assert set(got.values()) == {"PermissionError"}, got


def test_the_exporters_settings_reach_the_exporter_alone(profiler):
    for daemon, pid in pids(profiler).items():
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().decode(errors="replace").split("\0")
        otel = [e for e in env if e.startswith("OTEL_")]
        if daemon == "ebpf-profiler-exporter":
            assert f"OTEL_EXPORTER_OTLP_HEADERS={SECRET}" in otel, otel
        else:
            assert not otel, (daemon, otel)
    # None of them complained of variables it should not have had.
    assert "exporter's variables" not in profiler.output()


def test_the_endpoints_credentials_are_shown_nowhere(profiler):
    """Exporter1.Endpoint (every local user may read it) and the daemons' logs show the endpoint
    without the user information and query of its URL."""
    assert profiler.prop("Exporter", "Endpoint") == '"http://127.0.0.1:9/v1development/profiles"'
    assert "Exporting profiles to http://127.0.0.1:9/v1development/profiles" in profiler.output()
    assert URL_SECRET not in profiler.output()


def test_the_store_spool_and_exporter_config_are_not_the_symbolizers(profiler, tmp_path):
    profiler.flush()  # the store holds an interval
    spool = profiler.store.parent / "spool"
    assert profiler.store.exists() and spool.is_dir(), list(profiler.store.parent.iterdir())
    # The exporter's configuration as docs/systemd.md says to keep credentials: 0640
    # root:<exporter's group>; the exporter reads it, the symbolizer's user must not.
    conf = tmp_path / "exporter.conf"
    conf.write_text(f"headers = {SECRET}\n")
    os.chown(conf, 0, grp.getgrnam(EXPORTER_USER).gr_gid)
    conf.chmod(0o640)
    tmp_path.chmod(0o755)
    wal = profiler.store.with_name(profiler.store.name + "-wal")
    targets = [profiler.store, wal, spool, conf]
    got = probe_as_symbolizer_user(targets)
    assert set(got.values()) == {"PermissionError"}, got
    # And who may: the store is the collector's, readable by its group; the spool the exporter's.
    st = profiler.store.stat()
    assert (st.st_mode & 0o777, grp.getgrgid(st.st_gid).gr_name) == (0o640, STORE_GROUP), oct(st.st_mode)
    st = spool.stat()
    assert (st.st_mode & 0o777, pwd.getpwuid(st.st_uid).pw_name) == (0o700, EXPORTER_USER), oct(st.st_mode)


# A busy CPython process (Debian's, readable by every user), sampled so that the loader tracks
# it; it prints its pid and the native id of a second thread. DUMPABLE=0 makes its memory
# private first (prctl PR_SET_DUMPABLE, as gpg-agent and ssh-agent do).
BUSY_PYTHON = r"""
import ctypes, os, sys, threading, time
if sys.argv[1] == "0":
    assert ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE
t = threading.Thread(target=time.sleep, args=(3600,), daemon=True)
t.start()
print(os.getpid(), t.native_id, flush=True)
while True:
    pass
"""


def open_process_memory_as_symbolizer(profiler, pid):
    """Loader1.OpenProcessMemory(pid) called as the symbolizer's user: (the runtime answered,
    None) or (None, the error busctl printed)."""
    pw = pwd.getpwnam(SYMBOLIZER_USER)
    p = subprocess.run(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                        "--inh-caps=-all", "busctl", f"--address={profiler.bus}", "--timeout=25", "call",
                        "org.ebpfprofiler.Loader1", "/org/ebpfprofiler/Loader1", "org.ebpfprofiler.Loader1",
                        "OpenProcessMemory", "u", str(pid)], capture_output=True, text=True, timeout=60)
    if p.returncode == 0:
        return json.loads(p.stdout.split()[2]), None
    return None, p.stderr.strip()


def busy_python(user, dumpable):
    pw = pwd.getpwnam(user)
    p = subprocess.Popen(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                          "/usr/bin/python3", "-c", BUSY_PYTHON, str(int(dumpable))], stdout=subprocess.PIPE)
    pid, tid = map(int, read_lines(p, 1)[0].split())
    assert pid == p.pid, (pid, p.pid)  # setpriv execs
    return p, tid


def test_process_memory_only_of_profiled_runtimes(profiler):
    """The symbolizer gets the memory of a process that runs a runtime the loader walks, and
    of nothing else: not of a daemon of the profiler (the exporter holds the backend's
    credentials), PID 1, a program that is no runtime, a thread's id, or a Python process that
    made its memory private."""
    procs = []
    try:
        py, tid = busy_python("nobody", dumpable=True)
        private, _ = busy_python("nobody", dumpable=False)
        procs += [py, private]
        other = subprocess.Popen(["sleep", "3600"])
        procs.append(other)
        profiler.wait_for_runtimes([py.pid])
        # The private one runs CPython as far as the loader knows (BPF walks it), and still
        # its memory is not handed out.
        wait_until(lambda: private.pid in profiler.loader_map_keys("py_procs"),
                   f"the loader to track the CPython process {private.pid}", 120)
        refusals = profiler.prop("Loader", "MemoryRefusals")

        assert open_process_memory_as_symbolizer(profiler, py.pid) == ("cpython", None)
        refused = {what: open_process_memory_as_symbolizer(profiler, pid) for what, pid in [
            ("exporter", profiler.daemon_pid("ebpf-profiler-exporter")),
            ("collector", profiler.daemon_pid("ebpf-profiler-collector")),
            ("loader", profiler.daemon_pid("ebpf-profiler-loader")),
            ("PID 1", 1), ("sleep", other.pid), ("a thread", tid), ("not dumpable", private.pid)]}
        answered = {what: runtime for what, (runtime, _) in refused.items() if runtime is not None}
        assert not answered, f"memory handed out: {answered}; all: {refused}"
        # busctl shows an AccessDenied error by its name only; MemoryRefusals says whose it was.
        assert refused["not dumpable"][1] == "Call failed: Access denied", refused
        assert re.search(r"There is no process", refused["a thread"][1]), refused
        assert profiler.prop("Loader", "MemoryRefusals") > refusals
    finally:
        for p in procs:
            p.kill()
            p.wait()


RING_TAIL_OFFSET = 128  # common/shm-ring.c: RingShared, tail on its own cache line after head's
RING_HEAD_OFFSET = 64


def ring_header_of(pid, name):
    """The shared header of the ring named name that process pid holds (its memfd), mapped
    read-write as the consumer maps it."""
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith(f"/memfd:{name} "):
            with open(f"/proc/{pid}/fd/{fd}", "r+b") as f:
                return mmap.mmap(f.fileno(), 4096)
    raise AssertionError(f"process {pid} holds no ring {name}: {os.listdir(f'/proc/{pid}/fd')}")


@pytest.mark.parametrize("producer,consumer,ring", [
    ("Loader", "ebpf-profiler-collector", "ebpf-profiler-traces"),
    ("Collector", "ebpf-profiler-exporter", "ebpf-profiler-export"),
])
def test_a_consumer_writing_impossible_ring_positions_harms_no_producer(profiler, producer, consumer, ring):
    """The consumer of a ring (stopped, so that it does not find the damage first) writes an
    unaligned head near the end and a read position far past anything written. The producer
    (the loader for the collector, the collector for the exporter) neither writes out of
    bounds nor loops: it counts the impossible position (RingPeerErrors), lives on with the
    same pid, and once the consumer runs again, finds its ring broken and takes it over
    again, records flow as before."""
    daemon = f"ebpf-profiler-{producer.lower()}"
    producer_pid, consumer_pid = profiler.daemon_pid(daemon), profiler.daemon_pid(consumer)
    errors = profiler.prop(producer, "RingPeerErrors")
    header = ring_header_of(consumer_pid, ring)
    os.kill(consumer_pid, signal.SIGSTOP)
    try:
        data_size = struct.unpack_from("<Q", header, 8)[0]
        struct.pack_into("<Q", header, RING_HEAD_OFFSET, 3 * data_size - 3)
        struct.pack_into("<Q", header, RING_TAIL_OFFSET, 2**64 - 8)

        def counted():
            if producer == "Collector":
                profiler.flush()  # the collector writes an interval into the export ring
            return profiler.prop(producer, "RingPeerErrors") > errors
        wait_until(counted, f"the {producer.lower()} to count the impossible read position", 120)
    finally:
        os.kill(consumer_pid, signal.SIGCONT)
        header.close()
    assert profiler.daemon_pid(daemon) == producer_pid, profiler.output()[-3000:]

    # The consumer takes the ring over again and records flow.
    if producer == "Loader":
        traces = profiler.prop("Collector", "Traces")
        wait_until(lambda: profiler.prop("Collector", "Traces") > traces, "traces after the ring was taken over", 120)
    else:
        def exported():
            before = profiler.prop("Exporter", "Intervals")
            profiler.flush()
            return profiler.prop("Exporter", "Intervals") > before
        wait_until(exported, "an interval exported after the ring was taken over", 120, interval=1)
    assert profiler.daemon_pid(daemon) == producer_pid


# Maps its argument executable and spins (conftest.MAPPED_CHILD); unmaps it when a line comes
# on stdin.
MAP_THEN_UNMAP = MAPPED_CHILD + r"""
def unmap():
    sys.stdin.readline()
    m.close()
    print("unmapped", flush=True)
threading.Thread(target=unmap, daemon=True).start()
while True:
    pass
"""


# Maps its argument executable and stays busy until a line comes in; then unmaps it, says so
# and sleeps (sampled no more).
MAP_THEN_SLEEP = MAPPED_CHILD + r"""
line = threading.Event()
threading.Thread(target=lambda: (sys.stdin.readline(), line.set()), daemon=True).start()
while not line.is_set():
    pass
m.close()
print("unmapped", flush=True)
while True:
    time.sleep(3600)
"""


def file_id(path):
    """The file ID the loader gives a file (common/file-id.c: SHA-256 of its first and last 4 KiB
    and its size, 16 bytes)."""
    data = Path(path).read_bytes()
    n = min(len(data), 4096)
    return hashlib.sha256(data[:n] + data[len(data) - n:] + len(data).to_bytes(8, "big")).digest()[:16]


def open_file(profiler, fid):
    """Loader1.OpenFile(fid) as the symbolizer asks it; the CompletedProcess of busctl."""
    return subprocess.run(["busctl", f"--address={profiler.bus}", "--timeout=25", "call", "org.ebpfprofiler.Loader1",
                           "/org/ebpfprofiler/Loader1", "org.ebpfprofiler.Loader1", "OpenFile", "ay", "16",
                           *map(str, fid)], capture_output=True, text=True, timeout=60)


def test_a_mapped_file_swapped_for_a_fifo_blocks_no_daemon(profiler, tmp_path):
    """A process maps a library, unmaps it and puts a FIFO where it was. The loader, asked for
    the file (as the symbolizer asks for what it must read), opens only the mapped inode and
    only a regular file: it answers that the file is gone instead of waiting in open() on a
    FIFO nobody writes (the root daemon's loop stopped, its watchdog killing it, at will)."""
    tmp_path.chmod(0o755)
    lib = uncached_copy("/usr/lib/x86_64-linux-gnu/libz.so.1", tmp_path / "libhostile.so")
    fid = file_id(lib)
    p, busy = start_mapped_child(lib, MAP_THEN_UNMAP, stdin=subprocess.PIPE)
    try:
        wait_until(lambda: str(lib) in [row[0] for row in profiler.tables(busy) or ()],
                   f"the loader to know {lib} mapped by {busy}", 120)
        r = open_file(profiler, fid)
        assert r.returncode == 0 and r.stdout.startswith("h "), (r.stdout, r.stderr)

        p.stdin.write(b"unmap\n")
        p.stdin.flush()
        assert read_lines(p, 1) == ["unmapped"]
        lib.unlink()
        os.mkfifo(lib)
        r = open_file(profiler, fid)
        assert r.returncode != 0 and "any more" in r.stderr, (r.stdout, r.stderr)
        assert profiler.prop("Loader", "Frequency") > 0  # and it answers on
    finally:
        p.kill()
        p.wait()
        if lib.is_fifo():  # a reader stuck in open() (before the fix) gets a writer and ends
            try:
                os.close(os.open(lib, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass


def test_a_new_file_given_a_forgotten_files_inode_number_is_itself(profiler, tmp_path):
    """A process maps a library and unmaps it, and is not looked at again (it sleeps, so no
    sample makes the loader read its mappings): the loader still holds what that inode was.
    The file is deleted and a new one made, which a file system like ext4 gives the freed inode
    number. Mapped by another process, the new file is that file, with its own path and ID, not
    the deleted one's (whose table and symbols would be used for it)."""
    tmp_path.chmod(0o755)
    old = uncached_copy("/usr/lib/x86_64-linux-gnu/libz.so.1", tmp_path / "libold.so")
    sleeper, sleeping = start_mapped_child(old, MAP_THEN_SLEEP, stdin=subprocess.PIPE)
    mapper = None
    try:
        wait_until(lambda: str(old) in [row[0] for row in profiler.tables(sleeping) or ()],
                   f"the loader to know {old} mapped by {sleeping}", 120)
        sleeper.stdin.write(b"unmap\n")
        sleeper.stdin.flush()
        assert read_lines(sleeper, 1) == ["unmapped"]  # and it sleeps from here on
        old_ino = old.stat().st_ino
        old.unlink()
        new = uncached_copy("/usr/lib/x86_64-linux-gnu/libz.so.1", tmp_path / "libnew.so")
        print(f"inode numbers: deleted file {old_ino}, new file {new.stat().st_ino}")
        mapper, busy = start_mapped_child(new)

        def listed():
            rows = profiler.tables(busy) or ()
            names = [row[0] for row in rows if row[0].startswith(str(tmp_path))]
            return bool(names), names
        names = wait_until(listed, f"the loader to know the file of {tmp_path} mapped by {busy}", 120)
        assert names == [str(new)], names
    finally:
        for p in (sleeper, mapper):
            if p:
                p.kill()
                p.wait()


# A library with a function only its .symtab names (static: not in .dynsym, so the dynamic
# linker never reads its name), and 8 KiB of other names after it: its name in .strtab lies
# outside the first and the last 4 KiB, the bytes a file's htlhash reads.
VICTIM_LIB = r"""
__attribute__((noinline)) static unsigned long spin_here(unsigned long n) {
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < n; i++)
        x += i;
    return x;
}
unsigned long victim_entry(unsigned long n) { return spin_here(n) + 1; }
""" + "".join(f"int a_global_whose_long_name_makes_the_string_table_longer_{i:03d} = {i};\n" for i in range(128))

CALL_IN_A_LOOP = """
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.victim_entry.restype = ctypes.c_ulong
lib.victim_entry.argtypes = [ctypes.c_ulong]
print("loaded", flush=True)
while True:
    lib.victim_entry(1 << 20)
"""


def build_victim_lib(workdir):
    src, lib = workdir / "victim.c", workdir / "libvictim.so"
    src.write_text(VICTIM_LIB)
    subprocess.run(["gcc", "-O1", "-shared", "-fPIC", "-o", lib, src], check=True)
    lib.chmod(0o755)
    return lib


def forge(lib, dst, owner):
    """A copy of lib whose .symtab names spin_here pwned_her: the same first and last 4 KiB and
    size, hence the same htlhash, owned by owner."""
    data = bytearray(lib.read_bytes())
    at = data.find(b"\0spin_here\0") + 1
    assert 4096 <= at and at + 9 <= len(data) - 4096, f"the name at {at} of {len(data)} bytes is hashed"
    data[at:at + 9] = b"pwned_her"
    dst.write_bytes(bytes(data))
    dst.chmod(0o755)
    pw = pwd.getpwnam(owner)
    os.chown(dst, pw.pw_uid, pw.pw_gid)
    assert file_id(dst) == file_id(lib)
    return dst


def stored_functions(profiler, pid):
    """{function: the paths of its frames} of pid's stored frames, once every sample so far is
    named."""
    profiler.wait_samples(pid, 20)
    stop_threads(pid)
    profiler.settle([pid])
    out = {}
    with profiler.db() as con:
        for _, _, frames, _ in samples_with_frames(con, pid):
            for f in frames:
                out.setdefault(f["function"], set()).add(f["path"])
    return out


def test_a_file_forging_a_system_librarys_identity_names_only_itself(profiler):
    """A user copies a library root installed, changes the name of a function in its middle and
    keeps its first and last 4 KiB and its size: the htlhash of both is one. Run first (its
    frames are named and cached first), its names must not become the library's: the file of
    a user has an ID of its own, so the library's frames, its symbols and its unwind table are
    the library's."""
    workdir = Path(tempfile.mkdtemp(prefix="ep-forged-"))
    workdir.chmod(0o755)
    procs = []
    try:
        lib = build_victim_lib(workdir)
        forged = forge(lib, workdir / "libforged.so", "nobody")
        pw = pwd.getpwnam("nobody")
        attacker = subprocess.Popen(["setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups",
                                     "/usr/bin/python3", "-c", CALL_IN_A_LOOP, str(forged)], stdout=subprocess.PIPE)
        procs.append(attacker)
        assert read_lines(attacker, 1) == ["loaded"]
        names = stored_functions(profiler, attacker.pid)
        assert names.get("pwned_her") == names.get("victim_entry") == {str(forged)}, names

        victim = subprocess.Popen(["/usr/bin/python3", "-c", CALL_IN_A_LOOP, str(lib)], stdout=subprocess.PIPE)
        procs.append(victim)
        assert read_lines(victim, 1) == ["loaded"]
        names = stored_functions(profiler, victim.pid)
        assert "pwned_her" not in names, names
        assert names.get("spin_here") == names.get("victim_entry") == {str(lib)}, names

        # Two files in the store, one htlhash: the export names both by it.
        with profiler.db() as con:
            rows = con.execute("SELECT path, file_id, htlhash FROM files WHERE path IN (?, ?)",
                               (str(lib), str(forged))).fetchall()
        assert len(rows) == 2 and rows[0][1] != rows[1][1], rows
        assert {bytes(r[2]) for r in rows} == {file_id(lib)}, rows
        assert {bytes(r[1]) for r in rows if r[0] == str(lib)} == {file_id(lib)}, rows
    finally:
        for p in procs:
            p.kill()
            p.wait()
        shutil.rmtree(workdir, ignore_errors=True)


MAP_MANY = r"""
import ctypes, mmap, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    path = os.path.join(d, f"x{i}")
    with open(path, "wb") as f:
        f.write(os.urandom(64))
    fd = os.open(path, os.O_RDONLY)
    addr = libc.mmap(None, 64, mmap.PROT_READ | mmap.PROT_EXEC, mmap.MAP_PRIVATE, fd, 0)
    os.close(fd)  # the mapping holds the file (mmap.mmap would keep a descriptor per file)
    if addr in (None, ctypes.c_void_p(-1).value):
        sys.exit(f"mmap {path}: {os.strerror(ctypes.get_errno())}")
release = lambda: None
""" + FORK_CHILD + r"""
while True:
    pass
"""
MANY_FILES = 20000  # more than a user's share of identified files (at most 16,384: proc-maps.h)


def test_a_users_twenty_thousand_files_leave_profiling_of_others_working(profiler, tmp_path):
    """A user maps 20,000 tiny distinct files executable (each a file to identify, a descriptor
    the loader would hold, a BPF slot and a table to ask for). The loader keeps answering, that
    user gets its share and no more (FileIdentityRefusals counts the rest), and a process of
    another user started afterwards gets its file identified and its table loaded."""
    nobody = pwd.getpwnam("nobody")
    tmp_path.chmod(0o755)
    d = Path(tempfile.mkdtemp(prefix="ep-many-"))  # pytest's tree is root's alone
    d.chmod(0o755)
    os.chown(d, nobody.pw_uid, nobody.pw_gid)
    many = victim = None
    try:
        many, spinning = start_mapped_child(d, MAP_MANY, args=[MANY_FILES], user=nobody)
        def refused():
            n = profiler.prop("Loader", "FileIdentityRefusals")
            rows = profiler.tables(spinning)
            return n > 0, (f"{n} refused, {profiler.prop('Loader', 'Files')} files known, "
                           f"{'not known' if rows is None else f'{len(rows)} tables'} for {spinning}")
        wait_until(refused, f"the loader to refuse files of {spinning} past its user's share", 300,
                   diagnosis=lambda: profiler.diagnosis([spinning]))
        lib = uncached_copy("/usr/lib/x86_64-linux-gnu/libz.so.1", tmp_path / "libvictim.so")
        victim, busy = start_mapped_child(lib)

        def loaded():
            states = [state for path, state, *_ in profiler.tables(busy) or () if path == str(lib)]
            return states == ["loaded"], states
        wait_until(loaded, f"the table of {lib}, mapped by {busy}, loaded", 300,
                   diagnosis=lambda: profiler.diagnosis([busy]))
    finally:
        for p in (many, victim):
            if p:
                p.kill()
                p.wait()
        shutil.rmtree(d)
