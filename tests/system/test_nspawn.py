# SPDX-License-Identifier: MIT
"""The Debian package under a real systemd: booted in a container with systemd-nspawn.

One boot runs tests/system/selftest.sh, which installs the package, enables the target and
checks what an administrator relies on, then, with the package purged, installs the same build
the way `meson install` leaves it; each of its checks is one test here.
"""

import pathlib
import re

import pytest

import nspawn

# The package is built once per session (conftest.deb_build): under pytest-xdist the files that
# use it run in one worker, so it is not built twice.
pytestmark = pytest.mark.xdist_group("deb")

HERE = pathlib.Path(__file__).resolve().parent
UNITS = ["ebpf-profiler-loader", "ebpf-profiler-symbolizer", "ebpf-profiler-collector",
         "ebpf-profiler-exporter"]
CHECKS = (["install", "system-user", "man-renders", "target-enabled", "all-active", "loader-drops-perfmon", "top-shows-workload",
           "top-named-stacks", "privilege-split", "resource-limits",
           "busctl-get-property", "busctl-tree-introspect", "busctl-call", "bus-policy", "cli-status",
           "journal-structured"]
          + [f"restart-{u}" for u in UNITS]
          + ["analyze-verify"] + [f"exposure-{u}" for u in UNITS]
          + ["upgrade-keeps-samples", "upgrade-keeps-conffile", "target-stop", "remove", "purge", "meson-install-active", "meson-install-samples"])


@pytest.fixture(scope="module")
def selftest(deb_path, deb_build):
    try:
        root = nspawn.ensure_rootfs()
    except nspawn.NspawnUnavailable as e:
        pytest.skip(str(e))
    nspawn.install_dependencies(root, deb_path)
    meson_tree = deb_build.outdir / "meson-install.tar.gz"
    assert meson_tree.exists(), f"scripts/build-deb.sh left no {meson_tree.name}"
    rc, log, console = nspawn.boot_selftest(root, HERE / "selftest.sh", [deb_path, meson_tree])
    print(log)
    results = {}
    for m in re.finditer(r"^CHECK (\S+) (ok|FAIL)(?: (.*))?$", log, re.M):
        results[m.group(1)] = (m.group(2) == "ok", m.group(3) or "")
    return rc, log, console, results


def _context(log, name):
    """The lines the selftest printed after a failed check."""
    lines = log.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(f"CHECK {name} "):
            tail = []
            for more in lines[i + 1:]:
                if more.startswith("CHECK "):
                    break
                tail.append(more)
            return "\n".join(tail)
    return ""


def test_container_boots_and_runs_the_selftest(selftest):
    rc, log, console, results = selftest
    assert results, f"the selftest printed no checks (rc={rc}):\n{log}\n--- console ---\n{console[-6000:]}"
    assert rc == 0, f"the selftest exited {rc}:\n{log[-4000:]}\n--- console ---\n{console[-4000:]}"


@pytest.mark.parametrize("check", CHECKS)
def test_service(selftest, check):
    rc, log, console, results = selftest
    assert check in results, f"the selftest never reached '{check}' (rc={rc}):\n{log[-4000:]}"
    passed, detail = results[check]
    assert passed, f"{detail}\n{_context(log, check)}"
