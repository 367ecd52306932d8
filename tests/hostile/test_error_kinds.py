"""Every kind of request failure (bench.failures.ErrorKind), each made by the condition
that causes it: the real client against the hostile server (real sockets, the measured
stream over bench.stream.http1) and against scripted streams (the httpx path), and `bench
run` counting a cell's failures by kind in results.json and samples.jsonl."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.errors import Exit
from bench.failures import ErrorKind
from bench.stream.client import Client
from bench.stream.records import RequestRecord
from tests.hostile.test_hostile_server import (
    SMALL,
    STREAM_FAULTS,
    Hostile,
    bench_run,
    start_hostile,
    stop_hostile,
)
from tests.support.scripted import DONE, ScriptedClock, chat_chunk, transport

pytestmark = pytest.mark.integration

PATH = "/v1/chat/completions"
BODY = {"model": "m", "messages": [], "stream": True, "max_tokens": 16}

# the hostile server's misbehaviour -> the kind of failure it makes
HOSTILE_KINDS = {
    "http-500": ErrorKind.HTTP_STATUS,
    "redirect": ErrorKind.HTTP_STATUS,
    "stall": ErrorKind.TIMEOUT,
    "stall-head": ErrorKind.TIMEOUT,
    "trickle": ErrorKind.STALLED,
    "neg-chunk": ErrorKind.TRANSPORT,
    "no-crlf": ErrorKind.TRANSPORT,
    "bad-status-line": ErrorKind.TRANSPORT,
    "early-close": ErrorKind.TRANSPORT,
    "close-mid": ErrorKind.TRANSPORT,
    "html": ErrorKind.NOT_EVENT_STREAM,
    "gzip": ErrorKind.NOT_EVENT_STREAM,
    "malformed-json": ErrorKind.MALFORMED,
    "huge-line": ErrorKind.MALFORMED,
    "lying-usage": ErrorKind.IMPLAUSIBLE_USAGE,
}

# a stream the server sends whole -> the kind of failure it makes
SCRIPTED_KINDS: dict[str, tuple[list[bytes], ErrorKind]] = {
    "error-event": (
        [chat_chunk("a", completion_tokens=1), b'data: {"error": {"message": "died"}}\n\n', DONE],
        ErrorKind.ERROR_EVENT,
    ),
    "usage-only": ([chat_chunk(completion_tokens=1), DONE], ErrorKind.USAGE_ONLY),
    "no-usage": ([chat_chunk("a"), chat_chunk("b"), DONE], ErrorKind.NO_USAGE),
    "no-done": ([chat_chunk("a", completion_tokens=1)], ErrorKind.NO_DONE),
    "empty": ([chat_chunk(role=True, completion_tokens=0), DONE], ErrorKind.EMPTY),
}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hostile]:
    """The hostile server of tests/hostile/test_hostile_server.py, one for this module."""
    h = start_hostile(tmp_path_factory.mktemp("kinds") / "requests.jsonl")
    try:
        yield h
    finally:
        stop_hostile(h)


async def _stream(client: Client) -> RequestRecord:
    record = RequestRecord(worker=0, start_s=time.perf_counter())
    try:
        await client.stream(PATH, BODY, record)
    finally:
        await client.aclose()
    return record


@pytest.mark.parametrize("how", list(HOSTILE_KINDS))
def test_each_misbehaviour_of_a_real_server_is_its_kind_with_its_message(
    hostile: Hostile, how: str
) -> None:
    client = Client(hostile.url(f"stream={how}"), clock=time.perf_counter, read_timeout_s=1.0)
    assert client._raw is not None  # the measured stream over bench.stream.http1
    started = time.monotonic()
    record = asyncio.run(_stream(client))
    assert time.monotonic() - started < 10
    assert record.failure is not None, record
    assert record.failure.kind is HOSTILE_KINDS[how]
    # The message is what it always was: the cell's reason and samples.jsonl's `error`.
    assert record.error == record.failure.message == str(record.failure)
    assert record.error.startswith(STREAM_FAULTS[how].rstrip(".")), record.error


def test_a_server_that_is_not_there_is_a_transport_failure() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    client = Client(f"http://127.0.0.1:{port}", clock=time.perf_counter, read_timeout_s=1.0)
    record = asyncio.run(_stream(client))
    assert record.failure is not None and record.failure.kind is ErrorKind.TRANSPORT
    assert record.error is not None
    assert record.error.startswith(f"transport error: cannot connect to 127.0.0.1:{port}: ")


@pytest.mark.parametrize("how", list(SCRIPTED_KINDS))
def test_each_bad_stream_over_httpx_is_its_kind(how: str) -> None:
    parts, kind = SCRIPTED_KINDS[how]
    client = Client("http://s", clock=ScriptedClock(), transport=transport(parts))
    record = asyncio.run(_stream(client))
    assert record.failure is not None and record.failure.kind is kind, record.error
    assert record.http_status == 200 and not record.cancelled


def test_the_same_bytes_fail_the_same_way_over_httpx_as_over_bench_http1(
    hostile: Hostile,
) -> None:
    """What the SSE scan refuses does not depend on the transport that carried it."""
    over_raw = asyncio.run(
        _stream(Client(hostile.url("stream=malformed-json"), clock=time.perf_counter))
    )
    over_httpx = asyncio.run(
        _stream(
            Client("http://s", clock=ScriptedClock(), transport=transport([b"data: {oops\n\n"]))
        )
    )
    assert over_raw.failure == over_httpx.failure
    assert over_raw.failure is not None and over_raw.failure.kind is ErrorKind.MALFORMED


def test_every_kind_has_a_condition_that_makes_it() -> None:
    made = set(HOSTILE_KINDS.values()) | {kind for _, kind in SCRIPTED_KINDS.values()}
    assert made == set(ErrorKind)


def test_bench_run_counts_a_cells_failures_by_kind_and_names_each_in_samples(
    hostile: Hostile, tmp_path: Path
) -> None:
    ran = bench_run("--url", hostile.url("stream=http-500"), *SMALL, out=tmp_path / "r")
    assert ran.rc == Exit.OK, ran.err[-2000:]
    assert ran.results is not None
    (cell,) = ran.results["cells"]
    assert cell["status"] == "invalid"
    assert cell["failures_by_kind"] == {"http_status": 1}
    assert cell["reason"] == (
        '1 request(s) failed, first: HTTP 500: {"error": {"message": "hostile failure"}}'
    )
    lines = [json.loads(x) for x in (tmp_path / "r" / "samples.jsonl").read_text().splitlines()]
    assert {(x["phase"], x["error_kind"]) for x in lines} == {
        ("prefill", "http_status"),
        ("decode", "http_status"),
    }
    assert all(x["error"].startswith("HTTP 500: ") for x in lines)
