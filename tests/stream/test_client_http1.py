"""The client's measured stream over bench.stream.http1 against the twin as a real process."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time

import pytest
from pydantic import SecretStr

from bench.run import prompts
from bench.stream.client import Client
from bench.stream.records import RequestRecord
from tests.support.twinproc import start_twin

pytestmark = pytest.mark.integration
KEY = "sk-perf-test"
PATH = prompts.endpoint("chat")


def _body(max_tokens: int) -> dict[str, object]:
    return prompts.request_body("chat", "tiny", "hello there", max_tokens)


async def _streams(url: str, n: int, max_tokens: int, key: str = KEY) -> list[RequestRecord]:
    client = Client(url, SecretStr(key), clock=time.perf_counter, raw_http1=True)
    assert client._raw is not None  # plain http:// goes over bench.stream.http1
    records = []
    try:
        for _ in range(n):
            rec = RequestRecord(worker=0, start_s=time.perf_counter())
            await client.stream(PATH, _body(max_tokens), rec)
            records.append(rec)
        connections = len(client._raw._all)
    finally:
        await client.aclose()
    if all(r.error is None for r in records):
        assert connections == 1  # keep-alive: one connection for every request
    return records


def test_streams_count_usage_tokens_and_reuse_the_connection() -> None:
    with start_twin("tiny", api_key=KEY) as twin:
        records = asyncio.run(_streams(twin.url, 3, 40))
    for r in records:
        assert r.error is None and r.finished and not r.cancelled
        assert r.tokens == 40  # from usage: the tiny profile sends 1-3 tokens per chunk
        assert r.http_status == 200 and r.prompt_tokens and r.prompt_tokens > 0
        assert r.first_token_s is not None and r.end_s is not None
        assert r.start_s < r.first_token_s <= r.chunk_s[-1] <= r.end_s


def test_wrong_key_and_server_errors_are_records() -> None:
    with start_twin("tiny", api_key=KEY) as twin:
        client = Client(twin.url, SecretStr("wrong"), clock=time.perf_counter, raw_http1=True)
        rec = RequestRecord(worker=0, start_s=0.0)

        async def go() -> None:
            await client.stream(PATH, _body(5), rec)
            await client.aclose()

        asyncio.run(go())
    assert rec.http_status == 401 and rec.error is not None and rec.error.startswith("HTTP 401: ")
    with start_twin("tiny", extra_args=["--fault-error-fraction", "1"]) as twin:
        (rec,) = asyncio.run(_streams(twin.url, 1, 5, key="x"))
    assert rec.error is not None and rec.error.startswith("HTTP 500: ")


def test_cut_stream_is_a_failure() -> None:
    with start_twin("tiny", extra_args=["--fault-cut-fraction", "1"]) as twin:
        client = Client(twin.url, clock=time.perf_counter, raw_http1=True)
        rec = RequestRecord(worker=0, start_s=0.0)

        async def go() -> None:
            await client.stream(PATH, _body(200), rec)
            await client.aclose()

        asyncio.run(go())
    assert rec.error is not None and rec.error.startswith("transport error")
    assert not rec.finished and 0 < rec.tokens < 200


def test_cancellation_marks_the_record_and_propagates() -> None:
    with start_twin("tiny") as twin:
        client = Client(twin.url, clock=time.perf_counter, raw_http1=True)
        rec = RequestRecord(worker=0, start_s=0.0)

        async def go() -> bool:
            task = asyncio.create_task(client.stream(PATH, _body(3000), rec))
            while not rec.chunk_s:
                await asyncio.sleep(0.01)
            task.cancel()
            cancelled = False
            with contextlib.suppress(asyncio.CancelledError):
                await task
                return False
            cancelled = True
            await client.aclose()
            return cancelled

        assert asyncio.run(go())
    assert rec.cancelled and rec.error is None and rec.end_s is not None and rec.tokens > 0


def test_a_read_is_timed_when_its_bytes_arrived_not_when_the_loop_got_to_it() -> None:
    """The loop is kept busy for 0.3 s while the answer arrives: the first token's time is
    still the moment it reached this host (the kernel's stamp), to within milliseconds."""
    listener = socket.create_server(("127.0.0.1", 0))
    sent_at: list[float] = []

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            got = b""
            while b"\r\n\r\n" not in got:
                got += conn.recv(65536)
            usage = b'"usage":{"completion_tokens":1}'
            event = b'data: {"choices":[{"delta":{"content":"hi"}}],%b}\n\n' % usage
            body = b"%x\r\n%b\r\n" % (len(event), event)
            head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n"
            sent_at.append(time.time())
            conn.sendall(head + body)
            # The rest comes well after the loop is free again: read together with the first
            # token (a loaded machine that delays the read past it), the kernel's stamp would
            # be the last segment's.
            time.sleep(1.5)
            done = b"data: [DONE]\n\n"
            conn.sendall(b"%x\r\n%b\r\n0\r\n\r\n" % (len(done), done))

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    host, port = listener.getsockname()
    client = Client(f"http://{host}:{port}", clock=time.time, raw_http1=True)
    rec = RequestRecord(worker=0, start_s=time.time())

    async def go() -> None:
        task = asyncio.create_task(client.stream(PATH, _body(1), rec))
        while rec.sent_s is None:
            await asyncio.sleep(0)
        time.sleep(0.3)  # the loop is busy elsewhere while the first token arrives
        await task
        await client.aclose()

    with listener:
        asyncio.run(go())
        server.join(5)
    assert rec.error is None and rec.first_token_s is not None and rec.sent_s is not None
    assert abs(rec.first_token_s - sent_at[0]) < 0.02
    assert rec.first_token_s - rec.sent_s < 0.1  # the 0.3 s the loop was busy is not in it
