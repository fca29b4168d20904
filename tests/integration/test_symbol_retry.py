# SPDX-License-Identifier: MIT
"""A passing failure is not an answer (issue 27): a frame whose first lookup failed because the
loader did not answer is asked again by the collector, on its own timer, until it is named —
with no new sample of it.

The order is made, not waited for: the symbolizer is stopped (SIGSTOP) before the workload
starts, so every request about the workload's program waits in the request ring; the workload
is stopped once its samples are stored (no new trace of it after that); the loader is stopped
and only then the symbolizer continues, so its OpenFile calls for the program time out
(Symbolizer1.RetryAnswers, Collector1.RetryingSymbols say so). The loader continues and the
test waits (with a deadline) for the collector to have asked again and for the frames to be
named. Before the fix, those frames were answered NO_FILE and stayed unnamed for good."""

import os
import signal
import subprocess

import pytest

from conftest import NATIVE, WORKLOADS, running_profiler, samples_with_frames
from waiting import wait_until

WORKLOAD = "deepchain"


@pytest.fixture(scope="module")
def profiler():
    yield from running_profiler()


def workload_frames(profiler, pid):
    """(samples, [frames of the workload's own program]) of pid in the store."""
    with profiler.db() as con:
        rows = samples_with_frames(con, pid)
    own = [f for _, _, frames, _ in rows for f in frames
           if f["kind"] == NATIVE and f["path"] and f["path"].endswith("/" + WORKLOAD)]
    return sum(n for *_, n in rows), own


def test_a_frame_whose_lookup_timed_out_is_named_by_a_retry(profiler):
    symbolizer = profiler.daemon_pid("ebpf-profiler-symbolizer")
    loader = profiler.daemon_pid("ebpf-profiler-loader")
    assert symbolizer and loader
    retries_before = profiler.prop("Collector", "SymbolRetries")
    stopped = []
    w = None
    try:
        os.kill(symbolizer, signal.SIGSTOP)
        stopped.append(symbolizer)
        w = subprocess.Popen([str(WORKLOADS / WORKLOAD), "600"], stdout=subprocess.DEVNULL)

        def sampled():
            failed = profiler.flush_failure()
            if failed:
                return False, failed
            n, own = workload_frames(profiler, w.pid)
            return n >= 20 and len(own) > 0, f"{n} samples, {len(own)} frames in {WORKLOAD}"
        wait_until(sampled, f"samples of {WORKLOAD} with frames of its program in the store", 120, interval=0.5)
        # Not sampled any more from here on (samples taken before may still come: the loader
        # holds those that wait for the program's unwind table, which the symbolizer makes).
        w.send_signal(signal.SIGSTOP)
        profiler.flush()
        _, own = workload_frames(profiler, w.pid)
        assert all(f["function"] is None for f in own), "named while the symbolizer was stopped"

        os.kill(loader, signal.SIGSTOP)
        stopped.append(loader)
        os.kill(symbolizer, signal.SIGCONT)
        stopped.remove(symbolizer)
        wait_until(lambda: (profiler.prop("Collector", "RetryingSymbols") > 0,
                            f"RetryingSymbols {profiler.prop('Collector', 'RetryingSymbols')}, "
                            f"Symbolizer1.RetryAnswers {profiler.prop('Symbolizer', 'RetryAnswers')}"),
                   "the symbolizer to answer RETRY for what the stopped loader did not open", 120)
        os.kill(loader, signal.SIGCONT)
        stopped.remove(loader)

        profiler.settle([w.pid])
        _, own = workload_frames(profiler, w.pid)
        unnamed = [hex(f["addr"]) for f in own if f["function"] is None]
        assert own and not unnamed, f"frames of {WORKLOAD} still unnamed after the retry: {unnamed}"
        assert profiler.prop("Collector", "SymbolRetries") > retries_before
    finally:
        for pid in stopped:
            os.kill(pid, signal.SIGCONT)
        if w:
            w.kill()
            w.wait()
