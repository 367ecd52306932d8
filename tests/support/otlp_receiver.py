"""A real OTLP/HTTP metrics receiver for the tests: a threaded http.server on 127.0.0.1 that
decodes each POST /v1/metrics with opentelemetry-proto (ExportMetricsServiceRequest) and
answers as a collector does (200, an ExportMetricsServiceResponse). And one that accepts
connections and never answers, counting how many are open at once.

Independent of bench.live: what the tests compare with results.json is what came over the
wire, decoded by OpenTelemetry's own protobuf classes.
"""

from __future__ import annotations

import contextlib
import gzip
import http.server
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

Attrs = dict[str, str | int | float | bool]


@dataclass(frozen=True)
class HistogramPoint:
    """One histogram data point as received: its metric's name and unit, its attributes,
    count and sum, its scope and resource attributes."""

    name: str
    unit: str
    attributes: Attrs
    count: int
    sum: float
    time_unix_nano: int
    temporality: int
    resource: Attrs


def _value(v: AnyValue) -> str | int | float | bool:
    kind = v.WhichOneof("value")
    if kind == "string_value":
        return v.string_value
    if kind == "int_value":
        return v.int_value
    if kind == "double_value":
        return v.double_value
    if kind == "bool_value":
        return v.bool_value
    raise AssertionError(f"unexpected attribute value kind {kind}")


def decode(body: bytes) -> list[HistogramPoint]:
    request = ExportMetricsServiceRequest()
    request.ParseFromString(body)
    points = []
    for rm in request.resource_metrics:
        resource = {a.key: _value(a.value) for a in rm.resource.attributes}
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                assert m.WhichOneof("data") == "histogram", (m.name, m.WhichOneof("data"))
                for p in m.histogram.data_points:
                    points.append(
                        HistogramPoint(
                            name=m.name, unit=m.unit,
                            attributes={a.key: _value(a.value) for a in p.attributes},
                            count=p.count, sum=p.sum, time_unix_nano=p.time_unix_nano,
                            temporality=m.histogram.aggregation_temporality, resource=resource,
                        )
                    )  # fmt: skip
    return points


@dataclass
class OtlpReceiver:
    url: str = ""
    requests: list[list[HistogramPoint]] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def latest(self) -> list[HistogramPoint]:
        """The last point received of each (metric, attribute set): with cumulative
        temporality, the run's totals once its last export arrived."""
        last: dict[tuple[str, frozenset[tuple[str, object]]], HistogramPoint] = {}
        with self.lock:
            for batch in self.requests:
                for p in batch:
                    key = (p.name, frozenset(p.attributes.items()))
                    if key not in last or p.time_unix_nano >= last[key].time_unix_nano:
                        last[key] = p
        return list(last.values())


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


@contextlib.contextmanager
def otlp_receiver() -> Iterator[OtlpReceiver]:
    """A receiver at `url` (http://127.0.0.1:PORT, no path) while the block runs."""
    receiver = OtlpReceiver()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            if self.headers.get("content-encoding") == "gzip":
                body = gzip.decompress(body)
            points = decode(body)
            with receiver.lock:
                receiver.requests.append(points)
                receiver.paths.append(self.path)
            answer = ExportMetricsServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("content-type", "application/x-protobuf")
            self.send_header("content-length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

    server = _Server(("127.0.0.1", 0), Handler)
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


@dataclass
class SilentReceiver:
    """Accepts every connection, reads what comes, never answers a byte."""

    url: str = ""
    accepted: int = 0
    most_open: int = 0  # connections open at once, at most
    bytes_read: int = 0


@contextlib.contextmanager
def silent_receiver() -> Iterator[SilentReceiver]:
    found = SilentReceiver()
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    listener.setblocking(False)
    found.url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    stop = threading.Event()
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    open_socks: set[socket.socket] = set()

    def loop() -> None:
        while not stop.is_set():
            for key, _ in sel.select(timeout=0.1):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                if sock is listener:
                    conn, _ = listener.accept()
                    conn.setblocking(False)
                    sel.register(conn, selectors.EVENT_READ)
                    open_socks.add(conn)
                    found.accepted += 1
                    found.most_open = max(found.most_open, len(open_socks))
                    continue
                try:
                    data = sock.recv(65536)
                except OSError:
                    data = b""
                found.bytes_read += len(data)
                if not data:  # the client gave up on it
                    sel.unregister(sock)
                    open_socks.discard(sock)
                    sock.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        stop.set()
        thread.join(10)
        for s in open_socks:
            s.close()
        sel.close()
        listener.close()


def wait_for_points(receiver: OtlpReceiver, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if receiver.requests:
            return
        time.sleep(0.05)
    raise AssertionError(f"no OTLP export arrived within {timeout_s} s")
