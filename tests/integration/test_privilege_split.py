"""The split between the daemons holds against one of them taken over (issue 17): the
symbolizer parses hostile files from every process on the host, so its user must gain nothing
from the other daemons. Tried as that user would: no daemon's environment or memory is
readable, nor the store, the spool or the exporter's configuration, and the exporter's settings
(a backend's credentials among them) reach the exporter alone."""

import grp
import json
import os
import pwd
import subprocess
import uuid

import pytest

from conftest import Profiler, need_root

SYMBOLIZER_USER = "ebpf-profiler-symbolizer"  # run's default for the symbolizer
EXPORTER_USER = "ebpf-profiler-exporter"
STORE_GROUP = "ebpf-profiler"  # the collector's group: who may read the store
DAEMONS = ("ebpf-profiler-loader", "ebpf-profiler-symbolizer", "ebpf-profiler-collector",
           "ebpf-profiler-exporter")
SECRET = f"Authorization=Bearer ep-test-{uuid.uuid4().hex}"

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
    p = Profiler(env={"OTEL_EXPORTER_OTLP_HEADERS": SECRET,
                      "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9/v1development/profiles"})
    try:
        yield p
    finally:
        p.stop()


def pids(profiler):
    found = {d: profiler.daemon_pid(d) for d in DAEMONS}
    assert all(found.values()), found
    return found


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
