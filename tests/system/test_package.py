# SPDX-License-Identifier: MIT
"""The Debian package, inspected without installing it: it builds from the working tree,
lintian has nothing to say above info, it holds what an installation needs (and nothing from
the build tree), its dependencies and maintainer scripts are right, and its man pages render
without a warning. tests/system/test_nspawn.py installs it in a booted container."""

import os
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest

# The package is built once per session (conftest.deb_build): under pytest-xdist the files that
# use it run in one worker, so it is not built twice.
pytestmark = pytest.mark.xdist_group("deb")

LIBEXEC = "usr/libexec/ebpf-profiler"
DAEMONS = ["ebpf-profiler-loader", "ebpf-profiler-symbolizer", "ebpf-profiler-collector",
           "ebpf-profiler-exporter"]
UNITS = ["ebpf-profiler.target"] + [d + ".service" for d in DAEMONS]
MAN_PAGES = ["man1/ebpf-profiler.1.gz"] + [f"man8/{d}.8.gz" for d in DAEMONS]
POLICY = "usr/share/dbus-1/system.d/org.ebpfprofiler.conf"


def run(cmd, **kw):
    kw.setdefault("timeout", 300)
    return subprocess.run(cmd, capture_output=True, text=True, errors="replace", **kw)


@pytest.fixture(scope="module")
def contents(deb_path):
    """{path without the leading './': (mode string, owner/group, size)} of the package."""
    r = run(["dpkg-deb", "-c", str(deb_path)])
    assert r.returncode == 0, r.stderr
    files = {}
    for line in r.stdout.splitlines():
        parts = line.split(None, 5)
        path = parts[5].split(" -> ")[0]
        files[path[2:].rstrip("/")] = (parts[0], parts[1], int(parts[2]))
    print("\n".join(sorted(files)))
    return files


@pytest.fixture(scope="module")
def unpacked(deb_path, tmp_path_factory):
    """The package's files and control area, unpacked."""
    d = tmp_path_factory.mktemp("unpacked")
    assert run(["dpkg-deb", "-x", str(deb_path), str(d / "root")]).returncode == 0
    assert run(["dpkg-deb", "-e", str(deb_path), str(d / "DEBIAN")]).returncode == 0
    return d


@pytest.fixture(scope="module")
def unit_dir(contents):
    """lib/systemd/system on Debian 12 (pkg-config systemd), usr/lib/systemd/system later."""
    for d in ("lib/systemd/system", "usr/lib/systemd/system"):
        if f"{d}/ebpf-profiler.target" in contents:
            return d
    pytest.fail("no ebpf-profiler.target in the package:\n" + "\n".join(sorted(contents)))


def test_build_succeeded(deb_build):
    assert deb_build.returncode == 0, deb_build.describe()
    names = [d.name for d in deb_build.debs]
    print(f"built in {deb_build.seconds:.0f} s: {names}")
    assert deb_build.deb is not None, f"no main ebpf-profiler_*.deb among {names}"
    assert any(n.startswith("ebpf-profiler-dbgsym_") for n in names), f"no -dbgsym package among {names}"
    assert deb_build.changes is not None, "no .changes file"
    log = deb_build.log
    if "nocheck" not in os.environ.get("DEB_BUILD_OPTIONS", ""):
        # the unit tests ran during the build, none failed, and the fuzzers were left out
        summary = re.search(r"^Ok:\s+(\d+)\s*$.*?^Fail:\s+(\d+)\s*$", log, re.M | re.S)
        assert summary, "no meson test summary in the build log"
        assert int(summary.group(1)) > 0 and int(summary.group(2)) == 0, summary.group(0)
        ran = re.findall(r"^\s*\d+/\d+ ebpf-profiler:\S+ / (\S+)", log, re.M)
        assert ran and not [t for t in ran if "-fuzz-" in t], f"the package build ran {ran}"
    # the whole build stays quick
    assert deb_build.seconds < 600, f"the package build took {deb_build.seconds:.0f} s"


def test_lintian(deb_build, deb_path):
    """lintian on the .changes (both packages and the .buildinfo): no error, no warning.
    As root, lintian only adds a note about root; it runs as nobody, on a copy nobody can read."""
    lintian = shutil.which("lintian")
    if not lintian:
        pytest.skip("lintian not installed (scripts/setup.sh --test-deps)")
    with tempfile.TemporaryDirectory(prefix="ep-lintian.") as tmp:
        os.chmod(tmp, 0o755)
        for f in deb_build.outdir.iterdir():
            if f.suffix in (".deb", ".changes", ".buildinfo"):
                shutil.copy(f, tmp)
                os.chmod(pathlib.Path(tmp) / f.name, 0o644)
        changes = pathlib.Path(tmp) / deb_build.changes.name
        cmd = [lintian, "--fail-on", "error,warning", "--display-info", "--tag-display-limit", "0",
               str(changes)]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "nobody", "--"] + cmd
        r = run(cmd, cwd=tmp, timeout=600)
    print(f"$ {' '.join(cmd)}\n{r.stdout}{r.stderr}(exit status {r.returncode})")
    assert r.returncode == 0, f"lintian failed:\n{r.stdout}{r.stderr}"
    tags = [line for line in r.stdout.splitlines() if re.match(r"^[EW]: ", line)]
    assert not tags, "\n".join(tags)


def test_contents(contents, unit_dir):
    expected = (["usr/bin/ebpf-profiler"]
                + [f"{LIBEXEC}/{d}" for d in DAEMONS]
                + [f"{unit_dir}/{u}" for u in UNITS]
                + ["usr/lib/sysusers.d/ebpf-profiler.conf",
                   "usr/lib/tmpfiles.d/ebpf-profiler.conf",
                   "usr/lib/sysctl.d/60-ebpf-profiler.conf",
                   "etc/default/ebpf-profiler",
                   "etc/ebpf-profiler/exporter.conf",
                   POLICY]
                + [f"usr/share/man/{m}" for m in MAN_PAGES]
                + ["usr/share/bash-completion/completions/ebpf-profiler",
                   "usr/share/doc/ebpf-profiler/copyright",
                   "usr/share/doc/ebpf-profiler/README.Debian",
                   "usr/share/doc/ebpf-profiler/changelog.gz"])
    missing = [p for p in expected if p not in contents]
    assert not missing, "missing from the package: " + ", ".join(missing)

    for exe in ["usr/bin/ebpf-profiler"] + [f"{LIBEXEC}/{d}" for d in DAEMONS]:
        mode, owner, size = contents[exe]
        assert mode == "-rwxr-xr-x" and owner == "root/root" and size > 0, (exe, contents[exe])
    for f in [f"{unit_dir}/{u}" for u in UNITS] + [POLICY]:
        assert contents[f][0] == "-rw-r--r--", (f, contents[f])


def test_nothing_from_the_build_tree(contents):
    """The BPF object is embedded in the loader (a skeleton): no .o, no test programs, workloads,
    fuzzers or benchmarks, nothing under /usr/local."""
    stray = [p for p in contents
             if p.endswith((".o", ".a", ".h", ".skel.h", ".py", ".c"))
             or p.startswith("usr/local")
             or re.search(r"(^|/)(test-|fuzz-|bench-|ep-replay)", p)]
    assert not stray, "unexpected files: " + ", ".join(stray)
    executables = sorted(p for p, (mode, _, _) in contents.items() if mode.startswith("-") and "x" in mode)
    assert executables == sorted(["usr/bin/ebpf-profiler"] + [f"{LIBEXEC}/{d}" for d in DAEMONS]), executables


def test_bpf_program_embedded(unpacked):
    loader = (unpacked / "root" / LIBEXEC / "ebpf-profiler-loader").read_bytes()
    # the skeleton carries the whole BPF ELF object, with the perf_event program's section
    assert b"\x7fELF" in loader[64:], "no embedded ELF object in the loader"
    assert b"perf_event" in loader and b"on_sample" in loader, "the BPF program is not embedded"


def test_cli_finds_installed_files(unpacked, contents):
    """`ebpf-profiler run` finds the daemons and the D-Bus policy at paths compiled in
    (prefix /usr): they must be where the package puts them."""
    cli = (unpacked / "root" / "usr/bin/ebpf-profiler").read_bytes()
    for path in ["/" + LIBEXEC, "/" + POLICY]:
        assert path.encode() + b"\0" in cli, f"the CLI does not have {path} compiled in"
    assert POLICY in contents
    assert all(f"{LIBEXEC}/{d}" in contents for d in DAEMONS)
    assert b"/var/lib/ebpf-profiler/profiles.db" in cli


def test_control(deb_path):
    fields = {}
    for name in ["Package", "Architecture", "Depends", "Section", "Maintainer", "Description"]:
        fields[name] = run(["dpkg-deb", "-f", str(deb_path), name]).stdout.strip()
    info = run(["dpkg-deb", "-I", str(deb_path)]).stdout
    print(info)
    assert fields["Package"] == "ebpf-profiler"
    assert fields["Architecture"] == "amd64"
    depends = [d.strip() for d in fields["Depends"].split(",")]
    names = [re.split(r"[ (]", d)[0] for d in depends]
    for lib in ["libbpf1", "libsystemd0", "libelf1", "libdw1", "libcurl4", "libsqlite3-0", "libprotobuf-c1",
                "zlib1g", "libc6"]:
        assert lib in names, f"Depends lacks {lib}: {fields['Depends']}"
    # SHA-256 is our own (common/sha256.c): only libcurl's TLS uses OpenSSL, through libcurl.
    assert "libssl3" not in names, fields["Depends"]
    assert "dbus" in names, fields["Depends"]
    assert any(d.startswith("systemd | systemd-standalone-sysusers") for d in depends), fields["Depends"]
    for f in ["postinst", "prerm", "postrm", "conffiles"]:
        assert re.search(rf"^\s+\d+ bytes,\s+\d+ lines\s+\*?\s*{f}\b", info, re.M), f"no {f} in the control area"


def test_conffiles(unpacked):
    conffiles = (unpacked / "DEBIAN" / "conffiles").read_text().split()
    assert "/etc/default/ebpf-profiler" in conffiles
    # The exporter's settings: a commented example, never overwritten under an administrator's
    # edits; its mode (0640 root:ebpf-profiler-exporter) is the postinst's, the .deb has 0644.
    assert "/etc/ebpf-profiler/exporter.conf" in conffiles
    text = (unpacked / "root" / "etc" / "ebpf-profiler" / "exporter.conf").read_text()
    assert all(not line.strip() or line.startswith("#") for line in text.splitlines()), text


def test_maintainer_scripts_parse(unpacked):
    for script in ["preinst", "postinst", "prerm", "postrm"]:
        r = run(["sh", "-n", str(unpacked / "DEBIAN" / script)])
        assert r.returncode == 0, f"{script}: {r.stderr}"


STUBS = ["systemd-sysusers", "systemd-tmpfiles", "dbus-send", "deb-systemd-helper", "deb-systemd-invoke",
         "systemctl"]


def run_maintainer_script(unpacked, tmp_path, script, *args):
    """Runs a maintainer script in a private mount namespace (tmpfs over /run, /var/lib and
    /var/cache; a booted systemd and a system bus faked there) with the system commands it
    calls replaced by stubs that log their arguments. Returns (result, the calls in order)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("needs root and unshare")
    stubs, log = tmp_path / "stubs", tmp_path / "calls"
    stubs.mkdir()
    for name in STUBS:
        (stubs / name).write_text(f'#!/bin/sh\necho "{name} $*" >> {log}\n')
        (stubs / name).chmod(0o755)
    sh = f"""set -e
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /var/lib
mount -t tmpfs tmpfs /var/cache
# The host's own /etc/ebpf-profiler (if any) is not the script's to remove.
if [ -d /etc/ebpf-profiler ]; then mount -t tmpfs tmpfs /etc/ebpf-profiler; fi
mkdir -p /run/systemd/system /run/dbus /var/lib/ebpf-profiler/spool /var/cache/ebpf-profiler
touch /var/lib/ebpf-profiler/profiles.db /var/cache/ebpf-profiler/symbols.db
/usr/bin/python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("/run/dbus/system_bus_socket")'
PATH={stubs}:/usr/sbin:/usr/bin:/sbin:/bin sh {unpacked / "DEBIAN" / script} "$@"
echo "left: $(ls -d /var/lib/ebpf-profiler /var/cache/ebpf-profiler 2>/dev/null | xargs)"
"""
    r = run(["unshare", "-m", "--propagation", "private", "sh", "-c", sh, "sh", *args], timeout=60)
    calls = log.read_text().splitlines() if log.exists() else []
    print(f"{script} {' '.join(args)}: exit {r.returncode}\n{r.stdout}{r.stderr}" + "\n".join(calls))
    return r, calls


def test_postinst_configure_order(unpacked, tmp_path):
    """The user exists before the bus reloads its policy, the bus reloads before anything
    starts, every unit is enabled, and only the target is started."""
    r, calls = run_maintainer_script(unpacked, tmp_path, "postinst", "configure")
    assert r.returncode == 0

    def index(pattern):
        found = [i for i, c in enumerate(calls) if re.search(pattern, c)]
        assert found, f"no call matching {pattern!r}"
        return found[0]

    user = index(r"^systemd-sysusers .*ebpf-profiler\.conf$")
    reload = index(r"^dbus-send .*org\.freedesktop\.DBus\.ReloadConfig")
    tmpfiles = index(r"^systemd-tmpfiles .*--create ebpf-profiler\.conf")
    starts = [c for c in calls if c.startswith("deb-systemd-invoke start")]
    assert starts == ["deb-systemd-invoke start ebpf-profiler.target"], starts
    start = calls.index(starts[0])
    assert user < reload < start and tmpfiles < start, calls
    enabled = [c.split()[-1] for c in calls if c.startswith("deb-systemd-helper enable")]
    assert sorted(enabled) == sorted(UNITS), enabled
    assert max(i for i, c in enumerate(calls) if c.startswith("deb-systemd-helper enable")) < start


def test_prerm_remove_stops_everything(unpacked, tmp_path):
    r, calls = run_maintainer_script(unpacked, tmp_path, "prerm", "remove")
    assert r.returncode == 0
    stopped = {u for c in calls if c.startswith("deb-systemd-invoke stop") for u in c.split()[2:]}
    assert set(UNITS) <= {u.strip("'") for u in stopped}, calls


def test_postrm_purge_removes_state(unpacked, tmp_path):
    r, calls = run_maintainer_script(unpacked, tmp_path, "postrm", "purge")
    assert r.returncode == 0
    assert "left: \n" in r.stdout, "purge left the state or cache directory behind"
    purged = {u.strip("'") for c in calls if c.startswith("deb-systemd-helper purge") for u in c.split()[2:]}
    assert set(UNITS) <= purged, calls


@pytest.mark.parametrize("page", MAN_PAGES)
def test_man_page_renders(unpacked, page):
    """What lintian runs (groff warnings as errors), on the installed, gzipped page."""
    path = unpacked / "root" / "usr/share/man" / page
    assert path.exists(), page
    if not shutil.which("man"):
        pytest.skip("man-db not installed")
    r = run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", str(path)],
            env=dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="80"))
    assert r.returncode == 0 and r.stderr.strip() == "", f"{page}:\n{r.stderr}"
    text = run(["man", "-l", str(path)], env=dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="80")).stdout
    text = re.sub(r".\x08", "", text)   # overstrike (bold, underline) when not a terminal
    for section in ["NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "FILES", "SEE ALSO"]:
        assert f"\n{section}\n" in text, f"{page} has no {section} section"
