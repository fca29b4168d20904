# SPDX-License-Identifier: MIT
"""The overhead and scale report (bench/run, docs/PERFORMANCE.md) still works: each section run
with `bench/run --smoke --only NAME` exits 0 and prints a markdown table. Only that the scripts
run: smoke sizes are far too small for the figures to mean anything, so nothing is asserted
about them. Needs root and a built tree (ninja -C build)."""
import os
import pathlib
import re
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("EP_BUILD_DIR", REPO / "build")).resolve()
SECTIONS = ["cost", "slowdown", "peers", "scale", "memory"]
HEADER = re.compile(r"^\|[^\n]*\|\s*\n\|\s*:?-{3,}", re.M)  # a header row, then its separator


def run_smoke(name, timeout=180):
    if os.geteuid() != 0:
        pytest.skip("needs root (BPF and perf events)")
    if not (BUILD / "cli" / "ebpf-profiler").exists():
        pytest.skip(f"no build in {BUILD} (ninja -C build)")
    return subprocess.run([str(REPO / "bench" / "run"), "--smoke", "--only", name,
                           "--build", str(BUILD)],
                          capture_output=True, text=True, errors="replace", timeout=timeout)


@pytest.mark.parametrize("name", SECTIONS)
def test_section_smoke(name):
    if not (REPO / "bench" / f"report-{name}.py").exists():
        pytest.skip(f"bench/report-{name}.py not written yet")
    r = run_smoke(name)
    out = f"--- stdout ---\n{r.stdout[-6000:]}\n--- stderr ---\n{r.stderr[-6000:]}"
    assert r.returncode == 0, out
    section = r.stdout.split("\n## 6. Goals", 1)[0]  # the section's own tables, not the goals'
    assert f"(`{name}`)" in section, out
    assert HEADER.search(section.split(f"(`{name}`)", 1)[1]), out


def test_goals_smoke():
    """Section 6 with its own measurements (bench/bpf-cost.py, bench-unwind-extract,
    bench/completeness.py on one workload), smoke-sized."""
    r = run_smoke("goals", timeout=300)
    out = f"--- stdout ---\n{r.stdout[-6000:]}\n--- stderr ---\n{r.stderr[-6000:]}"
    assert r.returncode == 0, out
    assert "| goal | measured | met? |" in r.stdout, out
