#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""A loopback OTLP/HTTP profiles receiver for the tests.

It accepts POST /v1development/profiles (protobuf, optionally gzip), decodes each body as an
ExportProfilesServiceRequest with the Python modules protoc generates from this project's
proto/ files (meson puts them in <builddir>/proto), and keeps them in `.requests`.

    r = OtlpReceiver(port=0); r.start()
    ... point the exporter at r.url ...
    r.wait_for_requests(1); flatten_request(r.requests[0])  # {(pid, names leaf→root): count}
    r.stop()

The modules are found through PYTHONPATH, else $EP_PROTO_PYTHONPATH, else
${EP_BUILD_DIR:-<repo>/build}/proto. Needs Debian's /usr/bin/python3 with python3-protobuf.

Standalone:
    otlp_receiver.py --port 4318 --out DIR     serve; write each request to DIR/request-N.bin
    otlp_receiver.py --decode FILE [--expect-events N]
                                               check one encoded request; print a summary
"""
import argparse
import gzip
import http.server
import json
import os
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path

PROFILES_PATH = "/v1development/profiles"
MAX_BODY = 64 << 20  # OTLP's recommended request limit (after decompression)


def _import_service_module():
    try:
        from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2
        return profiles_service_pb2
    except ImportError:
        pass
    repo = Path(__file__).resolve().parents[2]
    candidates = [os.environ.get("EP_PROTO_PYTHONPATH"),
                  str(Path(os.environ.get("EP_BUILD_DIR", repo / "build")) / "proto")]
    for c in candidates:
        if c and (Path(c) / "opentelemetry" / "proto").is_dir():
            sys.path.insert(0, c)
            break
    try:
        from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2
    except ImportError as e:
        raise ImportError(
            "otlp_receiver: cannot import the OTLP profiles modules generated from proto/ "
            f"({e}). Build the project (meson generates them in <builddir>/proto with protoc "
            "--python_out) and put that directory on PYTHONPATH or in $EP_PROTO_PYTHONPATH; "
            "python3-protobuf must be installed.") from e
    return profiles_service_pb2


pb = _import_service_module()


def decode_body(body, content_encoding=None):
    """Bytes of an HTTP body (gzip or not) → ExportProfilesServiceRequest."""
    if content_encoding == "gzip" or (content_encoding is None and body[:2] == b"\x1f\x8b"):
        body = gzip.decompress(body)
    if len(body) > MAX_BODY:
        raise ValueError(f"request of {len(body)} bytes is over the {MAX_BODY} byte limit")
    req = pb.ExportProfilesServiceRequest()
    req.ParseFromString(body)
    return req


def _resource_attrs(rp):
    out = {}
    for kv in rp.resource.attributes:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value")) if v.WhichOneof("value") else None
    return out


def _pid(rp):
    pid = _resource_attrs(rp).get("process.pid")
    return int(pid) if pid is not None else None


def stack_names(d, stack_index):
    """Function names of a stack, leaf → root, inline lines expanded innermost first. A
    location without lines (not symbolized) or a line without a function gives ""."""
    names = []
    for li in d.stack_table[stack_index].location_indices:
        loc = d.location_table[li]
        if not loc.lines:
            names.append("")
            continue
        for line in loc.lines:
            fn = d.function_table[line.function_index]
            names.append(d.string_table[fn.name_strindex])
    return tuple(names)


def sample_count(sample):
    """Events a Sample stands for: one per timestamp, else the sum of its values."""
    if len(sample.timestamps_unix_nano):
        return len(sample.timestamps_unix_nano)
    return sum(sample.values)


def flatten_request(req):
    """{(pid, (function names leaf→root)): count} over every profile of the request."""
    d = req.dictionary
    out = Counter()
    for rp in req.resource_profiles:
        pid = _pid(rp)
        for sp in rp.scope_profiles:
            for prof in sp.profiles:
                for s in prof.samples:
                    out[(pid, stack_names(d, s.stack_index))] += sample_count(s)
    return dict(out)


def sample_attributes(req, sample):
    """{key: value} of a Sample's dictionary attributes."""
    d = req.dictionary
    out = {}
    for i in sample.attribute_indices:
        a = d.attribute_table[i]
        v = a.value
        kind = v.WhichOneof("value")
        if kind == "string_value_strindex":
            out[d.string_table[a.key_strindex]] = d.string_table[v.string_value_strindex]
        else:
            out[d.string_table[a.key_strindex]] = getattr(v, kind) if kind else None
    return out


def validate_request(req):
    """Semantic checks protoc cannot make. Returns a list of problems (empty when fine)."""
    problems = []
    d = req.dictionary
    tables = {
        "mapping_table": d.mapping_table, "location_table": d.location_table,
        "function_table": d.function_table, "link_table": d.link_table,
        "string_table": d.string_table, "attribute_table": d.attribute_table,
        "stack_table": d.stack_table,
    }
    for name, t in tables.items():
        if len(t) == 0:
            problems.append(f"{name} has no element 0")
    if problems:
        return problems
    if d.string_table[0] != "":
        problems.append("string_table[0] is not empty")
    for name in ("mapping_table", "location_table", "function_table", "attribute_table", "stack_table"):
        if tables[name][0].ByteSize() != 0:
            problems.append(f"{name}[0] is not the zero value")
    link0 = d.link_table[0]
    if any(link0.trace_id) or any(link0.span_id):
        problems.append("link_table[0] is not the zero value")
    if len(set(d.string_table)) != len(d.string_table):
        problems.append("string_table has duplicates")

    def check(kind, i, table, allow_zero=True):
        if not (0 <= i < len(tables[table])) or (i == 0 and not allow_zero):
            problems.append(f"{kind} index {i} out of range for {table} ({len(tables[table])})")

    def check_attrs(kind, indices):
        keys = []
        for i in indices:
            check(kind, i, "attribute_table", allow_zero=False)
            if 0 < i < len(d.attribute_table):
                keys.append(d.attribute_table[i].key_strindex)
        if len(keys) != len(set(keys)):
            problems.append(f"{kind} references two attributes with the same key")

    for a in d.attribute_table[1:]:
        check("attribute key", a.key_strindex, "string_table", allow_zero=False)
    for m in d.mapping_table[1:]:
        check("mapping filename", m.filename_strindex, "string_table")
        check_attrs("mapping", m.attribute_indices)
    for f in d.function_table[1:]:
        for i in (f.name_strindex, f.system_name_strindex, f.filename_strindex):
            check("function", i, "string_table")
    for loc in d.location_table[1:]:
        check("location mapping", loc.mapping_index, "mapping_table")
        for line in loc.lines:
            check("line function", line.function_index, "function_table")
        check_attrs("location", loc.attribute_indices)
    for st in d.stack_table[1:]:
        for i in st.location_indices:
            check("stack location", i, "location_table", allow_zero=False)
    for rp in req.resource_profiles:
        for sp in rp.scope_profiles:
            for prof in sp.profiles:
                check("sample_type", prof.sample_type.type_strindex, "string_table")
                start, end = prof.time_unix_nano, prof.time_unix_nano + prof.duration_nano
                for s in prof.samples:
                    check("sample stack", s.stack_index, "stack_table")
                    check("sample link", s.link_index, "link_table")
                    check_attrs("sample", s.attribute_indices)
                    if not s.values and not s.timestamps_unix_nano:
                        problems.append("sample with neither values nor timestamps")
                    if s.values and s.timestamps_unix_nano and len(s.values) != len(s.timestamps_unix_nano):
                        problems.append("sample values and timestamps differ in length")
                    for t in s.timestamps_unix_nano:
                        if not start <= t < end:
                            problems.append(f"timestamp {t} outside [{start}, {end}]")
                            break
    return problems


def summarize(req):
    flat = flatten_request(req)
    d = req.dictionary
    return {
        "resource_profiles": len(req.resource_profiles),
        "pids": sorted({pid for pid, _ in flat if pid is not None}),
        "events": sum(flat.values()),
        "stacks": len(flat),
        "table_sizes": {
            "mapping": len(d.mapping_table), "location": len(d.location_table),
            "function": len(d.function_table), "string": len(d.string_table),
            "attribute": len(d.attribute_table), "stack": len(d.stack_table),
        },
    }


class OtlpReceiver:
    """OTLP/HTTP profiles receiver on 127.0.0.1 (port 0 = any free port), in a thread."""

    def __init__(self, port=0, host="127.0.0.1", out_dir=None, status=200, path=PROFILES_PATH):
        self.host = host
        self.port = port
        self.path = path
        self.out_dir = Path(out_dir) if out_dir else None
        self.status = status        # answer with this HTTP status (e.g. 503 to test failures)
        self.retry_after = None     # Retry-After header value sent with a non-200 status
        self.requests = []          # decoded ExportProfilesServiceRequest, in arrival order
        self.raw = []               # per POST: path, headers, sizes, status answered
        self.errors = []            # bodies that could not be decoded
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._server = None
        self._thread = None

    @property
    def url(self):
        return f"http://{self.host}:{self.port}{self.path}"

    def start(self):
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # keep test output quiet
                pass

            def _reply(self, status, body=b"", content_type="application/x-protobuf", extra=()):
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                for k, v in extra:
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length) if length else b""
                info = {"path": self.path, "headers": dict(self.headers.items()),
                        "size": len(body), "time": time.time()}
                if self.path != receiver.path:
                    info["status"] = 404
                    with receiver._cond:
                        receiver.raw.append(info)
                        receiver._cond.notify_all()
                    self._reply(404, b"not found", "text/plain")
                    return
                if receiver.status != 200:
                    info["status"] = receiver.status
                    extra = [("Retry-After", str(receiver.retry_after))] if receiver.retry_after else []
                    with receiver._cond:
                        receiver.raw.append(info)
                        receiver._cond.notify_all()
                    self._reply(receiver.status, b"", extra=extra)
                    return
                try:
                    req = decode_body(body, self.headers.get("Content-Encoding", "identity"))
                except Exception as e:  # noqa: BLE001 - any decode failure is a 400
                    info["status"] = 400
                    with receiver._cond:
                        receiver.raw.append(info)
                        receiver.errors.append(f"{type(e).__name__}: {e}")
                        receiver._cond.notify_all()
                    self._reply(400, str(e).encode(), "text/plain")
                    return
                info["status"] = 200
                with receiver._cond:
                    n = len(receiver.requests)
                    receiver.requests.append(req)
                    receiver.raw.append(info)
                    receiver._cond.notify_all()
                if receiver.out_dir:
                    receiver.out_dir.mkdir(parents=True, exist_ok=True)
                    (receiver.out_dir / f"request-{n:05d}.bin").write_bytes(req.SerializeToString())
                self._reply(200, pb.ExportProfilesServiceResponse().SerializeToString())

            def do_GET(self):
                self._reply(405, b"POST OTLP profiles to " + receiver.path.encode(), "text/plain")

        self._server = http.server.ThreadingHTTPServer((self.host, self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="otlp-receiver",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._server:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(timeout=10)
            self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def clear(self):
        with self._lock:
            self.requests.clear()
            self.raw.clear()
            self.errors.clear()

    def wait_for_requests(self, n=1, timeout=10.0):
        """Waits until at least n requests were decoded; returns whether they were."""
        deadline = time.time() + timeout
        with self._cond:
            while len(self.requests) < n:
                left = deadline - time.time()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def flattened(self):
        """flatten_request over every request received so far, summed."""
        total = Counter()
        with self._lock:
            reqs = list(self.requests)
        for req in reqs:
            total.update(flatten_request(req))
        return dict(total)


def main(argv=None):
    ap = argparse.ArgumentParser(description="Loopback OTLP/HTTP profiles receiver (tests).")
    ap.add_argument("--port", type=int, default=4318)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--out", help="directory to write each decoded request to (request-N.bin)")
    ap.add_argument("--status", type=int, default=200, help="HTTP status to answer with")
    ap.add_argument("--decode", metavar="FILE", help="check one encoded request file and exit")
    ap.add_argument("--expect-events", type=int, help="with --decode: the total event count")
    args = ap.parse_args(argv)

    if args.decode:
        req = decode_body(Path(args.decode).read_bytes(), None)
        problems = validate_request(req)
        summary = summarize(req)
        summary["problems"] = problems
        print(json.dumps(summary, indent=2))
        if problems:
            return 1
        if args.expect_events is not None and summary["events"] != args.expect_events:
            print(f"expected {args.expect_events} events, got {summary['events']}", file=sys.stderr)
            return 1
        return 0

    r = OtlpReceiver(port=args.port, host=args.host, out_dir=args.out, status=args.status)
    r.start()
    print(f"listening on {r.url}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    seen = 0
    while not stop.wait(0.2):
        with r._lock:
            new = r.requests[seen:]
        for req in new:
            s = summarize(req)
            print(f"request {seen}: {s['resource_profiles']} processes, {s['events']} events, "
                  f"{s['stacks']} stacks", flush=True)
            seen += 1
    r.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
