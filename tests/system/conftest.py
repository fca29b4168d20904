# SPDX-License-Identifier: MIT
"""System tests: the Debian package, built once per session from the working tree.

Fixtures:
  deb_build  the result of scripts/build-deb.sh (exit status, output, directory, timing)
  deb_path   the main ebpf-profiler_*.deb (not the -dbgsym one); fails the tests that use it
             when the build failed
"""

import dataclasses
import pathlib
import shutil
import subprocess
import time

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD_DEB = REPO / "scripts" / "build-deb.sh"
BUILD_TIMEOUT = 1800


@dataclasses.dataclass
class DebBuild:
    returncode: int
    stdout: str
    stderr: str
    outdir: pathlib.Path
    seconds: float

    @property
    def debs(self):
        return sorted(self.outdir.glob("*.deb"))

    @property
    def deb(self):
        """The main package: ebpf-profiler_VERSION_ARCH.deb."""
        main = [d for d in self.debs if d.name.startswith("ebpf-profiler_")]
        return main[0] if len(main) == 1 else None

    @property
    def changes(self):
        found = sorted(self.outdir.glob("ebpf-profiler_*.changes"))
        return found[0] if found else None

    @property
    def log(self):
        """dpkg-buildpackage's whole output (build-deb.sh keeps it next to the packages)."""
        found = sorted(self.outdir.glob("ebpf-profiler_*.build"))
        return found[0].read_text(errors="replace") if found else ""

    def describe(self):
        return (f"scripts/build-deb.sh exited {self.returncode} after {self.seconds:.0f} s\n"
                f"--- stdout ---\n{self.stdout[-3000:]}\n--- stderr ---\n{self.stderr[-6000:]}")


def pytest_configure(config):
    # Known without pytest-xdist too (scripts/test.sh runs these files in two workers).
    config.addinivalue_line("markers", "xdist_group(name): run in the same pytest-xdist worker")


@pytest.fixture(scope="session")
def deb_build(tmp_path_factory):
    if not shutil.which("dpkg-buildpackage") or not shutil.which("dh"):
        pytest.skip("dpkg-buildpackage/debhelper not installed (scripts/setup.sh --test-deps)")
    outdir = tmp_path_factory.mktemp("deb")
    start = time.monotonic()
    try:
        p = subprocess.run(["bash", str(BUILD_DEB), str(outdir)], capture_output=True, text=True,
                           errors="replace", timeout=BUILD_TIMEOUT, cwd=REPO)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out, err = -1, str(e.stdout or ""), f"timed out after {BUILD_TIMEOUT} s\n{e.stderr or ''}"
    build = DebBuild(rc, out, err, outdir, time.monotonic() - start)
    print(f"package build: {build.seconds:.0f} s, {[d.name for d in build.debs]}")
    return build


@pytest.fixture(scope="session")
def deb_path(deb_build):
    if deb_build.returncode != 0 or deb_build.deb is None:
        pytest.fail("the package did not build:\n" + deb_build.describe(), pytrace=False)
    printed = deb_build.stdout.strip().splitlines()
    assert printed and pathlib.Path(printed[-1]) == deb_build.deb, deb_build.describe()
    return deb_build.deb
