"""A small HTTP/1.1 server on asyncio: keep-alive, Content-Length bodies, chunked responses.

The twin's hot path is writing SSE chunks to many streams at once, so responses go
straight to the transport (no framework, no per-chunk awaits). A connection handles one
request at a time; when the peer goes away mid-response, `on_lost` lets the handler
abort its engine request.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any

from bench.stream import rxstamp

MAX_HEADER_BYTES = 65_536
MAX_BODY_BYTES = 256 * 1024 * 1024


@dataclass
class HttpRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    keep_alive: bool = True
    started_at: float = 0.0  # loop time when its first byte arrived


Handler = Callable[[HttpRequest, "TwinConnection"], Coroutine[Any, Any, None]]


@dataclass
class TwinConnection:
    transport: asyncio.Transport
    closed: bool = False
    on_lost: list[Callable[[], None]] = field(default_factory=list)

    def write(self, data: bytes) -> None:
        if not self.closed:
            self.transport.write(data)

    def respond(
        self,
        status: int,
        body: bytes,
        content_type: str = "application/json",
        extra_headers: dict[str, str] | None = None,
    ) -> None:
        head = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", f"content-type: {content_type}"]
        head.append(f"content-length: {len(body)}")
        for k, v in (extra_headers or {}).items():
            head.append(f"{k}: {v}")
        self.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)

    def respond_json(
        self, status: int, obj: Any, extra_headers: dict[str, str] | None = None
    ) -> None:
        self.respond(status, json.dumps(obj).encode(), extra_headers=extra_headers)

    def start_chunked(self, content_type: str = "text/event-stream") -> None:
        self.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: "
            + content_type.encode()
            + b"\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        )

    def chunk(self, data: bytes) -> None:
        if data and not self.closed:
            self.transport.write(b"%x\r\n%b\r\n" % (len(data), data))

    def end_chunked(self) -> None:
        self.write(b"0\r\n\r\n")

    def cut(self) -> None:
        """Drop the connection without finishing the response (fault injection)."""
        if not self.closed:
            self.transport.abort()


class _Protocol(asyncio.Protocol):
    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._buf = bytearray()
        self._busy = False
        self._conn: TwinConnection | None = None
        self._scanned = 0
        self._started_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._conn = TwinConnection(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._conn is not None:
            self._conn.closed = True
            callbacks, self._conn.on_lost = self._conn.on_lost, []
            for cb in callbacks:
                cb()

    def data_received(self, data: bytes) -> None:
        if not self._buf:
            # A request begins when its first bytes reached this host (a client's TTFT
            # clock starts when it writes the request), not when the loop got to them nor
            # when the connection was accepted: a connection may sit open and idle first.
            self._started_at = rxstamp.to_clock(rxstamp.take(), asyncio.get_running_loop().time)
        self._buf += data
        self._next()

    def _next(self) -> None:
        conn = self._conn
        if self._busy or conn is None or conn.closed:
            return
        # Resume the search where the last one stopped: a large body arrives in many pieces.
        end = self._buf.find(b"\r\n\r\n", max(0, self._scanned - 3))
        if end < 0:
            self._scanned = len(self._buf)
            if len(self._buf) > MAX_HEADER_BYTES:
                self._fail(431, "request headers too large")
            return
        self._scanned = end
        try:
            req, length = _parse_head(bytes(self._buf[:end]))
        except ValueError as exc:
            self._fail(400, str(exc))
            return
        if length > MAX_BODY_BYTES:
            self._fail(413, "request body too large")
            return
        if len(self._buf) < end + 4 + length:
            return
        req.body = bytes(self._buf[end + 4 : end + 4 + length])
        req.started_at = self._started_at
        del self._buf[: end + 4 + length]
        self._scanned = 0
        self._started_at = asyncio.get_running_loop().time()  # a pipelined request, if any
        self._busy = True
        task = asyncio.get_running_loop().create_task(self._handler(req, conn))
        task.add_done_callback(functools.partial(self._done, req=req))

    def _done(self, task: asyncio.Task[None], *, req: HttpRequest) -> None:
        self._busy = False
        conn = self._conn
        if conn is None:
            return
        conn.on_lost = []
        if not task.cancelled() and task.exception() is not None and not conn.closed:
            conn.transport.abort()
            return
        if not req.keep_alive:
            conn.transport.close()
            return
        self._next()

    def _fail(self, status: int, message: str) -> None:
        assert self._conn is not None
        body = {
            "error": {"message": message, "type": "BadRequestError", "param": None, "code": status}
        }
        self._conn.respond(status, json.dumps(body).encode(), extra_headers={"connection": "close"})
        self._conn.transport.close()


def _parse_head(head: bytes) -> tuple[HttpRequest, int]:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError("malformed HTTP request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise ValueError("malformed HTTP header line")
        headers[name.strip().lower()] = value.strip()
    if "chunked" in headers.get("transfer-encoding", "").lower():
        raise ValueError("chunked request bodies are not supported; send content-length")
    try:
        length = int(headers.get("content-length", "0"))
    except ValueError:
        raise ValueError("malformed content-length header") from None
    keep = headers.get("connection", "").lower() != "close" and parts[2] == "HTTP/1.1"
    path = parts[1].split("?", 1)[0]
    return HttpRequest(parts[0].upper(), path, headers, b"", keep), length


async def serve(handler: Handler, host: str, port: int) -> asyncio.Server:
    loop = asyncio.get_running_loop()
    sock = rxstamp.listen(host, port, backlog=1024)
    return await loop.create_server(lambda: _Protocol(handler), sock=sock, backlog=1024)
