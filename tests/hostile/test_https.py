"""The https:// path (httpx) keeps the same named limits as bench.stream.http1's http:// path:
bounded setup bodies, bounded error bodies, no endless stream without tokens, the same
one-line reasons (issue 15). Against tests/support/hostile_server.py serving TLS on 127.0.0.1 with
a self-signed certificate made here by `openssl`.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.errors import Exit, ServerError
from bench.host import procs
from bench.stream.client import (
    MAX_ERROR_BODY,
    MAX_METRICS_BODY_BYTES,
    MAX_SETUP_BODY_BYTES,
    NO_PROGRESS_FACTOR,
    Client,
)
from bench.stream.records import RequestRecord
from tests.hostile.test_hostile_server import Ran
from tests.support.require import require

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def _openssl() -> None:
    require("openssl")  # makes the test certificates


ROOT = Path(__file__).parents[2]
TIMEOUT_S = 1.0  # the client's read time-out in these tests


class TlsHostile:
    def __init__(self, proc: subprocess.Popen[str], port: int, cert: Path) -> None:
        self.proc, self.port, self.cert = proc, port, cert

    def base(self, spec: str) -> str:
        return f"https://127.0.0.1:{self.port}/h/{spec}"


@pytest.fixture(scope="module")
def tls_hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsHostile]:
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.hostile_server", "--tls", str(cert), str(key)],
        stdout=subprocess.PIPE, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        yield TlsHostile(proc, int(proc.stdout.readline()), cert)
    finally:
        proc.stdout.close()
        procs.stop(proc, grace_s=10)


def _client(h: TlsHostile, spec: str) -> Client:
    return Client(h.base(spec), clock=time.monotonic, read_timeout_s=TIMEOUT_S,
                  ca_file=str(h.cert))  # fmt: skip


def _stream(h: TlsHostile, spec: str) -> tuple[RequestRecord, float, int]:
    """One measured request over https: (record, seconds it took, peak traced bytes)."""

    async def go() -> RequestRecord:
        client = _client(h, spec)
        assert client.read_times == "client_clock"  # https: httpx, not bench.stream.http1
        record = RequestRecord(worker=0, start_s=time.monotonic())
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 16, "stream": True}  # fmt: skip
        try:
            await asyncio.wait_for(client.stream("/v1/chat/completions", body, record), 30)
        finally:
            await client.aclose()
        return record

    tracemalloc.start()
    started = time.monotonic()
    try:
        record = asyncio.run(go())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return record, time.monotonic() - started, peak


def test_a_well_behaved_stream_over_https_is_measured(tls_hostile: TlsHostile) -> None:
    # The control: the TLS server and the client's trust work, so the faults below are theirs.
    record, took, _ = _stream(tls_hostile, "stream=ok")
    assert record.error is None and record.finished and record.tokens == 16
    assert record.http_status == 200 and took < 10


# stream misbehaviour -> the record's error over https: bench.stream.http1's words for http://
HTTPS_FAULTS = {
    "http-500": 'HTTP 500: {"error": {"message": "hostile failure"}}',
    "redirect": "HTTP 307: (Location: http://127.0.0.1:9/v1)",
    "huge-error": "HTTP 500: " + "E" * MAX_ERROR_BODY,
    "trickle": "read time-out: no token for 1 s (the server kept sending other bytes)",
    "trickle-error": "read time-out: no token for 1 s (the server kept sending other bytes)",
    "stall": "read time-out after 1 s",
    "stall-head": "read time-out after 1 s",
    "gzip": "transport error: the response is content-encoding 'gzip', not identity",
    "html": "transport error: the response is 'text/html', not text/event-stream",
    "huge-line": "malformed stream: a line over 1 MiB (MAX_SSE_LINE)",
}


@pytest.mark.parametrize("how", list(HTTPS_FAULTS))
def test_every_https_stream_fault_ends_in_bounded_time_and_memory_with_its_reason(
    tls_hostile: TlsHostile, how: str
) -> None:
    record, took, peak = _stream(tls_hostile, f"stream={how}")
    assert record.error == HTTPS_FAULTS[how], record.error
    assert not record.finished
    # Bounded time: a read time-out, or the no-progress deadline (1.25 x it), plus set-up;
    # the trickles would go on for an hour and the huge error body is 64 MiB.
    assert took < NO_PROGRESS_FACTOR * TIMEOUT_S + 3, took
    # Bounded memory: neither the 64 MiB error body nor the 4 MiB line is held whole.
    assert peak < 12 << 20, peak


# setup call -> (path, the limit it meets)
SETUP = {
    "models=huge": ("/v1/models", MAX_SETUP_BODY_BYTES, "MAX_SETUP_BODY_BYTES"),
    "models=gzip-bomb": ("/v1/models", MAX_SETUP_BODY_BYTES, "MAX_SETUP_BODY_BYTES"),
    "metrics=huge": ("/metrics", MAX_METRICS_BODY_BYTES, "MAX_METRICS_BODY_BYTES"),
    "metrics=gzip-bomb": ("/metrics", MAX_METRICS_BODY_BYTES, "MAX_METRICS_BODY_BYTES"),
}


@pytest.mark.parametrize("spec", list(SETUP))
def test_https_setup_bodies_stop_at_their_named_limit(tls_hostile: TlsHostile, spec: str) -> None:
    path, limit, name = SETUP[spec]

    async def go() -> None:
        client = _client(tls_hostile, spec)
        try:
            await client.get(path)
        finally:
            await client.aclose()

    started = time.monotonic()
    tracemalloc.start()
    try:
        with pytest.raises(ServerError) as err:
            asyncio.run(go())
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # The limit, not the body: a 64 KB gzip bomb of 64 MiB never inflates whole (httpx's own
    # decoder inflated each read at once: 144 MiB at the peak).
    assert peak < 3 * limit, peak
    assert err.value.one_line().startswith(
        f"{tls_hostile.base(spec)}{path} answered more than {limit >> 20} MiB (the limit {name}, "
        "counted after decoding)"
    )
    assert time.monotonic() - started < 20


def test_an_https_setup_call_reads_a_normal_answer(tls_hostile: TlsHostile) -> None:
    async def go() -> tuple[int, str]:
        client = _client(tls_hostile, "models=ok")
        try:
            return await client.get("/v1/models")
        finally:
            await client.aclose()

    status, text = asyncio.run(go())
    assert status == 200 and '"id": "hostile-model"' in text


# `bench run` itself over https (BENCH_CA_FILE trusts the test's certificate): the cells and
# the run say what they say over http (tests/hostile/test_hostile_server.py).
CLI_FAULTS = ("trickle", "huge-error", "redirect", "http-500", "gzip", "html")


def _bench_run(h: TlsHostile, spec: str, out: Path) -> Ran:
    from tests.hostile.test_hostile_server import SMALL, VALID, bench_run, timeout_for

    how = spec.removeprefix("stream=")
    args = VALID if how == "ok" else [*SMALL, *timeout_for(how)]
    return bench_run("--url", h.base(spec), *args, out=out,
                     env={"BENCH_CA_FILE": str(h.cert)})  # fmt: skip


def test_bench_run_measures_a_well_behaved_https_server(
    tls_hostile: TlsHostile, tmp_path: Path
) -> None:
    ran = _bench_run(tls_hostile, "stream=ok", tmp_path / "r")
    assert ran.rc == Exit.OK, ran.err[-2000:]
    assert ran.results is not None and ran.results["state"] == "complete"
    (cell,) = ran.results["cells"]
    assert cell["status"] == "valid", cell.get("reason")
    assert json.dumps(ran.results).count('"read_times": "client_clock"') == 1  # httpx's path


@pytest.mark.parametrize("how", CLI_FAULTS)
def test_bench_run_over_https_puts_each_fault_on_the_cell_in_bounded_time(
    tls_hostile: TlsHostile, tmp_path: Path, how: str
) -> None:
    ran = _bench_run(tls_hostile, f"stream={how}", tmp_path / "r")
    assert ran.rc == Exit.OK, ran.err[-2000:]
    assert "Traceback" not in ran.err and ran.took_s < 30
    assert ran.results is not None and ran.results["state"] == "complete"
    why = HTTPS_FAULTS[how][:80]
    (scout,) = ran.results["prefill"]
    (cell,) = ran.results["cells"]
    assert scout["status"] == "invalid" and scout["reason"].startswith(why), scout
    assert cell["status"] == "invalid" and cell["figures"] is None
    assert cell["reason"].startswith("1 request(s) failed, first: " + why), cell


def test_bench_run_over_https_stops_a_gzip_bomb_at_its_limit_exit_server(
    tls_hostile: TlsHostile, tmp_path: Path
) -> None:
    out = tmp_path / "r"
    ran = _bench_run(tls_hostile, "models=gzip-bomb", out)
    lines = [x for x in ran.err.splitlines() if not x.startswith("{")]
    assert ran.rc == Exit.SERVER, ran.err[-2000:]
    assert len(lines) == 1 and lines[0].startswith("bench: error: ")
    assert "/v1/models answered more than 4 MiB (the limit MAX_SETUP_BODY_BYTES" in lines[0]
    assert not out.exists()


def test_without_the_certificate_bench_run_over_https_is_one_line_exit_server(
    tls_hostile: TlsHostile, tmp_path: Path
) -> None:
    from tests.hostile.test_hostile_server import SMALL, bench_run

    ran = bench_run("--url", tls_hostile.base("stream=ok"), *SMALL, out=tmp_path / "r")
    lines = [x for x in ran.err.splitlines() if not x.startswith("{")]
    assert ran.rc == Exit.SERVER, ran.err[-2000:]
    assert len(lines) == 1 and "CERTIFICATE_VERIFY_FAILED" in lines[0], lines
