# SPDX-License-Identifier: MIT
"""End to end: the four daemons under `ebpf-profiler run`, real BPF sampling of known
workloads, the store, the CLI views, OTLP export to a loopback receiver, and recovery."""
import os
import re
import signal
import subprocess

import pytest

from conftest import (KERNEL, NATIVE, assert_same_stacks_as_the_store, cli, need_root, otlp_endpoint,
                      profile_until, run_workload, running_profiler, stacks_for_pid)
from otlp_receiver import flatten_request
from waiting import wait_until

MIN_SAMPLES = 200  # for the shares below to mean something; a busy machine takes longer
CHAIN = ["gamma_spin", "beta", "alpha", "main"]


@pytest.fixture(scope="module")
def profiler(receiver):
    yield from running_profiler("--otlp-endpoint", otlp_endpoint(receiver))


def contains_in_order(names, chain):
    """True if chain appears as a contiguous run in names (leaf first)."""
    n = len(chain)
    return any(names[i:i + n] == chain for i in range(len(names) - n + 1))


def test_fp_chain_named_in_store_top_and_flamegraph(profiler, tmp_path):
    pid = profile_until(profiler, "fpchain", MIN_SAMPLES)
    with profiler.db() as con:
        stacks = stacks_for_pid(con, pid)
    total = sum(c for _, c in stacks)
    assert total >= MIN_SAMPLES, f"{total} samples after the store had {MIN_SAMPLES}"
    def in_chain(frames):
        return contains_in_order([fn for _, fn in frames if fn], CHAIN)
    chain_samples = sum(c for frames, c in stacks if in_chain(frames))
    others = sorted(((c, frames) for frames, c in stacks if not in_chain(frames)), key=lambda x: -x[0])
    assert chain_samples >= 0.99 * total, f"{chain_samples}/{total} samples carry {CHAIN}; the others: {others[:8]}"

    top = cli("top", "--store", profiler.store, "--pid", pid).stdout
    rows = [l for l in top.splitlines() if "gamma_spin" in l]
    assert rows, top
    for fn in CHAIN:
        assert re.search(rf"\b{fn}\b", top), f"{fn} missing from top:\n{top}"
    # gamma_spin is the hottest self function of this process.
    first_fn_line = next(l for l in top.splitlines() if re.search(r"\d+(\.\d+)?%", l))
    assert "gamma_spin" in first_fn_line, top

    svg = tmp_path / "fg.svg"
    cli("flamegraph", "--store", profiler.store, "--pid", pid, "-o", svg)
    text = svg.read_text()
    assert text.startswith("<?xml") or text.startswith("<svg"), text[:100]
    for fn in CHAIN:
        assert fn in text


def test_syscall_workload_has_named_kernel_frames_under_user_frames(profiler):
    pid = profile_until(profiler, "syscalls", MIN_SAMPLES)
    with profiler.db() as con:
        stacks = stacks_for_pid(con, pid)
    total = sum(c for _, c in stacks)
    assert total > 0
    mixed = 0
    for frames, count in stacks:
        kinds = [k for k, _ in frames]
        if KERNEL not in kinds or NATIVE not in kinds:
            continue
        # Kernel frames come first (leaf side), then user frames down to main.
        last_kernel = max(i for i, k in enumerate(kinds) if k == KERNEL)
        first_user = min(i for i, k in enumerate(kinds) if k == NATIVE)
        assert last_kernel < first_user, frames
        knames = [fn for k, fn in frames if k == KERNEL]
        unames = [fn for k, fn in frames if k == NATIVE]
        # The caller of glibc's frameless read() wrapper is recovered from its unwind table.
        if all(knames) and "ksys_read" in knames and contains_in_order(unames, ["read", "read_zeroes", "main"]):
            mixed += count
    assert mixed >= 0.9 * total, f"only {mixed}/{total} samples show named kernel read frames under read → read_zeroes → main"


def test_otlp_receiver_gets_the_same_stacks_as_the_store(profiler, receiver):
    pid = profile_until(profiler, "fpchain", MIN_SAMPLES)
    def delivered():
        exported = {}
        for req in list(receiver.requests):
            for (rpid, names), count in flatten_request(req).items():
                if rpid == pid:
                    exported[names] = exported.get(names, 0) + count
        stored = {}
        with profiler.db() as con:
            for frames, c in stacks_for_pid(con, pid):
                key = tuple(fn or "" for _, fn in frames)
                stored[key] = stored.get(key, 0) + c
        done = bool(sum(exported.values())) and sum(exported.values()) == sum(stored.values())
        return done, (exported, stored)
    exported, stored = wait_until(delivered, f"the receiver's samples of pid {pid} equal to the store's", 30,
                                  interval=0.5, diagnosis=lambda: f"RequestsSent {profiler.prop('Exporter', 'RequestsSent')}")
    assert exported, "the receiver got no samples for the workload"
    assert sum(exported.values()) == sum(stored.values())
    chain = tuple(CHAIN)
    assert any(contains_in_order(list(k), list(chain)) for k in exported), list(exported)[:3]
    assert_same_stacks_as_the_store(profiler, exported, stored)


def test_status_and_busctl_show_every_daemon(profiler):
    out = cli("status", env=profiler.env).stdout
    for name in ("Loader1", "Symbolizer1", "Collector1", "Exporter1"):
        assert f"org.ebpfprofiler.{name}" in out, out
    assert profiler.prop("Loader", "Samples") > 0
    assert profiler.prop("Collector", "Intervals") > 0
    intro = profiler.busctl("introspect", "org.ebpfprofiler.Loader1", "/org/ebpfprofiler/Loader1")
    assert "OpenTraceRing" in intro and "UnwindStops" in intro


def test_collector_killed_comes_back_and_intervals_continue(profiler):
    old = profiler.daemon_pid("ebpf-profiler-collector")
    assert old, profiler.output()
    before = profiler.prop("Loader", "Samples")
    os.kill(old, signal.SIGKILL)
    w = run_workload("fpchain", 180)  # stopped once its samples are stored
    try:
        profiler.wait_collector_restarted(old)
        # The loader kept running through it.
        assert profiler.prop("Loader", "Samples") > before
        # The new collector stores samples (fails naming the count it saw if it never does).
        profiler.wait_samples(w.pid, 20)
    finally:
        w.kill()
        w.wait()


def test_bad_options_give_one_clear_error():
    for args, word in ((["run", "--frequency", "0"], "frequency"),
                       (["run", "--no-such-option"], "no-such-option"),
                       (["top", "--since", "yesterday-ish"], "since")):
        p = cli(*args, check=False)
        assert p.returncode != 0
        assert word in p.stderr, p.stderr
        assert len(p.stderr.strip().splitlines()) <= 3, p.stderr


def test_unprivileged_start_fails_with_the_cause():
    need_root()
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]
    from conftest import BUILD
    p = subprocess.run([*nobody, str(BUILD / "unwinder-loader" / "ebpf-profiler-loader")],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert re.search(r"root|CAP_BPF|CAP_PERFMON", p.stderr), p.stderr
    p = subprocess.run([*nobody, str(BUILD / "cli" / "ebpf-profiler"), "run"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert "root" in p.stderr, p.stderr
