"""A kept-alive connection the server has closed (llama.cpp's server says keep-alive and
closes after every stream): the next request on it is sent again on a new connection, once,
and is measured as if nothing happened; a request the server answers badly is not resent."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.run.prompts import endpoint, request_body
from bench.stream.client import Client
from bench.stream.records import RequestRecord
from tests.hostile.test_hostile_server import Hostile, start_hostile, stop_hostile

pytestmark = pytest.mark.integration


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Hostile]:
    h = start_hostile(tmp_path / "requests.jsonl")
    try:
        yield h
    finally:
        stop_hostile(h)


async def _two(url: str) -> list[RequestRecord]:
    client = Client(url, clock=time.perf_counter, read_timeout_s=5)
    assert client._raw is not None  # the measured path: bench.stream.http1
    records = []
    try:
        for worker in range(2):
            record = RequestRecord(worker, start_s=time.perf_counter())
            await client.stream(endpoint("chat"), request_body("chat", "m", "hi", 8), record)
            records.append(record)
    finally:
        await client.aclose()
    return records


def test_a_request_on_a_connection_the_server_closed_is_sent_again(hostile: Hostile) -> None:
    records = asyncio.run(_two(hostile.url("stream=stale")))
    assert [(r.error, r.tokens, r.finished) for r in records] == [(None, 8, True)] * 2
    posts = [r for r in hostile.requests() if r["method"] == "POST"]
    # first stream; the second on the kept connection (read, closed unanswered); again anew
    assert len(posts) == 3
    assert records[1].sent_s is not None and records[1].first_token_s is not None
    first_end = records[0].end_s
    assert first_end is not None and records[1].sent_s > first_end  # timed from the answered send


def test_a_connection_closed_mid_answer_is_a_failure_not_a_resend(hostile: Hostile) -> None:
    records = asyncio.run(_two(hostile.url("stream=close-mid")))
    assert all(r.error is not None and r.error.startswith("transport error") for r in records)
    assert len([r for r in hostile.requests() if r["method"] == "POST"]) == 2
