#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Loopback OTLP profiles receivers for the tests: OTLP/HTTP (OtlpReceiver) and OTLP/gRPC
(GrpcReceiver, python3-grpcio).

Both decode each request as an ExportProfilesServiceRequest with the Python modules protoc
generates from this project's proto/ files (meson puts them in <builddir>/proto), keep the
accepted ones in `.requests` and every attempt (headers or metadata, wire body, decoded
message bytes, the answer given) in `.attempts`. A `.script` of Reply objects injects failures
(HTTP status + Retry-After, gRPC status + RetryInfo, partial_success), one per request. TLS and
mTLS use certificates from make_test_certs() (the openssl CLI). stop() then start() serves the
same port again (outages).

    r = OtlpReceiver(port=0); r.start()
    ... point the exporter at r.url ...
    r.wait_for_requests(1); flatten_request(r.requests[0])  # {(pid, names leaf→root): count}
    r.script = [Reply.http(503, retry_after=1), Reply.http(503)]
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
import socket
import ssl
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import otlp_conformance  # noqa: E402
from waiting import wait_until  # noqa: E402

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


# Every request a receiver of this process decoded is held to the conformance rules: how many,
# and each violation with the request it came from (conftest fails the test that caused one).
CONFORMANCE = {"checked": 0, "violations": []}


def conformance_check(req, what):
    """Checks one request against otlp_conformance's rules and keeps what it finds."""
    problems = otlp_conformance.check(req)
    CONFORMANCE["checked"] += 1
    CONFORMANCE["violations"].extend(f"{what}: {p}" for p in problems)
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


# ---- scripted answers ----

def partial_success_response(rejected, message):
    """ExportProfilesServiceResponse bytes carrying a partial_success."""
    resp = pb.ExportProfilesServiceResponse()
    resp.partial_success.rejected_profiles = rejected
    resp.partial_success.error_message = message
    return resp.SerializeToString()


def _varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(num, wire, payload):
    if wire == 0:
        return _varint(num << 3) + _varint(payload)
    return _varint(num << 3 | 2) + _varint(len(payload)) + payload


def grpc_status_details(code, message, retry_delay=None):
    """A google.rpc.Status (code 1, message 2, details 3 of google.protobuf.Any), written by hand
    since Debian ships no google/rpc protos; with retry_delay (seconds) it carries one
    google.rpc.RetryInfo {retry_delay: Duration} detail. The bytes go in the
    grpc-status-details-bin trailer."""
    out = _field(1, 0, code) + _field(2, 2, message.encode())
    if retry_delay is not None:
        secs = int(retry_delay)
        nanos = int(round((retry_delay - secs) * 1e9))
        duration = (_field(1, 0, secs) if secs else b"") + (_field(2, 0, nanos) if nanos else b"")
        retry_info = _field(1, 2, duration)
        any_msg = _field(1, 2, b"type.googleapis.com/google.rpc.RetryInfo") + _field(2, 2, retry_info)
        out += _field(3, 2, any_msg)
    return out


class Reply:
    """One scripted answer of a receiver.

    HTTP: `status`, extra `headers` ({name: value}, e.g. Retry-After) and `body` (default: an
    empty ExportProfilesServiceResponse for 200, nothing otherwise).
    gRPC: `grpc_code` (a grpc.StatusCode name such as "UNAVAILABLE"; None is OK), `message`,
    `retry_delay` (seconds: a RetryInfo detail in grpc-status-details-bin).
    Both: `partial` = (rejected_profiles, error_message) answers success with a partial_success.
    A request answered with anything but success (HTTP 200 / gRPC OK) is not accepted: it is
    recorded in .attempts only, not in .requests."""

    def __init__(self, status=200, headers=None, body=None, grpc_code=None, message="",
                 retry_delay=None, partial=None, delay=0.0):
        self.status = status
        self.headers = dict(headers or {})
        self.body = body
        self.grpc_code = grpc_code
        self.message = message
        self.retry_delay = retry_delay
        self.partial = partial
        self.delay = delay  # seconds to wait before answering

    @classmethod
    def http(cls, status, retry_after=None, **kw):
        r = cls(status=status, **kw)
        if retry_after is not None:
            r.headers["Retry-After"] = str(retry_after)
        return r

    @classmethod
    def grpc(cls, code, message="", retry_delay=None, **kw):
        return cls(grpc_code=code, message=message or f"scripted {code}", retry_delay=retry_delay, **kw)

    @property
    def ok(self):
        return self.status == 200 and self.grpc_code in (None, "OK")

    def response_body(self):
        if self.body is not None:
            return self.body
        if self.partial is not None:
            return partial_success_response(*self.partial)
        return pb.ExportProfilesServiceResponse().SerializeToString() if self.status == 200 else b""

    def describe(self):
        if self.grpc_code:
            return self.grpc_code
        return self.status


class _ReceiverBase:
    """What the HTTP and gRPC receivers share: the script, the records, waiting."""

    def __init__(self):
        self.script = []            # Reply objects, one consumed per request; then `default`
        self.default = Reply()
        self.requests = []          # accepted (answered 200 / OK) requests, decoded, arrival order
        self.attempts = []          # every request: dict, see _record()
        self.errors = []            # bodies that could not be decoded
        self.tls_errors = []        # failed TLS handshakes (HTTP receiver)
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)

    @property
    def raw(self):                  # the older name of .attempts
        return self.attempts

    def set_script(self, replies):
        """Replaces the script; returns the time from which requests get its answers: an
        attempt's "time" is when its answer was chosen, under the same lock, so attempts at or
        after that time are exactly those answered from this script."""
        with self._lock:
            self.script[:] = replies
            return time.time()

    def _next_reply(self, info):
        """The scripted answer for a request, else the default; stamps info["time"]."""
        with self._lock:
            info["time"] = time.time()
            return self.script.pop(0) if self.script else self._default_reply()

    def _default_reply(self):
        return self.default

    def _record(self, info, reply, req):
        """info: path, headers, body (wire bytes), message (decoded protobuf bytes), time."""
        if req is not None:
            conformance_check(req, f"{type(self).__name__} request {len(self.attempts)}")
        info["answer"] = reply.describe()
        info["status"] = reply.status
        info["accepted"] = reply.ok and req is not None
        info["request"] = req
        with self._cond:
            if info["accepted"]:
                self.requests.append(req)
            self.attempts.append(info)
            self._cond.notify_all()

    def clear(self):
        with self._lock:
            self.requests.clear()
            self.attempts.clear()
            self.errors.clear()
            self.tls_errors.clear()
            self.script.clear()

    def wait_for(self, predicate, timeout=10.0, poll=None, what=None):
        """Waits until predicate() (called under no lock) is true and returns its value; raises
        AssertionError naming `what` (else the predicate) and its last value at the deadline.
        Wakes up on every recorded attempt (waiting.wait_until with the condition variable)."""
        def sleep(seconds):
            with self._cond:
                self._cond.wait(seconds)
        return wait_until(predicate, what or f"the receiver: {getattr(predicate, '__name__', predicate)}",
                          timeout, interval=poll or 0.25, sleep=sleep,
                          diagnosis=lambda: f"{len(self.requests)} accepted, {len(self.attempts)} attempts: "
                                            f"{[a.get('answer') for a in self.attempts[-5:]]}")

    def wait_for_requests(self, n=1, timeout=10.0):
        """Waits until at least n requests were accepted (AssertionError if not); returns True."""
        return self.wait_for(lambda: len(self.requests) >= n, timeout, what=f"{n} accepted requests")

    def wait_for_attempts(self, n=1, timeout=10.0):
        return self.wait_for(lambda: len(self.attempts) >= n, timeout, what=f"{n} attempts")

    def flattened(self, pid=None):
        """flatten_request over every accepted request so far, summed; with pid, only that
        process's stacks, as {names: count}."""
        total = Counter()
        with self._lock:
            reqs = list(self.requests)
        for req in reqs:
            for (rpid, names), c in flatten_request(req).items():
                if pid is None:
                    total[(rpid, names)] += c
                elif rpid == pid:
                    total[names] += c
        return dict(total)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


# ---- OTLP/HTTP ----

class OtlpReceiver(_ReceiverBase):
    """OTLP/HTTP profiles receiver on 127.0.0.1 (port 0 = any free port), in a thread.

    tls: a TestCerts (make_test_certs()) to serve https with its server certificate;
    require_client_cert: only accept clients with a certificate signed by its CA (mTLS).
    stop() closes the listening socket and every open connection, so the port refuses
    connections until start() binds the same port again."""

    def __init__(self, port=0, host="127.0.0.1", out_dir=None, status=200, path=PROFILES_PATH,
                 tls=None, require_client_cert=False):
        super().__init__()
        self.host = host
        self.port = port
        self.path = path
        self.out_dir = Path(out_dir) if out_dir else None
        self.status = status        # answer with this HTTP status when the script is empty
        self.retry_after = None     # Retry-After header value sent with that non-200 status
        self.tls = tls
        self.require_client_cert = require_client_cert
        self._server = None
        self._thread = None
        self._conns = set()

    @property
    def url(self):
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}{self.path}"

    @property
    def base_url(self):
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def _ssl_context(self):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(self.tls.server_cert), str(self.tls.server_key))
        if self.require_client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(str(self.tls.ca_cert))
        return ctx

    def _default_reply(self):
        if self.status != 200:
            return Reply.http(self.status, retry_after=self.retry_after)
        return self.default

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
                info = {"path": self.path, "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body, "size": len(body), "time": time.time(), "message": None,
                        "client_cert": None}
                if receiver.tls:
                    try:
                        info["client_cert"] = self.connection.getpeercert()
                    except (ValueError, AttributeError):
                        pass
                if self.path != receiver.path:
                    receiver._record(info, Reply.http(404), None)
                    self._reply(404, b"not found", "text/plain")
                    return
                req = None
                try:
                    message = body
                    encoding = self.headers.get("Content-Encoding", "identity")
                    if encoding == "gzip":
                        message = gzip.decompress(body)
                    elif encoding != "identity":
                        raise ValueError(f"unknown Content-Encoding {encoding}")
                    info["message"] = message
                    req = decode_body(message, "identity")
                except Exception as e:  # noqa: BLE001 - any decode failure is a 400
                    with receiver._lock:
                        receiver.errors.append(f"{type(e).__name__}: {e}")
                    receiver._record(info, Reply.http(400), None)
                    self._reply(400, str(e).encode(), "text/plain")
                    return
                reply = receiver._next_reply(info)
                if reply.delay:
                    time.sleep(reply.delay)
                receiver._record(info, reply, req)
                if reply.ok and receiver.out_dir:
                    receiver.out_dir.mkdir(parents=True, exist_ok=True)
                    n = sum(1 for a in receiver.attempts if a["accepted"])
                    (receiver.out_dir / f"request-{n - 1:05d}.bin").write_bytes(req.SerializeToString())
                ctype = "application/x-protobuf" if reply.status == 200 or reply.body is not None else "text/plain"
                self._reply(reply.status, reply.response_body(), ctype, list(reply.headers.items()))

            def do_GET(self):
                self._reply(405, b"POST OTLP profiles to " + receiver.path.encode(), "text/plain")

        ctx = self._ssl_context() if self.tls else None

        class Server(http.server.ThreadingHTTPServer):
            daemon_threads = True
            allow_reuse_address = True

            def finish_request(self, request, client_address):
                with receiver._lock:
                    receiver._conns.add(request)
                try:
                    if ctx:
                        try:
                            request.settimeout(10)
                            request = ctx.wrap_socket(request, server_side=True)
                            request.settimeout(None)
                        except (ssl.SSLError, OSError) as e:
                            with receiver._cond:
                                receiver.tls_errors.append(f"{type(e).__name__}: {e}")
                                receiver._cond.notify_all()
                            return
                        with receiver._lock:
                            receiver._conns.add(request)
                    super().finish_request(request, client_address)
                finally:
                    with receiver._lock:
                        receiver._conns.discard(request)

            def handle_error(self, request, client_address):
                pass  # a connection closed by stop() or by the client

        self._server = Server((self.host, self.port), Handler)
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
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                c.close()
            except OSError:
                pass

    @property
    def running(self):
        return self._server is not None


# ---- OTLP/gRPC ----

GRPC_SERVICE = "opentelemetry.proto.collector.profiles.v1development.ProfilesService"
GRPC_METHOD_PATH = f"/{GRPC_SERVICE}/Export"


class _H2Sniffer:
    """A TCP relay in front of a cleartext (h2c) gRPC server that reads the client's HTTP/2
    DATA frames and records every gRPC length-prefixed message as sent on the wire:
    {"stream", "compressed" (the prefix flag), "length", "payload" (bytes as sent)}.
    (grpcio hides grpc-encoding from the application; the wire shows what was compressed.)"""

    PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

    def __init__(self, host, port, target_port, messages, lock):
        self.host, self.port, self.target_port = host, port, target_port
        self.messages, self.lock = messages, lock
        self.sock = None
        self.conns = set()
        self.thread = None

    def start(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((self.host, self.port))
        s.listen(16)
        self.port = s.getsockname()[1]
        self.sock = s
        self.thread = threading.Thread(target=self._accept, daemon=True, name="h2-sniffer")
        self.thread.start()

    def stop(self):
        if self.sock:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
            self.sock = None
        for c in list(self.conns):
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()
        self.conns.clear()
        if self.thread:
            self.thread.join(timeout=5)

    def _accept(self):
        sock = self.sock
        while True:
            try:
                client, _ = sock.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            self.conns.update((client, upstream))
            threading.Thread(target=self._pipe, args=(client, upstream, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(upstream, client, False), daemon=True).start()

    def _pipe(self, src, dst, parse):
        buf = b""
        preface = False
        streams = {}
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
                if not parse:
                    continue
                buf += data
                if not preface:
                    if len(buf) < len(self.PREFACE):
                        continue
                    buf = buf[len(self.PREFACE):]
                    preface = True
                while len(buf) >= 9:
                    length = int.from_bytes(buf[:3], "big")
                    if len(buf) < 9 + length:
                        break
                    ftype, flags = buf[3], buf[4]
                    sid = int.from_bytes(buf[5:9], "big") & 0x7FFFFFFF
                    payload = buf[9:9 + length]
                    buf = buf[9 + length:]
                    if ftype != 0:  # DATA only
                        continue
                    if flags & 0x8:  # PADDED
                        pad = payload[0]
                        payload = payload[1:len(payload) - pad]
                    sbuf = streams.get(sid, b"") + payload
                    while len(sbuf) >= 5:
                        mlen = int.from_bytes(sbuf[1:5], "big")
                        if len(sbuf) < 5 + mlen:
                            break
                        with self.lock:
                            self.messages.append({"stream": sid, "compressed": sbuf[0], "length": mlen,
                                                  "payload": sbuf[5:5 + mlen], "time": time.time()})
                        sbuf = sbuf[5 + mlen:]
                    streams[sid] = sbuf
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.conns.discard(src)
            src.close()


class GrpcReceiver(_ReceiverBase):
    """OTLP/gRPC ProfilesService/Export on 127.0.0.1, with grpcio's generic handler (no code
    generation). Cleartext h2c, or TLS with tls= (a TestCerts) and optionally
    require_client_cert. gzip-compressed messages are accepted (grpcio decompresses them).
    sniff=True (cleartext only) puts a relay in front that records each gRPC message as it was
    on the wire in .wire_messages (compressed flag, bytes).

    Each attempt records: path, metadata ({key: value}, repeated keys joined with ","),
    message (the unframed, decompressed request bytes), request, answer, time."""

    def __init__(self, port=0, host="127.0.0.1", tls=None, require_client_cert=False, sniff=False):
        super().__init__()
        import grpc  # python3-grpcio
        self._grpc = grpc
        self.host = host
        self.port = port
        self.tls = tls
        self.require_client_cert = require_client_cert
        self.sniff = sniff and not tls
        self.wire_messages = []
        self._server = None
        self._sniffer = None
        self._inner_port = 0

    @property
    def url(self):
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    base_url = url

    def _export(self, message, context):
        grpc = self._grpc
        md = {}
        for k, v in context.invocation_metadata():
            md[k] = f"{md[k]},{v}" if k in md else v
        info = {"path": GRPC_METHOD_PATH, "metadata": md, "headers": md, "message": message,
                "body": message, "size": len(message), "time": time.time(), "peer": context.peer(),
                "client_cert": context.auth_context().get("x509_common_name")}
        req = None
        try:
            req = decode_body(message, "identity")
        except Exception as e:  # noqa: BLE001
            with self._lock:
                self.errors.append(f"{type(e).__name__}: {e}")
            self._record(info, Reply.grpc("INVALID_ARGUMENT", str(e)), None)
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"cannot decode: {e}")
        reply = self._next_reply(info)
        if reply.delay:
            time.sleep(reply.delay)
        self._record(info, reply, req)
        if reply.grpc_code not in (None, "OK"):
            code = getattr(grpc.StatusCode, reply.grpc_code)
            if reply.retry_delay is not None:
                context.set_trailing_metadata(
                    (("grpc-status-details-bin",
                      grpc_status_details(code.value[0], reply.message, reply.retry_delay)),))
            context.abort(code, reply.message)
        return reply.response_body()

    def start(self):
        grpc = self._grpc
        from concurrent import futures
        handler = grpc.method_handlers_generic_handler(GRPC_SERVICE, {
            "Export": grpc.unary_unary_rpc_method_handler(
                self._export, request_deserializer=lambda b: b, response_serializer=lambda b: b)})
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8), handlers=(handler,),
                             options=(("grpc.so_reuseport", 0),))
        if self.tls:
            creds = grpc.ssl_server_credentials(
                [(self.tls.server_key.read_bytes(), self.tls.server_cert.read_bytes())],
                root_certificates=self.tls.ca_cert.read_bytes() if self.require_client_cert else None,
                require_client_auth=self.require_client_cert)
            bound = server.add_secure_port(f"{self.host}:{self.port}", creds)
        elif self.sniff:
            bound = server.add_insecure_port(f"127.0.0.1:{self._inner_port}")
        else:
            bound = server.add_insecure_port(f"{self.host}:{self.port}")
        if not bound:
            raise OSError(f"gRPC receiver: cannot bind port {self.port}")
        server.start()
        self._server = server
        if self.sniff:
            self._inner_port = bound
            self._sniffer = _H2Sniffer(self.host, self.port, bound, self.wire_messages, self._lock)
            self._sniffer.start()
            self.port = self._sniffer.port
        else:
            self.port = bound
        return self

    def stop(self):
        if self._sniffer:
            self._sniffer.stop()
            self._sniffer = None
        if self._server:
            self._server.stop(grace=None).wait(5)
            self._server = None

    @property
    def running(self):
        return self._server is not None


# ---- TLS material ----

class TestCerts:
    """A throwaway CA, a server certificate for 127.0.0.1/localhost and a client certificate,
    made with the openssl CLI in dir (world-readable: the exporter runs unprivileged)."""

    __test__ = False  # not a pytest class

    def __init__(self, dir):
        self.dir = Path(dir)
        self.ca_cert, self.ca_key = self.dir / "ca.crt", self.dir / "ca.key"
        self.server_cert, self.server_key = self.dir / "server.crt", self.dir / "server.key"
        self.client_cert, self.client_key = self.dir / "client.crt", self.dir / "client.key"
        self.other_ca_cert = self.dir / "other-ca.crt"


def make_test_certs(dir):
    import subprocess
    d = Path(dir)
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o755)
    c = TestCerts(d)
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args):
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, cwd=d)

    run("req", "-x509", *key, "-keyout", c.ca_key, "-out", c.ca_cert, "-days", "2",
        "-subj", "/CN=ebpf-profiler test CA", "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    run("req", "-x509", *key, "-keyout", d / "other-ca.key", "-out", c.other_ca_cert, "-days", "2",
        "-subj", "/CN=some other CA", "-addext", "basicConstraints=critical,CA:TRUE")
    for name, cn, ext in (
            ("server", "localhost", "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
                                    "basicConstraints=CA:FALSE\nkeyUsage=digitalSignature\n"),
            ("client", "ebpf-profiler test client", "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n"
                                                    "keyUsage=digitalSignature\n")):
        (d / f"{name}.ext").write_text(ext)
        run("req", "-new", *key, "-keyout", d / f"{name}.key", "-out", d / f"{name}.csr", "-subj", f"/CN={cn}")
        run("x509", "-req", "-in", d / f"{name}.csr", "-CA", c.ca_cert, "-CAkey", c.ca_key,
            "-CAcreateserial", "-out", d / f"{name}.crt", "-days", "2", "-extfile", d / f"{name}.ext")
    for f in d.iterdir():
        f.chmod(0o644)
    return c


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
        problems = otlp_conformance.check(req)
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
