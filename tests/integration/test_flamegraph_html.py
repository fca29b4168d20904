# SPDX-License-Identifier: MIT
"""The interactive HTML flame graph in a real browser: headless Chromium loads the page the CLI
wrote (file://, no network), applies a #search= from the address through the search box's code,
and we read the rendered DOM back. One store is built here (deterministic, hostile names, two
windows for a diff); one comes from a profiler sampling the fpchain workload (needs root)."""
import json
import re
import shutil
import sqlite3
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import cli, run_workload

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
HOSTILE = "</script><script>document.title='pwned'</script> \"q\" 'x' \u2028 <!--"
NATIVE, KERNEL = 1, 2

SCHEMA = """
CREATE TABLE files(id INTEGER PRIMARY KEY, file_id BLOB NOT NULL UNIQUE, path TEXT,
                   gnu_build_id BLOB, go_build_id TEXT);
CREATE TABLE frames(id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, file INTEGER NOT NULL,
                    addr INTEGER NOT NULL, elf_addr INTEGER, module TEXT, status INTEGER,
                    UNIQUE(kind, file, addr));
CREATE TABLE frame_lines(frame INTEGER NOT NULL, depth INTEGER NOT NULL, function TEXT,
                         source_file TEXT, line INTEGER, PRIMARY KEY(frame, depth)) WITHOUT ROWID;
CREATE TABLE stacks(id INTEGER PRIMARY KEY, hash BLOB NOT NULL UNIQUE, frames BLOB NOT NULL);
CREATE TABLE processes(id INTEGER PRIMARY KEY, pid INTEGER NOT NULL, start_time_ns INTEGER,
                       comm TEXT, exe TEXT, container_id TEXT, UNIQUE(pid, start_time_ns));
CREATE TABLE intervals(id INTEGER PRIMARY KEY, start_ns INTEGER NOT NULL, end_ns INTEGER NOT NULL,
                       period_ns INTEGER NOT NULL);
CREATE INDEX intervals_by_start ON intervals(start_ns);
CREATE TABLE samples(interval INTEGER NOT NULL, process INTEGER NOT NULL, tid INTEGER NOT NULL,
                     thread_name TEXT, stack INTEGER NOT NULL, count INTEGER NOT NULL,
                     PRIMARY KEY(interval, process, tid, stack)) WITHOUT ROWID;
"""

# Functions of the built store, frame id → (name, kind); stacks are leaf first.
FUNCS = {1: ("main", NATIVE), 2: ("gamma_spin", NATIVE), 3: ("parse_input", NATIVE),
         4: (HOSTILE, NATIVE), 5: ("do_syscall_64", KERNEL), 6: ("old_path", NATIVE)}
STACKS = {1: [2, 1], 2: [3, 1], 3: [4, 1], 4: [5, 3, 1], 5: [6, 1]}
# Baseline window (interval 1, 10 s): gamma_spin 20, parse_input 60, old_path 20.
# Target window (interval 2, 10 s): gamma_spin 70, parse_input 10, hostile 15, kernel 5.
SAMPLES = {1: {1: 20, 2: 60, 5: 20}, 2: {1: 70, 2: 10, 3: 15, 4: 5}}


def build_store(path, t0):
    con = sqlite3.connect(path)
    con.executescript("PRAGMA journal_mode=WAL; PRAGMA user_version=1;" + SCHEMA)
    con.execute("INSERT INTO files VALUES(1, x'01', '/usr/bin/app', NULL, NULL)")
    for fid, (name, kind) in FUNCS.items():
        addr = 0x1000 * fid if kind == NATIVE else -0x7f000000 + fid
        con.execute("INSERT INTO frames VALUES(?, ?, ?, ?, ?, ?, 0)",
                    (fid, kind, 1 if kind == NATIVE else 0, addr, addr, None if kind == NATIVE else ""))
        con.execute("INSERT INTO frame_lines VALUES(?, 0, ?, 'app.c', ?)", (fid, name, 10 * fid))
    for sid, frames in STACKS.items():
        con.execute("INSERT INTO stacks VALUES(?, ?, ?)",
                    (sid, struct.pack("<I", sid), b"".join(struct.pack("<q", f) for f in frames)))
    con.execute("INSERT INTO processes VALUES(1, 4242, 1, 'app', '/usr/bin/app', '')")
    s = 1_000_000_000
    for iid in SAMPLES:
        start = t0 + (iid - 1) * 100 * s
        con.execute("INSERT INTO intervals VALUES(?, ?, ?, 10000000)", (iid, start, start + 10 * s))
        for sid, count in SAMPLES[iid].items():
            con.execute("INSERT INTO samples VALUES(?, 1, 4242, 'app', ?, ?)", (iid, sid, count))
    con.commit()
    con.close()


def chromium(url, *extra):
    """Headless Chromium on url with a throwaway profile; returns stdout."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"{CHROMIUM} is not installed (scripts/setup.sh --test-deps installs it)")
    profile = tempfile.mkdtemp(prefix="ep-flame-chromium-")
    try:
        p = subprocess.run(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--virtual-time-budget=5000",
             "--window-size=1280,900", *extra, url],
            capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)
    assert p.returncode == 0, f"chromium failed ({p.returncode}):\n{p.stderr[-3000:]}"
    return p.stdout


def dump_dom(html, search=None):
    url = html.as_uri() + (f"#search={search}" if search is not None else "")
    dom = chromium(url, "--dump-dom")
    assert "</html>" in dom, dom[-500:]
    return dom


FRAME_RE = re.compile(r'<div class="f( anc)?( match)?" data-id="(\d+)" data-kind="(\w+)"[^>]*>([^<]*)</div>')


def frames_of(dom):
    """[(id, kind, matched, label)] of the rendered frame elements."""
    return [(int(m[3]), m[4], bool(m[2]), m[5]) for m in FRAME_RE.finditer(dom)]


def matched_text(dom):
    m = re.search(r'<span id="matched">([^<]*)</span>', dom)
    assert m, "no matched-share element"
    return m[1]


def embedded_json(html_text):
    m = re.search(r'<script id="ep-data" type="application/json">(.*?)</script>', html_text, re.S)
    assert m, "no embedded data"
    return json.loads(m[1])


def node_totals(data):
    """{function name: samples} summed over the nodes that show it (once per path)."""
    out = {}
    nodes, stride = data["nodes"], data["stride"]
    for i in range(0, len(nodes), stride):
        fr = data["frames"][nodes[i]]
        name = data["strings"][fr[0]]
        out[name] = out.get(name, 0) + nodes[i + 2]
    return out


@pytest.fixture(scope="module")
def store():
    d = Path(tempfile.mkdtemp(prefix="ep-flame-store-"))
    t0 = (int(time.time()) - 3600) * 1_000_000_000
    build_store(d / "profiles.db", t0)
    yield d / "profiles.db", t0 // 1_000_000_000
    shutil.rmtree(d, ignore_errors=True)


def test_page_embeds_the_tree_and_search_highlights(store, tmp_path):
    db, t0 = store
    out = tmp_path / "cpu.html"
    cli("flamegraph", "--store", db, "-o", out)  # .html: the interactive page
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>")
    assert text.count("</script>") == 2, "a function name broke out of the data script"
    assert "http://" not in text and "https://" not in text
    data = embedded_json(text)
    totals = node_totals(data)
    assert data["total"] == 200
    assert totals["gamma_spin"] == 90 and totals["parse_input"] == 75 and totals[HOSTILE] == 15
    assert totals["do_syscall_64 [k]"] == 5 and totals["app (4242)"] == 200

    dom = dump_dom(out, "gamma_spin")
    frames = frames_of(dom)
    assert len(frames) >= 7, dom[:3000]
    # The hostile name did not run (it would set the title) and shows as text.
    assert "<title>CPU flame graph" in dom and "<title>pwned" not in dom
    assert "&lt;/script&gt;&lt;script&gt;document.title='pwned'" in dom
    assert "200 samples" in dom  # header: sample count and window
    hits = [f for f in frames if f[2]]
    assert hits and all("gamma_spin" in data["strings"][data["frames"][data["nodes"][f[0] * 4]][0]]
                        for f in hits), hits
    assert any(label == "gamma_spin" for _, _, _, label in hits)
    assert matched_text(dom).startswith("Matched: 45.00% of samples (90 of 200)"), matched_text(dom)
    assert {"native", "kernel", "process"} <= {k for _, k, _, _ in frames}

    # A regular expression, and a search that finds nothing.
    dom = dump_dom(out, "^(parse|do_sys)")
    assert matched_text(dom).startswith("Matched: 37.50%"), matched_text(dom)  # 75 of 200: one stack once
    dom = dump_dom(out, "no_such_function_xyz")
    assert frames_of(dom) and not any(f[2] for f in frames_of(dom))
    assert matched_text(dom) == "No match"
    # The hostile name is a frame's text, not markup.
    dom = dump_dom(out, "pwned")
    assert [f for f in frames_of(dom) if f[2]], "the hostile function should be found as text"


def test_icicle_and_svg(store, tmp_path):
    db, _ = store
    out = tmp_path / "ice.html"
    cli("flamegraph", "--store", db, "--icicle", "-o", out)
    dom = dump_dom(out)
    root = next(m for m in re.finditer(r'<div class="f" data-id="0"[^>]*style="([^"]*)"', dom))
    assert "top: 0px" in root[1], root[1]  # root at the top
    flame = tmp_path / "flame.html"
    cli("flamegraph", "--store", db, "-o", flame)
    root = next(m for m in re.finditer(r'<div class="f" data-id="0"[^>]*style="([^"]*)"', dump_dom(flame)))
    assert "top: 0px" not in root[1], root[1]

    svg = tmp_path / "g.svg"
    cli("flamegraph", "--store", db, "--icicle", "-o", svg)
    assert svg.read_text().startswith("<?xml")
    stdout = cli("flamegraph", "--store", db, "--format", "svg", "-o", "-").stdout
    assert stdout.startswith("<?xml") and "gamma_spin" in stdout


def test_diff_page(store, tmp_path):
    db, t0 = store
    out = tmp_path / "diff.html"
    # Baseline: the first interval; target: the second.
    cli("flamegraph", "--store", db, "--diff-since", t0, "--diff-until", t0 + 50,
        "--since", t0 + 50, "-o", out)
    data = embedded_json(out.read_text())
    assert data["diff"]["baselineTotal"] == 100 and data["diff"]["targetTotal"] == 100
    assert [r[0] for r in data["diff"]["removed"]] == ["old_path"]
    nodes, stride = data["nodes"], data["stride"]
    by_name = {data["strings"][data["frames"][nodes[i]][0]]: nodes[i:i + stride]
               for i in range(0, len(nodes), stride)}
    grew, shrank = by_name["gamma_spin"], by_name["parse_input"]
    assert grew[2:6] == [70, 70, 20, 20] and shrank[2:6] == [15, 10, 60, 60]
    red = lambda c: (c >> 16) - (c & 0xff)  # noqa: E731
    assert red(grew[6]) > 100 and red(shrank[6]) < -100  # red grew, blue shrank

    dom = dump_dom(out, "gamma")
    assert "baseline 20.00%" in matched_text(dom)
    assert re.search(r'<tr class="removed"><td>old_path</td>', dom), "removed function not listed"
    assert len(frames_of(dom)) >= 5


def test_screenshot_is_not_blank(store, tmp_path):
    db, _ = store
    out = tmp_path / "shot.html"
    cli("flamegraph", "--store", db, "-o", out)
    png = tmp_path / "shot.png"
    chromium(out.as_uri() + "#search=gamma", f"--screenshot={png}")
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    # A blank page compresses to a few kB; frames, text and colours do not.
    assert len(data) > 15000, len(data)


@pytest.fixture(scope="module")
def profiler_store():
    from conftest import running_profiler
    yield from running_profiler()


def test_profiled_workload_in_browser(profiler_store, tmp_path):
    w = run_workload("fpchain", 3)
    w.wait(timeout=40)
    assert w.returncode == 0
    profiler_store.settle()
    out = tmp_path / "fp.html"
    cli("flamegraph", "--store", profiler_store.store, "--pid", w.pid, "-o", out)
    data = embedded_json(out.read_text())
    assert node_totals(data).get("gamma_spin", 0) >= 0.9 * data["total"], node_totals(data)
    dom = dump_dom(out, "gamma_spin")
    hits = [f for f in frames_of(dom) if f[2]]
    assert any(label == "gamma_spin" for *_, label in hits), hits
    share = float(re.match(r"Matched: ([\d.]+)%", matched_text(dom))[1])
    assert share > 90, matched_text(dom)
