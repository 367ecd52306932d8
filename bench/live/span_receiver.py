"""`bench run --otlp-traces-port N`: the run's own OTLP/HTTP receiver of the server's spans.

It serves `POST /v1/traces` (OTLP/HTTP, protobuf `ExportTraceServiceRequest`, identity or
gzip) on HOST:N (`--otlp-traces-host`, 127.0.0.1 by default), bound before the server is
asked anything, and keeps each span whose trace id is one the run sent (the client's
bench.stream.traceparent.SentTraces) as a line of server_spans.jsonl in the run directory
(bench.live.server_span; lines that come before the directory exists wait in memory, under
the same bounds). vLLM exports there when started with
`--otlp-traces-endpoint http://HOST:N/v1/traces` and
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf (its default protocol is gRPC).

Its own thread: a ThreadingHTTPServer whose serving loop and handlers run beside the
run's event loop, so neither waits on the other; what they share is the GIL. Measured
(2 cores, niced, loaded): upb parses an export of 512 spans (257 KB, the SDK's largest
batch) in 0.19 ms, and making its lines takes about 31 us a span (16 ms), with the GIL
handed back every 5 ms; a measured stream's token times are the kernel's receive stamps
(bench.stream.rxstamp), which a late loop turn does not move.

Bounds (bytes from outside are hostile):

    MAX_CONNECTIONS        handled at once; one more is closed unanswered, counted
    READ_TIMEOUT_S         for any one read of a request; BODY_DEADLINE_S for its whole body
                           (a trickling sender is cut), counted
    MAX_BODY_BYTES         a body larger (by content-length, or once inflated) -> 413
    no content-length      -> 411 (chunked bodies are not read)
    another content type   -> 415 (OTLP/JSON is not read: its ids are hex, not protobuf's
                           base64, so protobuf's JSON reader would mis-read them), or
                           another encoding than gzip -> 415, another path -> 404
    not protobuf           -> 400, counted `malformed_body`
    per span, per body     bench.live.span_decode's caps (malformed, oversized, over_cap)
    an unknown trace id    dropped, counted `unknown_trace`
    MAX_SPANS_PER_TRACE    spans kept per trace id (vLLM sends one per request)
    MAX_SPANS_PER_RUN      spans kept in all; past it, counted `over_cap`

A 200 answers every export read, with OTLP's partial_success saying how many spans were
rejected and why. Counts go into results.json (`server_spans.dropped`) and are said once at
the end of the run (bench.live.span_join).
"""

from __future__ import annotations

import errno
import http.server
import json
import socket
import threading
import time
import zlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

from bench import run_files
from bench.errors import DiskError, UsageError
from bench.live import span_decode
from bench.live.server_span import ServerSpan
from bench.stream.traceparent import SentTraces

TRACES_PATH = "/v1/traces"
MAX_BODY_BYTES = 4 << 20
MAX_CONNECTIONS = 8
READ_TIMEOUT_S = 5.0
BODY_DEADLINE_S = 10.0
MAX_SPANS_PER_TRACE = 4
MAX_SPANS_PER_RUN = 1_000_000
PROTOBUF = "application/x-protobuf"
_READ = 1 << 16


@dataclass
class SpanCounts:
    """What the receiver did with what it got (results.json's `server_spans`)."""

    exports: int = 0  # bodies read and answered 200
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, why: str, n: int = 1) -> None:
        if n:
            self.dropped[why] = self.dropped.get(why, 0) + n


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    receiver: SpanReceiver

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self.receiver.slots.acquire(blocking=False):
            self.receiver.count("refused_body")
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.receiver.slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.receiver.count("refused_body")  # a connection that broke: nothing to say


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    timeout = READ_TIMEOUT_S  # each read of the socket (StreamRequestHandler sets it)

    def log_message(self, format: str, *args: object) -> None:
        pass  # the counts say what happened, once

    def do_POST(self) -> None:
        rx = self.server.receiver
        problem = self._refusal()
        if problem is not None:
            status, why = problem
            rx.count("refused_body")
            self._answer(status, why.encode(), "text/plain; charset=utf-8")
            return
        length = int(self.headers["content-length"])
        body = self._body(length)
        if body is None:
            rx.count("refused_body")
            self.close_connection = True
            return
        if self._encoding() == "gzip":
            body = _inflate(body)
            if body is None:
                rx.count("refused_body")
                self._answer(413, b"inflated body over the size limit, or not gzip", "text/plain")
                return
        try:
            decoded = span_decode.decode(body)
        except span_decode.MalformedBody as exc:
            rx.count("malformed_body")
            self._answer(400, f"not an ExportTraceServiceRequest: {exc}".encode(), "text/plain")
            return
        rejected, why = rx.take(decoded)
        self._answer(200, span_decode.response(rejected, why), PROTOBUF)

    def _refusal(self) -> tuple[int, str] | None:
        if urlsplit(self.path).path != TRACES_PATH:
            return 404, f"only POST {TRACES_PATH} is served here"
        ctype = (self.headers.get("content-type") or "").split(";")[0].strip().lower()
        if ctype != PROTOBUF:
            return 415, f"only {PROTOBUF} (OTLP/HTTP protobuf) is read"
        if self._encoding() not in ("identity", "gzip"):
            return 415, "only identity or gzip content-encoding is read"
        raw = (self.headers.get("content-length") or "").strip()
        if not raw.isdigit() or len(raw) > 12:
            return 411, "a content-length is required"
        if int(raw) > MAX_BODY_BYTES:
            return 413, f"a body over {MAX_BODY_BYTES} bytes is not read"
        return None

    def _encoding(self) -> str:
        return (self.headers.get("content-encoding") or "identity").strip().lower()

    def _body(self, length: int) -> bytes | None:
        """The body, read within BODY_DEADLINE_S; None if it did not all come in time."""
        deadline = time.monotonic() + BODY_DEADLINE_S
        parts: list[bytes] = []
        left = length
        while left > 0:
            if time.monotonic() > deadline:
                return None
            try:
                chunk = self.rfile.read1(min(left, _READ))
            except OSError:  # the read time-out, a reset
                return None
            if not chunk:
                return None
            parts.append(chunk)
            left -= len(chunk)
        return b"".join(parts)

    def _answer(self, status: int, body: bytes, ctype: str) -> None:
        try:
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the exporter went away: nothing to tell it
        self.close_connection = True


def _inflate(body: bytes) -> bytes | None:
    """A gzip body inflated to at most MAX_BODY_BYTES; None past it, or not gzip."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, MAX_BODY_BYTES + 1)
    except zlib.error:
        return None
    if len(out) > MAX_BODY_BYTES or d.unconsumed_tail or not d.eof:
        return None
    return out


class SpanReceiver:
    """What the receiver keeps (`take`, `write_to`, `wait_for`: no socket), and its
    listening socket from `listen` until `close` (module docstring)."""

    def __init__(self, sent: SentTraces) -> None:
        self.sent = sent
        self.counts = SpanCounts()
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self.endpoint = ""
        self.write_error: str | None = None
        self._cond = threading.Condition()
        self._per_trace: dict[str, int] = {}
        self._pending: list[str] = []  # lines before the run directory exists
        self._file: IO[str] | None = None
        self._path: Path | None = None
        self._closed = False
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def listen(self, host: str, port: int) -> None:
        """Bind HOST:PORT and serve from a thread of its own; a port in use is one line."""
        try:
            server_class = _Server6 if ":" in host else _Server
            server = server_class((host, port), _Handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise UsageError(
                    f"--otlp-traces-port {port}: the port is in use on {host}",
                    hint="choose another --otlp-traces-port",
                ) from None
            raise UsageError(
                f"--otlp-traces-port {port}: cannot listen on {host}: {exc.strerror or exc}"
            ) from None
        server.receiver = self
        self._server = server
        shown = f"[{host}]" if ":" in host else host
        self.endpoint = f"http://{shown}:{server.server_address[1]}{TRACES_PATH}"
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2},
            name="bench-otlp-traces", daemon=True,
        )  # fmt: skip
        self._thread.start()

    def count(self, why: str, n: int = 1) -> None:
        with self._cond:
            self.counts.drop(why, n)

    def take(self, decoded: span_decode.Decoded) -> tuple[int, str]:
        """Keep the spans of one export that are the run's; (rejected, why) for the answer."""
        lines: list[str] = []
        with self._cond:
            if self._closed:
                self.counts.drop("late", len(decoded.spans) + decoded.dropped)
                return len(decoded.spans) + decoded.dropped, "the run is over"
            c = self.counts
            c.exports += 1
            c.drop("malformed_span", decoded.malformed)
            c.drop("oversized_span", decoded.oversized)
            c.drop("over_cap", decoded.over_cap)
            rejected = decoded.dropped
            for span in decoded.spans:
                why = self._refuse(span)
                if why is not None:
                    c.drop(why)
                    rejected += 1
                    continue
                self._per_trace[span.trace_id] = self._per_trace.get(span.trace_id, 0) + 1
                c.kept += 1
                lines.append(json.dumps(span.to_json(), separators=(",", ":")) + "\n")
            self._write(lines)
            self._cond.notify_all()
        return rejected, "malformed, oversized, duplicate or unknown trace ids" if rejected else ""

    def _refuse(self, span: ServerSpan) -> str | None:
        if span.trace_id not in self.sent:
            return "unknown_trace"
        if self._per_trace.get(span.trace_id, 0) >= MAX_SPANS_PER_TRACE:
            return "duplicate"
        if self.counts.kept >= MAX_SPANS_PER_RUN:
            return "over_cap"
        return None

    def _write(self, lines: list[str]) -> None:
        """Lines to server_spans.jsonl (held under the lock), or kept until it is there."""
        if self._file is None:
            if self._path is None:
                self._pending += lines
            return
        try:
            self._file.write("".join(lines))
            self._file.flush()
        except OSError as exc:
            self.write_error = f"cannot write {self._path}: {exc.strerror or exc}"
            self._file.close()
            self._file = None

    def write_to(self, rundir: Path) -> None:
        """From now on kept spans go to rundir/server_spans.jsonl (appended: a resumed run
        adds to it), with those that came before."""
        path = rundir / run_files.SERVER_SPANS
        with self._cond:
            try:
                self._file = path.open("a", encoding="utf-8")
            except OSError as exc:
                raise DiskError(f"cannot write {path}: {exc.strerror or exc}") from None
            self._path = path
            pending, self._pending = self._pending, []
            self._write(pending)

    def with_span(self, trace_ids: Iterable[str]) -> set[str]:
        """Those of `trace_ids` that have a span kept."""
        with self._cond:
            return {t for t in trace_ids if t in self._per_trace}

    def wait_for(self, trace_ids: set[str], bound_s: float) -> None:
        """Until every one of `trace_ids` has a span, or `bound_s` passed (a server exports
        in batches: vLLM's every 5 s)."""
        deadline = time.monotonic() + bound_s
        missing = set(trace_ids)
        with self._cond:
            while True:
                missing = {t for t in missing if t not in self._per_trace}
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return
                self._cond.wait(min(left, 0.5))

    def close(self) -> SpanCounts:
        """Stop listening (within the serving loop's 0.2 s poll) and close the file."""
        with self._cond:
            if self._closed:
                return self.counts
            self._closed = True
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread.join(5.0)
        with self._cond:
            if self._file is not None:
                self._file.close()
                self._file = None
        return self.counts
