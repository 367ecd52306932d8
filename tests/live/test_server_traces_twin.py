"""`bench run --otlp-traces-port` against the real twin exporting spans as vLLM does
(`bench twin serve --otlp-traces-endpoint`, the OpenTelemetry SDK's BatchSpanProcessor and
OTLP/HTTP exporter): the spans join the measured requests by trace id (at least 95 %), the
server's time to first token is never larger than the client's, and server_spans.jsonl is in
the signed manifest. The faults: garbage, huge, foreign and mistyped posts to the receiver
during a run (dropped and counted, the run unharmed), a server that exports nothing (said
once), and a port in use (one line, nothing measured).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from bench.bundle import manifest, seal
from bench.errors import Exit
from bench.live import span_receiver
from tests.bundle.conftest import Keys
from tests.support import otlp, procs
from tests.support.twinproc import TwinProcess, start_twin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

CLOSED = """name = "traces-closed"
seed = 7

[arrivals]
kind = "closed-count"
concurrencies = [1, 4]
requests_per_stream = {per_stream}
warmups_per_stream = 1

[lengths]
input_tokens = 64
output_tokens = 64
"""


@contextlib.contextmanager
def _tracing_twin(port: int) -> Iterator[TwinProcess]:
    endpoint = f"http://127.0.0.1:{port}/v1/traces"
    with start_twin("tiny", speed=4.0, extra_args=("--otlp-traces-endpoint", endpoint)) as t:
        yield t


def _run(twin: TwinProcess, tmp: Path, port: int, *extra: str, per_stream: int = 6) -> Any:
    spec = tmp / "closed.toml"
    spec.write_text(CLOSED.format(per_stream=per_stream))
    return procs.bench(
        "run", "--url", twin.url, "--workload", str(spec), "--out", str(tmp / "run"),
        "--otlp-traces-port", str(port), *extra, mark=procs.new_mark(),
    )  # fmt: skip


def test_the_twins_spans_join_the_measured_requests_and_are_signed(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    keys = Keys(tmp_path / "keys", "traces@example.org")
    port = procs.free_port()
    with _tracing_twin(port) as twin:
        rc, out_text, err = procs.finish(_run(twin, tmp_path, port), timeout_s=240)
    assert rc == 0, err[-3000:]
    out = tmp_path / "run"
    results = json.loads((out / "results.json").read_text())
    spans = results["server_spans"]
    measured = otlp.measured(out)
    assert len(measured) == 6 * (1 + 4) and spans["completed"] == len(measured)
    assert spans["joined"] >= 0.95 * len(measured), spans
    assert spans["dropped"] == {}, spans["dropped"]
    said = [line for line in out_text.splitlines() if line.startswith("server spans: ")]
    assert len(said) == 1 and said[0] == spans["note"]
    # Per request, from the files themselves: the server's TTFT never exceeds the client's.
    joined = otlp.joined_spans(out, measured)
    assert len(joined) == spans["joined"]
    for sample, span in joined:
        assert span["name"] == "llm_request" and span["queue_s"] >= 0
        ttft = otlp.client_ttft(sample)
        assert 0 < span["ttft_s"] <= ttft, (sample["trace_id"], span, ttft)
        assert span["completion_tokens"] == sample["tokens"] == 64
    # Per cell: a workload point is one cell; the medians are over the same requests.
    otlp.check_span_cells(spans, [6, 24])
    # Signed: the manifest lists server_spans.jsonl with its hash.
    seal.seal(out, keys.private, now=datetime.now(UTC))
    listed = {f.path: f for f in manifest.read(out).files}
    entry = listed["server_spans.jsonl"]
    assert entry.sha256 == manifest.sha256_file(out / "server_spans.jsonl")
    assert manifest.check(out, manifest.read(out)) == []
    # The report shows the server's view of each cell.
    rc, _, err = procs.finish(procs.bench("report", str(out), mark=procs.new_mark()), 240)
    assert rc == 0, err[-2000:]
    page = (out / "report.html").read_text()
    assert "<h2>Server's view</h2>" in page and "<td>point 1</td>" in page


def _wait_listening(port: int, proc: Any, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError("the run's trace receiver never listened")


def _huge_head(port: int) -> int:
    """The status a POST announcing a 64 MiB body gets before it sends a byte of it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(
            b"POST /v1/traces HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-protobuf\r\n"
            b"content-length: %d\r\n\r\n" % (64 << 20)
        )
        head = s.recv(4096).decode("latin-1")
    return int(head.split()[1])


def _foreign_export() -> bytes:
    request = ExportTraceServiceRequest()
    span: Span = request.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.name = b"\x07" * 16, b"\x01" * 8, "llm_request"
    data: bytes = request.SerializeToString()
    return data


def test_garbage_huge_and_foreign_posts_during_a_run_are_dropped_and_counted(
    tmp_path: Path,
) -> None:
    port = procs.free_port()
    url = f"http://127.0.0.1:{port}/v1/traces"
    proto = {"content-type": "application/x-protobuf"}
    with _tracing_twin(port) as twin:
        proc = _run(twin, tmp_path, port, per_stream=10)
        _wait_listening(port, proc)
        with httpx.Client(timeout=10) as http:
            garbage = http.post(url, content=b"\xff" * 64, headers=proto)
            huge_head = _huge_head(port)
            bomb = http.post(
                url, headers={**proto, "content-encoding": "gzip"},
                content=gzip.compress(b"\0" * (span_receiver.MAX_BODY_BYTES + 1)),
            )  # fmt: skip
            as_json = http.post(url, content=b"{}", headers={"content-type": "application/json"})
            elsewhere = http.post(url.replace("/v1/traces", "/v1/logs"), content=b"", headers=proto)
            foreign = http.post(url, content=_foreign_export(), headers=proto)
        rc, _, err = procs.finish(proc, timeout_s=240)
    assert rc == 0, err[-3000:]
    assert garbage.status_code == 400
    assert (huge_head, bomb.status_code) == (413, 413)
    assert (as_json.status_code, elsewhere.status_code) == (415, 404)
    assert foreign.status_code == 200
    answer = ExportTraceServiceResponse.FromString(foreign.content)
    assert answer.partial_success.rejected_spans == 1
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    spans = results["server_spans"]
    assert spans["dropped"] == {"malformed_body": 1, "refused_body": 4, "unknown_trace": 1}
    assert results["state"] == "complete"
    assert spans["joined"] >= 0.95 * spans["completed"] and spans["completed"] == 10 * 5
    assert "dropped: malformed_body 1, refused_body 4, unknown_trace 1" in spans["note"]


def test_a_server_that_exports_nothing_gives_a_run_without_spans_said_once(
    tmp_path: Path,
) -> None:
    port = procs.free_port()
    with start_twin("tiny", speed=4.0) as twin:
        proc = _run(twin, tmp_path, port, "--otlp-traces-wait", "1", per_stream=2)
        rc, out_text, err = procs.finish(proc, timeout_s=240)
    assert rc == 0, err[-3000:]
    spans = json.loads((tmp_path / "run" / "results.json").read_text())["server_spans"]
    assert spans["kept"] == 0 and spans["joined"] == 0 and spans["completed"] == 2 * 5
    said = [line for line in out_text.splitlines() if "exported no spans" in line]
    assert said == [
        "the server exported no spans (start vLLM with --otlp-traces-endpoint "
        f"http://127.0.0.1:{port}/v1/traces to see its own timings)"
    ]


def test_a_trace_port_in_use_stops_the_run_before_it_measures(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        proc = procs.bench(
            "run", "--url", f"http://127.0.0.1:{procs.free_port()}", "--out",
            str(tmp_path / "run"), "--otlp-traces-port", str(port), mark=procs.new_mark(),
        )  # fmt: skip
        rc, _, err = procs.finish(proc, timeout_s=60)
    assert rc == int(Exit.USAGE), err
    assert f"--otlp-traces-port {port}: the port is in use" in err
    assert not (tmp_path / "run" / "results.json").exists()
