"""A cancelled stream ends, whatever else arrives in the same turn of the loop.

The hang of issue 28: a looping worker against llama.cpp's server was cancelled at the end
of its cell's window just as the end of its body arrived. On Python 3.11
`asyncio.wait_for(ex.ended, ...)` then returned normally (CPython gh-86296), the worker
started another request, and `run_cell` waited for it for 24 minutes. This test makes the
race exact: the body's end and the cancellation land in one loop turn.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from bench.stream import http1, sse
from bench.stream.records import RequestRecord

pytestmark = pytest.mark.integration

_EVENT = (
    b'data: {"choices":[{"index":0,"delta":{"content":"x"}}],'
    b'"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}\n\n'
)


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """[DONE] at once, the body's last chunk 20 ms later (as llama.cpp's server sends it)."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + _chunk(_EVENT) + _chunk(b"data: [DONE]\n\n")
        )
        await writer.drain()
        await asyncio.sleep(0.02)
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
        pass
    finally:
        writer.close()


def test_a_cancel_that_meets_the_body_end_still_cancels(tmp_path: Path) -> None:
    async def go() -> str:
        server = await asyncio.start_server(_serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        pool = http1.Pool("127.0.0.1", port, {}, clock=time.perf_counter, read_timeout_s=10)
        record = RequestRecord(worker=0, start_s=time.perf_counter())
        task = asyncio.create_task(
            pool.stream("/v1/chat/completions", b"{}", record, sse.Events(record, None))
        )
        try:
            exchange = None
            for _ in range(2000):  # until the worker waits for the body's end after [DONE]
                await asyncio.sleep(0.001)
                live = [c.exchange for c in pool._all if c.exchange is not None]
                if live and live[0].ended is not None:
                    exchange = live[0]
                    break
            assert exchange is not None and exchange.ended is not None, "never reached [DONE]"
            exchange.ended.set_result(None)  # the body's end arrives ...
            task.cancel()  # ... in the same turn as the end of the window
            try:
                await asyncio.wait_for(asyncio.shield(task), 5)
            except asyncio.CancelledError:
                return "cancelled"
            return "returned normally: the cancellation was lost"
        finally:
            task.cancel()
            pool.close()
            server.close()
            await server.wait_closed()

    assert asyncio.run(go()) == "cancelled"
