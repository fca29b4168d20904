# SPDX-License-Identifier: MIT
"""End to end: the exporter's OTLP transports and delivery against loopback receivers.

OTLP/HTTP and OTLP/gRPC (h2c, TLS, mTLS) carry the same stacks and counts as the local store;
protoc parses the bytes the receiver got; resource attributes and OTEL_* configuration arrive;
gzip is on the wire; transient failures are retried (Retry-After / RetryInfo honoured),
permanent ones and partial successes are not; an outage fills the disk spool, which is
delivered in order afterwards, also after the exporter was killed; the spool bound holds.

Receivers are in otlp_receiver.py; their `.script` injects the answers. One profiler per
configuration, shared by the tests that need it; intervals of 1 s."""
import gzip
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import (CLI, REPO, Profiler, assert_delivered_once, assert_same_stacks_as_the_store, need_root,
                      profile_until, run_workload, stacks_for_pid)
from otlp_receiver import GrpcReceiver, OtlpReceiver, Reply, make_test_certs
from waiting import wait_until

CHAIN = ("gamma_spin", "beta", "alpha", "main")
SERVICE_TYPE = "opentelemetry.proto.collector.profiles.v1development.ExportProfilesServiceRequest"
BASE_ENV = {
    "OTEL_RESOURCE_ATTRIBUTES": "deployment.environment=test,ep.test.key=v%2C1",
    "OTEL_SERVICE_NAME": "ep-e2e-service",
    "OTEL_EXPORTER_OTLP_HEADERS": "x-ep-test=hello,x-ep-other=two%20words",
    "OTEL_EXPORTER_OTLP_COMPRESSION": "gzip",
}
# Variables of the test process that must not leak into a profiler meant to be configured
# otherwise.
OTEL_VARS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL",
             "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL", "OTEL_EXPORTER_OTLP_CERTIFICATE",
             "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", "OTEL_EXPORTER_OTLP_CLIENT_KEY", "OTEL_EXPORTER_OTLP_HEADERS",
             "OTEL_EXPORTER_OTLP_COMPRESSION", "OTEL_EXPORTER_OTLP_INSECURE", "OTEL_EXPORTER_OTLP_TIMEOUT",
             "OTEL_RESOURCE_ATTRIBUTES", "OTEL_SERVICE_NAME")


# ---- helpers ----

_run_help = None


def run_help():
    global _run_help
    if _run_help is None:
        p = subprocess.run([str(CLI), "run", "--help"], capture_output=True, text=True, timeout=30)
        _run_help = p.stdout + p.stderr
    return _run_help


DAEMONS = {"ebpf-profiler-loader": "unwinder-loader", "ebpf-profiler-symbolizer": "symbolizer",
           "ebpf-profiler-collector": "collector", "ebpf-profiler-exporter": "exporter"}


def daemon_wrappers(dir, exporter_args):
    """$EBPF_PROFILER_LIBEXECDIR with the build tree's daemons, the exporter started with
    exporter_args added: for exporter options `run` does not pass on."""
    from conftest import BUILD
    dir.mkdir(mode=0o755)
    for binary, sub in DAEMONS.items():
        extra = " ".join(f"'{a}'" for a in exporter_args) if sub == "exporter" else ""
        w = dir / binary
        w.write_text(f"#!/bin/sh\nexec '{BUILD / sub / binary}' \"$@\" {extra}\n")
        w.chmod(0o755)


class ExportProfiler(Profiler):
    """A Profiler whose environment has exactly the OTEL_* variables given. `run` keeps the
    exporter's spool next to the store (store/spool). A spool bound goes through `run`'s option
    when it has one, else through a wrapper that adds the exporter's own --spool-max-size."""

    def __init__(self, args=(), env=None, spool_max=None, exporter_args=()):
        self.spool_parent = Path(tempfile.mkdtemp(prefix="ep-wrap-"))
        self.spool_parent.chmod(0o755)
        self.wrapped = False
        extra = ["--interval", "1s", *args]
        exporter_args = list(exporter_args)
        if spool_max is not None:
            opt = next((n for n in ("--otlp-spool-max-size", "--spool-max-size") if n in run_help()), None)
            if opt:
                extra += [opt, str(spool_max)]
            else:
                exporter_args += ["--spool-max-size", str(spool_max)]
        env = dict(env or {})
        if exporter_args:
            self.wrapped = True
            daemon_wrappers(self.spool_parent / "libexec", exporter_args)
            env["EBPF_PROFILER_LIBEXECDIR"] = str(self.spool_parent / "libexec")
        saved = dict(os.environ)
        try:
            for k in OTEL_VARS:
                os.environ.pop(k, None)
            os.environ.update(env)
            super().__init__(extra)
        except BaseException:
            if getattr(self, "proc", None):  # started but never ready: stop it, keep nothing
                super().stop()
            shutil.rmtree(self.spool_parent, ignore_errors=True)
            raise
        finally:
            os.environ.clear()
            os.environ.update(saved)
        self.spool_dir = self.store.parent / "spool"

    def stop(self):
        super().stop()
        shutil.rmtree(self.spool_parent, ignore_errors=True)

    def exp(self, name):
        v = self.prop("Exporter", name)
        if isinstance(v, str) and v.startswith('"'):
            try:
                v = json.loads(v)
            except ValueError:
                v = v[1:-1]
        return v

    def exporter_flush(self):
        """Exporter1.Flush(): drains the ring and tries the spool's head now."""
        self.busctl("call", "org.ebpfprofiler.Exporter1", "/org/ebpfprofiler/Exporter1",
                    "org.ebpfprofiler.Exporter1", "Flush", timeout=60)

    def wait_exporter(self, predicate, timeout=15, what="condition"):
        def check():
            try:
                return predicate()
            except AssertionError as e:
                return False, f"the exporter did not answer (restarting?): {str(e).strip()[:200]}"
        wait_until(check, f"exporter: {what}", timeout,
                   diagnosis=lambda: f"{self.exporter_state()}\n{self.output()[-3000:]}")

    def exporter_state(self):
        out = {}
        for n in ("Endpoint", "Protocol", "RequestsSent", "RequestsFailed", "RequestsRetried", "BytesSent",
                  "PartialSuccessRejected", "SpoolBytes", "SpoolFiles", "SpoolDropped", "LastError",
                  "BackoffUntilNs", "Intervals"):
            try:
                out[n] = self.exp(n)
            except AssertionError as e:
                out[n] = f"<{str(e).strip()}>"
        return out


def export_profiler(*args, **kw):
    need_root()
    p = ExportProfiler(args, **kw)
    try:
        yield p
    finally:
        p.stop()


def profile_fpchain(p, seconds=2):
    w = run_workload("fpchain", seconds)
    w.wait(timeout=seconds + 30)
    assert w.returncode == 0
    p.flush()
    return w.pid


def stored(p, pid):
    with p.db() as con:
        out = {}
        for frames, c in stacks_for_pid(con, pid):
            key = tuple(fn or "" for _, fn in frames)
            out[key] = out.get(key, 0) + c
    return out


def wait_delivered(p, rx, pid, timeout=20):
    """Waits until the receiver's samples of pid equal the store's (both non-empty); returns
    (exported, stored), the store's with every name it will get. A name that came after its
    interval was written reaches the store with a later flush, while an export sent later
    (retried) may carry it already."""
    def same():
        exported, local = rx.flattened(pid), stored(p, pid)
        return (bool(sum(local.values())) and sum(exported.values()) == sum(local.values()),
                f"receiver {sum(exported.values())} samples, store {sum(local.values())}")
    wait_until(same, f"pid {pid}: the receiver's samples equal to the store's", timeout, interval=0.3,
               diagnosis=lambda: f"attempts {[a['answer'] for a in rx.attempts][-20:]}; "
                                 f"{p.exporter_state()}\n{p.output()[-3000:]}")
    p.settle()
    return rx.flattened(pid), stored(p, pid)


def contains_chain(names):
    n = len(CHAIN)
    return any(tuple(names[i:i + n]) == CHAIN for i in range(len(names) - n + 1))


def resource_attrs(rp):
    out = {}
    for kv in rp.resource.attributes:
        v = kv.value
        kind = v.WhichOneof("value")
        out[kv.key] = getattr(v, kind) if kind else None
    return out


def request_window(req):
    """(start, end) ns over the request's profiles."""
    starts, ends = [], []
    for rp in req.resource_profiles:
        for sp in rp.scope_profiles:
            for prof in sp.profiles:
                starts.append(prof.time_unix_nano)
                ends.append(prof.time_unix_nano + prof.duration_nano)
    return (min(starts), max(ends)) if starts else (0, 0)


def assert_in_order(reqs):
    """Requests come in the order of their intervals: each profile's window ends where its
    interval was cut, so the ends never go back. (Its start is widened to the earliest sample,
    which may be one that reached the collector after the previous interval was cut.)"""
    windows = [request_window(r) for r in reqs if r.resource_profiles]
    for a, b in zip(windows, windows[1:]):
        assert a[1] <= b[1], f"requests out of order: windows {windows}"


def protoc_decode(message):
    p = subprocess.run(["protoc", f"--decode={SERVICE_TYPE}", "-I", str(REPO / "proto"),
                        "opentelemetry/proto/collector/profiles/v1development/profiles_service.proto"],
                       input=message, capture_output=True, timeout=30)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


class Counters:
    """Exporter counters now, to compare with later."""

    NAMES = ("RequestsSent", "RequestsFailed", "RequestsRetried", "PartialSuccessRejected", "SpoolDropped")

    def __init__(self, p):
        self.p = p
        self.before = {n: p.exp(n) for n in self.NAMES}

    def delta(self, name):
        return self.p.exp(name) - self.before[name]


def attempts_since(rx, t):
    return [a for a in list(rx.attempts) if a["time"] >= t]


def wait_moved_on(p, rx, first, timeout=30):
    """Until the receiver accepted a request other than `first` (an attempt) after it; returns the
    attempts from `first` on. Delivery sends one request at a time, in order, and retries the head
    before anything after it: once a later request got through, `first` is settled for good, and
    a retry of it would be among these attempts. No silence window: the exporter moved on."""
    def later():
        p.flush()  # close an interval, so that there is a next request
        atts = [a for a in list(rx.attempts) if a["time"] >= first["time"]]
        return (any(a["accepted"] and a["message"] != first["message"] for a in atts),
                [a["answer"] for a in atts])
    wait_until(later, "an accepted request after the one under test", timeout, interval=0.3,
               diagnosis=p.exporter_state)
    return [a for a in list(rx.attempts) if a["time"] >= first["time"]]


def quiesce(p, rx):
    """Waits until the exporter has nothing spooled and no script is pending."""
    rx.script.clear()
    p.wait_exporter(lambda: p.exp("SpoolFiles") == 0 and p.exp("BackoffUntilNs") == 0, timeout=30,
                    what="empty spool, no back-off")


# ---- fixtures ----

@pytest.fixture(scope="module")
def certs():
    d = Path(tempfile.mkdtemp(prefix="ep-certs-"))
    try:
        yield make_test_certs(d)
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def http_rx():
    with OtlpReceiver() as r:
        yield r


@pytest.fixture(scope="module")
def grpc_rx():
    with GrpcReceiver(sniff=True) as r:
        yield r


@pytest.fixture(scope="module")
def http_profiler(http_rx):
    yield from export_profiler("--otlp-endpoint", http_rx.url, "--otlp-protocol", "http/protobuf", env=BASE_ENV)


@pytest.fixture(scope="module")
def grpc_profiler(grpc_rx):
    yield from export_profiler("--otlp-endpoint", grpc_rx.url, "--otlp-protocol", "grpc", env=BASE_ENV)


@pytest.fixture(scope="module")
def grpcs_rx(certs):
    with GrpcReceiver(tls=certs) as r:
        yield r


@pytest.fixture(scope="module")
def grpcs_profiler(grpcs_rx, certs):
    yield from export_profiler("--otlp-endpoint", grpcs_rx.url, "--otlp-protocol", "grpc",
                               env=tls_env(certs, client=False))


@pytest.fixture(params=["http", "grpc", "grpcs"])
def setup(request):
    """(protocol, profiler, receiver), once per transport: OTLP/HTTP, OTLP/gRPC over h2c and
    over TLS."""
    proto = request.param
    rx = request.getfixturevalue(f"{proto}_rx")
    p = request.getfixturevalue(f"{proto}_profiler")
    if rx.running:
        quiesce(p, rx)
    return proto.rstrip("s") if proto == "grpcs" else proto, p, rx


# ---- the data ----

def test_receiver_gets_the_stores_stacks_and_protoc_parses_them(setup):
    proto, p, rx = setup
    t0 = time.time()
    # Enough samples that the workload's start (the dynamic loader, before the chain) stays
    # well under 1 %: a 2 s run on a loaded machine gave 94, one of them outside the chain.
    pid = profile_until(p, "fpchain", 400)
    exported, local = wait_delivered(p, rx, pid)
    assert_same_stacks_as_the_store(p, exported, local)
    assert sum(c for names, c in exported.items() if contains_chain(names)) >= 0.99 * sum(exported.values())
    assert p.exp("RequestsSent") > 0 and p.exp("BytesSent") > 0
    assert p.exp("Protocol") == {"http": "http/protobuf", "grpc": "grpc"}[proto]
    assert p.exp("Endpoint") == rx.url

    # protoc parses exactly the bytes that arrived (the unframed message for gRPC), and the
    # request holding the workload says so.
    mine = [a for a in attempts_since(rx, t0) if a["accepted"] and pid in {
        resource_attrs(rp).get("process.pid") for rp in a["request"].resource_profiles}]
    assert mine
    texts = [protoc_decode(a["message"]) for a in mine]
    assert all(f"int_value: {pid}" in text for text in texts), texts[0][:2000]
    # A request can hold only the workload's first samples (the dynamic loader, before the chain).
    assert any("gamma_spin" in text for text in texts), texts[0][:2000]

    # Resource: the process, the host, OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME.
    rps = [rp for a in mine for rp in a["request"].resource_profiles
           if resource_attrs(rp).get("process.pid") == pid]
    attrs = resource_attrs(rps[0])
    assert attrs.get("process.executable.name") == "fpchain", attrs
    assert attrs.get("host.name") == os.uname().nodename, attrs
    assert attrs.get("deployment.environment") == "test", attrs
    assert attrs.get("ep.test.key") == "v,1", attrs  # percent-decoded
    assert attrs.get("service.name") == "ep-e2e-service", attrs

    # OTEL_EXPORTER_OTLP_HEADERS as HTTP headers / gRPC metadata.
    for a in mine:
        assert a["headers"].get("x-ep-test") == "hello", a["headers"]
        assert a["headers"].get("x-ep-other") == "two words", a["headers"]


@pytest.mark.parametrize("setup", ["http", "grpc"], indirect=True)  # TLS would hide the gRPC frames
def test_requests_are_gzip_compressed_on_the_wire(setup):
    proto, p, rx = setup
    t0 = time.time()
    pid = profile_fpchain(p, 1)
    wait_delivered(p, rx, pid)
    accepted = [a for a in attempts_since(rx, t0) if a["accepted"]]
    assert accepted
    if proto == "http":
        for a in accepted:
            assert a["headers"].get("content-encoding") == "gzip", a["headers"]
            assert a["headers"].get("content-type") == "application/x-protobuf", a["headers"]
            assert a["body"][:2] == b"\x1f\x8b" and gzip.decompress(a["body"]) == a["message"]
    else:
        # grpcio hides grpc-encoding from the handler; the wire shows it: every message is
        # flagged compressed and is gzip, and the server could only decompress it (the request
        # was accepted) because grpc-encoding said gzip.
        wire = [w for w in list(rx.wire_messages) if w["time"] >= t0]
        assert wire, "the sniffer saw no gRPC message"
        messages = {a["message"] for a in accepted}
        for w in wire:
            assert w["compressed"] == 1, f"gRPC message not flagged compressed ({w['length']} bytes)"
            assert w["payload"][:2] == b"\x1f\x8b", w["payload"][:16]
        assert {gzip.decompress(w["payload"]) for w in wire} >= messages


# ---- delivery ----

def tls_env(certs, ca=True, client=True):
    env = dict(BASE_ENV)
    if ca:
        env["OTEL_EXPORTER_OTLP_CERTIFICATE"] = str(certs.ca_cert)
    if client:
        env["OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE"] = str(certs.client_cert)
        env["OTEL_EXPORTER_OTLP_CLIENT_KEY"] = str(certs.client_key)
    return env


TRANSIENT = {
    "http": [Reply.http(503, retry_after=1), Reply.http(503)],
    "grpc": [Reply.grpc("UNAVAILABLE", retry_delay=1), Reply.grpc("UNAVAILABLE")],
}
PERMANENT = {"http": Reply.http(400), "grpc": Reply.grpc("INVALID_ARGUMENT")}


def test_transient_failures_are_retried_and_delivered_once_in_order(setup):
    proto, p, rx = setup
    c = Counters(p)
    t0 = rx.set_script(list(TRANSIENT[proto]))
    pid = profile_fpchain(p)
    exported, local = wait_delivered(p, rx, pid)
    assert_delivered_once(exported, local)  # a duplicate would double the counts
    atts = attempts_since(rx, t0)
    failed = [a for a in atts if not a["accepted"]]
    assert [a["answer"] for a in failed] == [r.describe() for r in TRANSIENT[proto]], [a["answer"] for a in atts]
    # The head request was retried (one in flight at a time) until it got through, once.
    assert failed[0]["message"] == failed[1]["message"]
    ok = [a for a in atts if a["accepted"]]
    assert [a["message"] for a in ok].count(failed[0]["message"]) == 1
    assert ok[0]["message"] == failed[0]["message"], "the retried request was overtaken"
    # The server's delay (Retry-After: 1 / RetryInfo 1 s) was waited out.
    gap = failed[1]["time"] - failed[0]["time"]
    assert gap >= 0.9, f"retried after {gap:.2f}s despite a 1 s server delay"
    assert_in_order([a["request"] for a in ok])
    assert c.delta("RequestsRetried") >= 2, p.exporter_state()
    assert c.delta("RequestsFailed") == 0, p.exporter_state()


def test_permanent_failure_is_not_retried(setup):
    proto, p, rx = setup
    c = Counters(p)
    t0 = rx.set_script([PERMANENT[proto]])
    rx.wait_for(lambda: any(not a["accepted"] for a in attempts_since(rx, t0)), timeout=10,
                what="the scripted refusal")
    rejected = next(a for a in attempts_since(rx, t0) if not a["accepted"])
    # Settled: counted as refused for good (and removed from the spool in the same step) ...
    p.wait_exporter(lambda: c.delta("RequestsFailed") >= 1, what="RequestsFailed counted")
    # ... and delivery went on with the next request, which a retry would have come before.
    atts = wait_moved_on(p, rx, rejected)
    assert [a["message"] for a in atts].count(rejected["message"]) == 1, "the refused request was sent again"
    assert c.delta("RequestsRetried") == 0 and c.delta("RequestsFailed") == 1, p.exporter_state()
    assert p.exp("LastError"), p.exporter_state()
    assert t0 - 1 <= p.exp("LastErrorNs") / 1e9 <= time.time(), p.exporter_state()
    assert any(a["accepted"] for a in atts), "delivery stopped after the refused request"


@pytest.mark.parametrize("setup", ["grpc", "grpcs"], indirect=True)
def test_grpc_resource_exhausted_is_retried_only_with_retry_info(setup):
    _, p, rx = setup
    c = Counters(p)
    t0 = rx.set_script([Reply.grpc("RESOURCE_EXHAUSTED", retry_delay=0.5)])
    assert rx.wait_for(lambda: sum(a["accepted"] for a in attempts_since(rx, t0)) >= 2, timeout=15)
    atts = attempts_since(rx, t0)
    assert atts[0]["answer"] == "RESOURCE_EXHAUSTED" and atts[1]["accepted"], [a["answer"] for a in atts]
    assert atts[1]["message"] == atts[0]["message"]
    assert c.delta("RequestsRetried") >= 1 and c.delta("RequestsFailed") == 0, p.exporter_state()

    c = Counters(p)
    t1 = rx.set_script([Reply.grpc("RESOURCE_EXHAUSTED")])
    p.wait_exporter(lambda: c.delta("RequestsFailed") >= 1, what="RESOURCE_EXHAUSTED without RetryInfo failed")
    first = rx.wait_for(lambda: attempts_since(rx, t1), what="the scripted attempt recorded")[0]
    assert first["answer"] == "RESOURCE_EXHAUSTED"
    atts = wait_moved_on(p, rx, first)
    assert [a["message"] for a in atts].count(first["message"]) == 1, "retried without RetryInfo"
    assert c.delta("RequestsRetried") == 0 and c.delta("RequestsFailed") == 1, p.exporter_state()


def test_partial_success_is_counted_and_not_retried(setup):
    proto, p, rx = setup
    c = Counters(p)
    t0 = rx.set_script([Reply(partial=(1, "one profile rejected by the test"))])
    p.wait_exporter(lambda: c.delta("PartialSuccessRejected") >= 1, what="PartialSuccessRejected counted")
    first = rx.wait_for(lambda: attempts_since(rx, t0), what="the scripted attempt recorded")[0]
    assert first["accepted"], first["answer"]
    atts = wait_moved_on(p, rx, first)
    assert [a["message"] for a in atts].count(first["message"]) == 1, "a partial success was sent again"
    assert c.delta("RequestsRetried") == 0 and c.delta("RequestsFailed") == 0, p.exporter_state()


def test_outage_spools_and_delivers_in_order_afterwards(setup):
    proto, p, rx = setup
    c = Counters(p)
    rx.stop()
    try:
        pid = profile_fpchain(p, 3)
        p.wait_exporter(lambda: p.exp("SpoolFiles") >= 2 and p.exp("SpoolBytes") > 0 and
                        c.delta("RequestsRetried") >= 1, what="requests spooled during the outage")
        assert p.exp("LastError")
        p.wait_exporter(lambda: p.exp("BackoffUntilNs") / 1e9 > time.time() - 0.5, what="backing off")
    finally:
        t_up = time.time()
        rx.start()
    p.exporter_flush()  # try the head now instead of waiting out the back-off
    exported, local = wait_delivered(p, rx, pid, timeout=30)
    assert_delivered_once(exported, local)
    p.wait_exporter(lambda: p.exp("SpoolFiles") == 0 and p.exp("SpoolBytes") == 0, what="spool emptied")
    ok = [a for a in attempts_since(rx, t_up) if a["accepted"]]
    assert len(ok) >= 2
    assert_in_order([a["request"] for a in ok])
    assert len({a["message"] for a in ok}) == len(ok), "a spooled request was delivered twice"
    assert c.delta("RequestsFailed") == 0


def test_spool_survives_an_exporter_kill(http_profiler, http_rx):
    p, rx = http_profiler, http_rx
    quiesce(p, rx)
    rx.stop()
    try:
        pid = profile_fpchain(p, 2)
        # The workload's interval went through the exporter (encoded and spooled): it is in the
        # store, and the exporter took an interval after it.
        p.wait_exporter(lambda: sum(stored(p, pid).values()) > 0, what="workload stored")
        intervals = p.exp("Intervals")
        p.wait_exporter(lambda: p.exp("Intervals") >= intervals + 1 and p.exp("SpoolFiles") >= 2,
                        what="workload spooled")
        assert sum(stored(p, pid).values()) > 0
        spooled = p.exp("SpoolFiles")
        old = p.daemon_pid("ebpf-profiler-exporter")
        assert old
        os.kill(old, signal.SIGKILL)
        p.wait_exporter(lambda: (p.daemon_pid("ebpf-profiler-exporter") or old) != old and
                        p.exp("SpoolFiles") >= spooled, timeout=20, what="exporter restarted with its spool")
    finally:
        t_up = time.time()
        rx.start()
    p.exporter_flush()
    exported, local = wait_delivered(p, rx, pid, timeout=30)
    assert_delivered_once(exported, local)
    ok = [a for a in attempts_since(rx, t_up) if a["accepted"]]
    assert_in_order([a["request"] for a in ok])
    assert len({a["message"] for a in ok}) == len(ok)


def test_spool_stays_within_its_bound():
    """The receiver is down from the start, so every interval is spooled; with the smallest
    bound the exporter takes (1M) and a high sampling rate the oldest requests are pushed out
    and the spool, by the property and on disk, never goes over the bound."""
    need_root()
    limit = 1 << 20
    rx = OtlpReceiver()
    rx.start()
    port = rx.port
    rx.stop()
    gen = export_profiler("--otlp-endpoint", f"http://127.0.0.1:{port}/v1development/profiles",
                          "--frequency", "999", env=BASE_ENV, spool_max="1M")
    p = next(gen)
    workloads = []
    try:
        workloads = [run_workload("fpchain", 30), run_workload("syscalls", 30)]
        biggest = 0

        def full():  # the bound holds at every look, until the spool had to drop
            nonlocal biggest
            used = p.exp("SpoolBytes")
            on_disk = sum(f.stat().st_size for f in p.spool_dir.glob("*") if f.is_file())
            biggest = max(biggest, used, on_disk)
            assert used <= limit and on_disk <= limit, f"spool {used} (disk {on_disk}) over {limit}"
            return p.exp("SpoolDropped") > 0, f"SpoolBytes {used}, on disk {on_disk}"
        wait_until(full, "the spool to drop a request at its bound", 40, diagnosis=p.exporter_state)
        assert biggest > limit // 2, f"the spool never filled: {biggest} bytes"
        assert 0 < p.exp("SpoolBytes") <= limit and p.exp("SpoolFiles") > 0
    finally:
        for w in workloads:
            w.kill()
            w.wait()
        gen.close()


# ---- TLS ----

@pytest.fixture(scope="module")
def tls_rx(certs):
    with OtlpReceiver(tls=certs) as r:
        yield r


def test_https_with_the_ca_then_mtls_delivers(certs, tls_rx):
    rx = tls_rx
    gen = export_profiler("--otlp-endpoint", rx.url, env=tls_env(certs))
    p = next(gen)
    try:
        pid = profile_fpchain(p, 1)
        wait_delivered(p, rx, pid)
        assert p.exp("Endpoint").startswith("https://")
        # The same server, now requiring a client certificate signed by the CA.
        rx.stop()
        rx.require_client_cert = True
        rx.start()
        t0 = time.time()
        pid = profile_fpchain(p, 1)
        wait_delivered(p, rx, pid, timeout=30)
        ok = [a for a in attempts_since(rx, t0) if a["accepted"]]
        subject = dict(x[0] for x in ok[-1]["client_cert"]["subject"])
        assert subject["commonName"] == "ebpf-profiler test client"
    finally:
        rx.require_client_cert = False
        gen.close()


@pytest.mark.parametrize("case", ["no-ca", "no-client-cert"])
def test_tls_failures_deliver_nothing(certs, case):
    rx = OtlpReceiver(tls=certs, require_client_cert=case == "no-client-cert")
    rx.start()
    env = tls_env(certs, ca=case != "no-ca", client=False)
    gen = export_profiler("--otlp-endpoint", rx.url, env=env)
    p = next(gen)
    try:
        profile_fpchain(p, 1)
        p.wait_exporter(lambda: p.exp("LastError") and (p.exp("RequestsRetried") or p.exp("RequestsFailed")),
                        what="a failed TLS attempt")
        assert rx.wait_for(lambda: rx.tls_errors, timeout=10), "the server saw no handshake"
        assert not rx.requests, "delivered over TLS that should have failed"
        assert p.exp("RequestsSent") == 0
        err = p.exp("LastError").lower()
        if case == "no-ca":
            assert "certificate" in err or "ssl" in err, err
            assert "certificate" in err, f"LastError does not mention the certificate: {err}"
        assert p.exp("SpoolFiles") > 0  # kept for later, not dropped
    finally:
        gen.close()
        rx.stop()


def test_grpc_over_mtls_delivers(certs):
    rx = GrpcReceiver(tls=certs, require_client_cert=True)
    rx.start()
    gen = export_profiler("--otlp-endpoint", rx.url, "--otlp-protocol", "grpc", env=tls_env(certs))
    p = next(gen)
    try:
        pid = profile_fpchain(p, 1)
        exported, local = wait_delivered(p, rx, pid)
        assert_delivered_once(exported, local)
        assert rx.requests and rx.attempts[-1]["client_cert"] == [b"ebpf-profiler test client"]
    finally:
        gen.close()
        rx.stop()


# ---- configuration from OTEL_* ----

def test_generic_endpoint_gets_the_profiles_path():
    with OtlpReceiver() as rx:
        gen = export_profiler(env={**BASE_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": rx.base_url,
                                   "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf"})
        p = next(gen)
        try:
            assert p.exp("Endpoint") == rx.base_url + "/v1development/profiles"
            assert p.exp("Protocol") == "http/protobuf"
            pid = profile_fpchain(p, 1)
            wait_delivered(p, rx, pid)
            assert {a["path"] for a in rx.attempts} == {"/v1development/profiles"}
        finally:
            gen.close()


def test_profiles_endpoint_wins_over_the_generic_one():
    with OtlpReceiver() as decoy, GrpcReceiver() as rx:
        gen = export_profiler(env={**BASE_ENV, "OTEL_EXPORTER_OTLP_ENDPOINT": decoy.base_url,
                                   "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT": rx.url,
                                   "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"})
        p = next(gen)
        try:
            assert p.exp("Endpoint") == rx.url
            assert p.exp("Protocol") == "grpc"
            pid = profile_fpchain(p, 1)
            wait_delivered(p, rx, pid)
            assert not decoy.attempts, "the generic endpoint was used"
            assert all(a["headers"].get("x-ep-test") == "hello" for a in rx.attempts)
        finally:
            gen.close()


def test_config_file_sets_endpoint_protocol_and_headers(tmp_path):
    """The exporter's --config file (key = value, the OTEL names in lower case); `run` has no
    option for it, so a wrapper passes it. OTEL_EXPORTER_OTLP_HEADERS would win over the file's
    headers, so it is left out here."""
    with OtlpReceiver() as rx:
        conf = Path(tempfile.mkdtemp(prefix="ep-conf-"))
        conf.chmod(0o755)
        f = conf / "exporter.conf"
        f.write_text(f"# test\nendpoint = {rx.url}\nprotocol = http/protobuf\ncompression = none\n"
                     "headers = x-ep-file=from%20file\n")
        f.chmod(0o644)
        env = {k: v for k, v in BASE_ENV.items() if k not in ("OTEL_EXPORTER_OTLP_HEADERS",
                                                                 "OTEL_EXPORTER_OTLP_COMPRESSION")}
        gen = export_profiler(env=env, exporter_args=["--config", str(f)])
        p = next(gen)
        try:
            assert p.exp("Endpoint") == rx.url and p.exp("Protocol") == "http/protobuf"
            pid = profile_fpchain(p, 1)
            wait_delivered(p, rx, pid)
            assert all(a["headers"].get("x-ep-file") == "from file" for a in rx.attempts), \
                [a["headers"] for a in rx.attempts]
            for a in rx.attempts:  # compression = none
                assert a["headers"].get("content-encoding", "identity") == "identity", a["headers"]
                assert a["body"] == a["message"]
        finally:
            gen.close()
            shutil.rmtree(conf, ignore_errors=True)
