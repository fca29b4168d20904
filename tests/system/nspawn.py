# SPDX-License-Identifier: MIT
"""A Debian 12 tree booted with systemd-nspawn, for the system tests.

The tree is made once with debootstrap and kept in a cache directory (EP_NSPAWN_ROOT, by default
/var/cache/ebpf-profiler-tests/bookworm): about 45 s the first time, nothing after. Every boot is
ephemeral (-x), so the cached tree stays pristine. The container's PID 1 is systemd; a unit made
for the test runs one script and exits the container with the script's status.
"""

import os
import pathlib
import shutil
import subprocess
import tempfile

ROOT = pathlib.Path(os.environ.get("EP_NSPAWN_ROOT", "/var/cache/ebpf-profiler-tests/bookworm"))
READY_MARK = ".ebpf-profiler-tests-ready"
SOURCES = pathlib.Path("/etc/apt/sources.list.d/debian.sources")

# What BPF needs inside: the capabilities the loader's unit asks for, and the two system calls
# nspawn's own seccomp filter refuses by default.
NSPAWN_BPF_ARGS = [
    "--capability=CAP_BPF,CAP_PERFMON,CAP_SYSLOG,CAP_CHECKPOINT_RESTORE",
    "--system-call-filter=bpf perf_event_open",
    "--bind=/sys/fs/bpf",
]

SELFTEST_UNIT = """[Unit]
Description=Run /out/selftest.sh and exit the container with its status
After=multi-user.target dbus.service

[Service]
Type=oneshot
StandardOutput=file:/out/selftest.log
StandardError=inherit
ExecStart=/bin/sh -c '/out/selftest.sh; rc=$?; echo "selftest rc=$rc"; systemctl exit $rc'
"""


class NspawnUnavailable(Exception):
    pass


def _run(cmd, timeout, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)


def _mirror():
    """The Debian mirror the host uses (deb822 or one-line sources)."""
    if SOURCES.exists():
        for line in SOURCES.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    legacy = pathlib.Path("/etc/apt/sources.list")
    if legacy.exists():
        for line in legacy.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "deb":
                return parts[1]
    return "http://deb.debian.org/debian"


def ensure_rootfs():
    """Makes the cached tree if it is not there; returns its path."""
    for tool in ("debootstrap", "systemd-nspawn"):
        if shutil.which(tool) is None:
            raise NspawnUnavailable(f"{tool} is not installed (scripts/setup.sh --test-deps installs it)")
    if (ROOT / READY_MARK).exists():
        return ROOT
    if ROOT.exists():
        shutil.rmtree(ROOT)  # a half-made tree from an interrupted run
    ROOT.parent.mkdir(parents=True, exist_ok=True)
    r = _run(["debootstrap", "--variant=minbase", "--include=systemd,dbus,systemd-sysv",
              "bookworm", str(ROOT), _mirror()], timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"debootstrap failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    # The same suites as the host (updates, security), so the package's versioned dependencies
    # can be met: it was built against the host's libraries.
    if SOURCES.exists():
        (ROOT / "etc/apt/sources.list").unlink(missing_ok=True)
        shutil.copy(SOURCES, ROOT / "etc/apt/sources.list.d/debian.sources")
    (ROOT / READY_MARK).write_text("debootstrap done\n")
    return ROOT


def _nspawn_cmd(root, *args):
    return ["systemd-nspawn", "-D", str(root), "--register=no", "--keep-unit", "-q", *args]


def install_dependencies(root, deb):
    """Installs the .deb's dependencies into the cached tree (not the package itself), so every
    boot can dpkg -i it offline; and man-db, which a Debian administrator has, to read the
    package's man pages there."""
    depends = _run(["dpkg-deb", "-f", str(deb), "Depends"], timeout=30).stdout.strip()
    if not depends:
        raise RuntimeError(f"no Depends field in {deb}")
    script = ("set -e; export DEBIAN_FRONTEND=noninteractive; "
              "apt-get -o DPkg::Lock::Timeout=300 -qq update; "
              "apt-get -o DPkg::Lock::Timeout=300 -y -qq --no-install-recommends satisfy \"$1, man-db\"; "
              "apt-get -qq clean")
    r = _run(_nspawn_cmd(root, "--pipe", "sh", "-c", script, "sh", depends), timeout=900)
    if r.returncode != 0:
        raise RuntimeError(f"installing {depends!r} in the container failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")


def boot_selftest(root, script, files, timeout=600):
    """Boots the tree (ephemeral), runs script (a path) as a unit with the given files next to
    it in /out, and returns (exit status, selftest output, console output)."""
    out = pathlib.Path(tempfile.mkdtemp(prefix="ep-nspawn-out."))
    units = pathlib.Path(tempfile.mkdtemp(prefix="ep-nspawn-units."))
    try:
        os.chmod(out, 0o755)
        shutil.copy(script, out / "selftest.sh")
        os.chmod(out / "selftest.sh", 0o755)
        for f in files:
            shutil.copy(f, out / pathlib.Path(f).name)
        (units / "selftest.service").write_text(SELFTEST_UNIT)
        # The units directory is bound read-only onto /usr/local/lib/systemd/system: binding
        # single files would leave empty (= masked) placeholders in the tree.
        cmd = _nspawn_cmd(root, "-x", "--console=pipe", *NSPAWN_BPF_ARGS,
                          f"--bind={out}:/out", f"--bind-ro={units}:/usr/local/lib/systemd/system",
                          "--boot", "--", "systemd.wants=selftest.service")
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               errors="replace", timeout=timeout)
            rc, console = r.returncode, r.stdout
        except subprocess.TimeoutExpired as e:
            rc, console = -1, (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        log = out / "selftest.log"
        return rc, log.read_text(errors="replace") if log.exists() else "", console
    finally:
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(units, ignore_errors=True)
