# SPDX-License-Identifier: MIT
"""End to end: `ebpf-profiler export` of a real profile read back by the tools users have:
Go's pprof (Debian's golang-go), the collapsed-stack text, and protoc for OTLP."""
import os
import pty
import re
import shutil
import subprocess

import pytest

from conftest import CLI, cli, decode_otlp, profile_until, stacks_for_pid
from otlp_receiver import conformance_check, decode_body

MIN_SAMPLES = 200  # for the comparisons to mean something; a busy machine takes longer
CHAIN = ["gamma_spin", "beta", "alpha", "main"]  # leaf first
GO = shutil.which("go") or "/usr/bin/go"


@pytest.fixture(scope="module")
def fpchain(profiler):
    """Profiles fpchain until the store holds MIN_SAMPLES of it; returns its pid."""
    return profile_until(profiler, "fpchain", MIN_SAMPLES)


def store_stacks(profiler, pid):
    with profiler.db() as con:
        return stacks_for_pid(con, pid)


def pprof(tmp_path, *args):
    # -symbolize=none: the profile is symbolized already; pprof must not look for binaries.
    p = subprocess.run([GO, "tool", "pprof", "-symbolize=none", "-sample_index=samples", *map(str, args)],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PPROF_TMPDIR=str(tmp_path), HOME=str(tmp_path)))
    assert p.returncode == 0, f"go tool pprof {args}: {p.stderr}"
    return p.stdout


def top_table(text):
    """{function: (self, total)} and the sample count from `ebpf-profiler top`."""
    total = int(re.match(r"(\d+) samples", text).group(1))
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\s*[\d.]+% +[\d.]+% +(\d+) +(\d+)  \S+ +(.+)$", line)
        if m:
            rows[m.group(3).removesuffix(" [k]")] = (int(m.group(1)), int(m.group(2)))
    return rows, total


def pprof_top_table(text):
    """{function: (flat, cum)} and the total from `go tool pprof -top`."""
    total = int(re.search(r"Showing nodes accounting for \d+, [\d.]+% of (\d+) total", text).group(1))
    rows = {}
    for line in text.splitlines():
        m = re.match(r"\s*(\d+)\s+[\d.]+%\s+[\d.]+%\s+(\d+)\s+[\d.]+%\s+(.+)$", line)
        if m:
            # pprof shows a function's inlined occurrences as "NAME (inline)", on a row of their
            # own (ld.so's dl_init_cacheinfo, when a sample lands in the start-up): top has one
            # row per function. (A sample with both occurrences would count twice; none here.)
            fn = m.group(3).strip().removesuffix(" (inline)")
            flat, cum = rows.get(fn, (0, 0))
            rows[fn] = (flat + int(m.group(1)), cum + int(m.group(2)))
    return rows, total


def test_pprof_matches_top(profiler, fpchain, tmp_path):
    out = tmp_path / "fpchain.pb.gz"  # the format from the extension
    p = cli("export", "--store", profiler.store, "--pid", fpchain, "-o", out)
    assert "\r" not in p.stderr, "progress must stay off when stderr is not a terminal"
    assert out.read_bytes()[:2] == b"\x1f\x8b"

    top, top_total = top_table(cli("top", "--store", profiler.store, "--pid", fpchain, "--limit", "0").stdout)
    ours, pp_total = pprof_top_table(pprof(tmp_path, "-top", "-nodecount=20", out))
    assert pp_total == top_total == sum(c for _, c in store_stacks(profiler, fpchain))
    assert top_total >= MIN_SAMPLES, f"top shows {top_total} samples; the store had {MIN_SAMPLES}"

    # The same hottest functions with the same figures: pprof's flat is top's SELF, cum TOTAL.
    hottest = sorted(top.items(), key=lambda kv: -kv[1][0])[:5]
    assert hottest[0][0] == "gamma_spin", top
    assert max(ours.items(), key=lambda kv: kv[1][0])[0] == "gamma_spin", ours
    for fn, (self, total) in hottest:
        if self == 0:
            continue
        # A native frame with no name is exported without lines, for pprof to symbolize from
        # the file (cli/pprof.c): pprof then shows its mapping, "[FILE]", where top shows
        # "[unknown] FILE".
        fn = re.sub(r"^\[unknown\] (.+)$", r"[\1]", fn)
        assert fn in ours, f"{fn} missing from pprof -top: {ours}"
        assert ours[fn] == (self, total), f"{fn}: pprof {ours[fn]}, top {(self, total)}"
    # The callers have no self samples: sorted by cum they are among the first 20.
    by_cum, _ = pprof_top_table(pprof(tmp_path, "-top", "-cum", "-nodecount=20", out))
    for fn in CHAIN:
        assert by_cum[fn][1] == top[fn][1], f"{fn}: pprof cum {by_cum[fn][1]}, top TOTAL {top[fn][1]}"


def test_pprof_traces_show_the_chain(profiler, fpchain, tmp_path):
    out = tmp_path / "p.pprof"
    cli("export", "--store", profiler.store, "--pid", fpchain, "-o", out, "-q")
    traces = pprof(tmp_path, "-traces", out)
    # Each trace lists its frames leaf first, one per line; labels first.
    blocks = traces.split("-----------+-------------------------------------------------------")
    chains = 0
    for b in blocks:
        names = [l.split()[-1] for l in b.splitlines()
                 if l.strip() and not re.match(r"\s*\w+:\s", l)]  # frames, not "pid:  123"
        if names[:4] == CHAIN:
            chains += 1
    assert chains > 0, traces[:3000]
    # The labels: pprof prints each trace's pid, tid, comm and thread above its frames.
    assert re.search(rf"^\s*pid:\s+{fpchain}$", traces, re.M), traces[:1000]
    assert re.search(r"^\s*comm:\s+fpchain$", traces, re.M), traces[:1000]


def test_folded_counts_equal_the_store(profiler, fpchain, tmp_path):
    out = tmp_path / "f.folded"
    cli("export", "--store", profiler.store, "--pid", fpchain, "-o", out)
    lines = out.read_text().splitlines()
    assert lines
    pat = re.compile(rf"^[^;]+ \({fpchain}\);(?:.*;)?main;alpha;beta;gamma_spin (\d+)$")
    folded_chain = sum(int(m.group(1)) for m in map(pat.match, lines) if m)
    assert folded_chain > 0, "\n".join(lines[:20])

    stacks = store_stacks(profiler, fpchain)
    store_chain = sum(c for frames, c in stacks if [fn for _, fn in frames[:4]] == CHAIN)
    assert folded_chain == store_chain
    # Every sample is on some line, once.
    assert sum(int(l.rsplit(" ", 1)[1]) for l in lines) == sum(c for _, c in stacks)
    # Stdout works as well, and --no-process drops the "comm (pid)" frame.
    p = cli("export", "--store", profiler.store, "--pid", fpchain, "--format", "folded", "--no-process")
    assert any(re.search(r"(^|;)main;alpha;beta;gamma_spin \d+$", l) for l in p.stdout.splitlines())
    assert not any(l.startswith("fpchain (") for l in p.stdout.splitlines())


def test_otlp_decodes_with_protoc(profiler, fpchain, tmp_path):
    out = tmp_path / "p.otlp"
    cli("export", "--store", profiler.store, "--pid", fpchain, "-o", out)
    # One process and the whole store, as a backend would get them: every conformance rule.
    whole = tmp_path / "all.otlp"
    cli("export", "--store", profiler.store, "-o", whole)
    for f in (out, whole):
        assert conformance_check(decode_body(f.read_bytes()), f"export -o {f.name}") == []
    text = decode_otlp(out)
    assert re.search(rf"int_value: {fpchain}\b", text)
    values = sum(int(v) for v in re.findall(r"^\s*values: (\d+)$", text, re.M))
    assert values == sum(c for _, c in store_stacks(profiler, fpchain))
    assert "gamma_spin" in text


def test_binary_formats_refuse_a_terminal(profiler, fpchain):
    master, slave = pty.openpty()
    try:
        p = subprocess.run([str(CLI), "export", "--store", str(profiler.store), "--format", "pprof"],
                           stdout=slave, stderr=subprocess.PIPE, text=True, timeout=30)
    finally:
        os.close(slave)
        os.close(master)
    assert p.returncode == 1
    assert "terminal" in p.stderr
