"""The measured stream on a bare socket: HTTP/1.1, chunked or delimited bodies.

Why not httpx here: profiled at 128 streams (docs/performance.md), the client spent about
three quarters of its CPU in httpx/httpcore/h11 and anyio for every network read (each
read is one SSE event or a few), against a tenth in our own SSE scan. This module does
only what a streaming POST needs, in the loop's read callback: parse the status line and
headers, undo chunked framing, and hand the payload to the caller's event reader, with
no task switch per read. httpx still serves every other request, and any URL this module
does not handle (https).

Every read is timed by the kernel's receive stamp (bench.stream.rxstamp), not by when the loop
got to it: when 128 first tokens come at once, the last is read a few milliseconds after
it arrived, and that wait is the client's, not the server's.

    connect / write / reset             -> record.error "transport error: ..."
    no byte for read_timeout_s           -> record.error "read time-out after N s"
    bytes but no token for read_timeout_s -> record.error "read time-out: no token for N s ..."
    status != 200                        -> record.error "HTTP 429: <body start>"
    malformed framing                    -> record.error "transport error: malformed ..."

Chunked framing is read as RFC 9112 writes it: a chunk size is 1 to MAX_CHUNK_SIZE_DIGITS
hex digits (no sign, no prefix, no underscore), an optional `;extension` after it, the
whole size line at most MAX_CHUNK_LINE bytes, and CRLF after every chunk's data. Anything
else ends the request at once with a one-line reason: every read moves the parse forward.

A connection goes back to the pool only after the terminating zero-length chunk (or the
whole Content-Length) of a 200 response has arrived; anything else closes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any, Protocol

from bench.stream import rxstamp
from bench.stream.records import RequestRecord

_MAX_HEAD = 65_536
# A chunk-size line (size, extensions) longer than this is refused: a server that never
# ends it would otherwise grow the buffer without bound.
MAX_CHUNK_LINE = 4096
# 16 hex digits already say 2^64 bytes; more (or leading zeros past that) is hostile.
MAX_CHUNK_SIZE_DIGITS = 16
_HEX = frozenset(b"0123456789abcdefABCDEF")
# Bytes of a non-200 body read for the record's message; the rest is never read.
MAX_ERROR_BODY = 300
_BODY_END_WAIT_S = 0.05
_READ_SIZE = 65_536


class EventReader(Protocol):
    def feed(self, data: bytes, now: float) -> bool:
        """Account body bytes read at `now`; True once the stream is over ([DONE], error)."""


def chunk_size(line: bytes) -> int | None:
    """The size of a chunk-size line (`1*HEXDIG [BWS ";" ext]`), or None if malformed.

    Python's int(x, 16) also takes a sign, `0x`, underscores and spaces: a size of -6
    would step the parse back forever, so only hex digits are read, and few of them.
    """
    size = line.split(b";", 1)[0] if b";" in line else line
    if b";" in line:
        size = size.rstrip(b" \t")
    if not 0 < len(size) <= MAX_CHUNK_SIZE_DIGITS or not _HEX.issuperset(size):
        return None
    return int(size, 16)


class _Exchange:
    """One request/response on a connection; the parse state lives here."""

    __slots__ = (
        "cbuf",
        "chunked",
        "close",
        "complete",
        "crlf_left",
        "data_left",
        "done",
        "ended",
        "err",
        "head",
        "left",
        "location",
        "reader",
        "reads",
        "record",
        "status",
        "stopped",
    )  # fmt: skip

    def __init__(self, record: RequestRecord, reader: EventReader):
        self.record = record
        self.reader = reader
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.ended: asyncio.Future[None] | None = None  # awaited body end, after [DONE]
        self.head = b""
        self.status = 0  # 0 until the head is parsed
        self.chunked = False
        self.left: int | None = None  # Content-Length bytes still to come
        self.cbuf = b""
        self.data_left = 0
        self.crlf_left = 0
        self.complete = False  # the body's end arrived (connection reusable)
        self.close = False
        self.err = b""
        self.location = ""  # of a redirect, shown in its error
        self.reads = 0
        self.stopped = False  # the reader has seen the end of the stream

    def received(self, data: bytes, now: float) -> None:
        self.reads += 1
        if not self.status:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                if len(self.head) > _MAX_HEAD:
                    self.fail("transport error: response head too large")
                return
            data = self.head[end + 4 :]
            if not self._parse_head(self.head[:end]):
                return
            self.head = b""
            if not data and self.left != 0:
                return
        payload = self._unframe(data) if self.chunked else self._delimited(data)
        if payload is None:
            return
        if self.status != 200:
            self.err += payload
            if self.complete or len(self.err) >= MAX_ERROR_BODY:
                self._http_error()
            return
        if payload and not self.stopped and self.reader.feed(payload, now):
            self.stopped = True
            self._resolve()
        if self.complete:
            self._resolve()
            if self.ended is not None and not self.ended.done():
                self.ended.set_result(None)

    def _parse_head(self, head: bytes) -> bool:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            self.status = int(parts[1])
        except (IndexError, ValueError):
            self.fail(f"transport error: malformed status line {lines[0][:80]!r}")
            return False
        problem = None
        for line in lines[1:]:
            name, _, raw = line.partition(":")
            name, value = name.strip().lower(), raw.strip().lower()
            if name == "transfer-encoding" and "chunked" in value:
                self.chunked = True
            elif name == "content-length" and value.isdigit() and len(value) <= 18:
                self.left = int(value)
            elif name == "connection" and value == "close":
                self.close = True
            elif name == "location":
                self.location = raw.strip()[:200]
            elif name == "content-encoding" and value not in ("", "identity"):
                # We ask for identity: an encoded stream would only fail at its end.
                problem = f"the response is content-encoding {value[:40]!r}, not identity"
            elif name == "content-type" and value and not value.startswith("text/event-stream"):
                problem = f"the response is {value[:60]!r}, not text/event-stream"
        self.record.http_status = self.status
        if self.chunked:
            self.left = None
        if problem is not None and self.status == 200:
            self.fail(f"transport error: {problem}")
            return False
        return True

    def _delimited(self, data: bytes) -> bytes:
        if self.left is not None:
            data = data[: self.left]
            self.left -= len(data)
            self.complete = self.left == 0
        return data

    def _unframe(self, data: bytes) -> bytes | None:
        if not (self.cbuf or self.data_left or self.crlf_left):
            # The usual read: exactly one whole chunk (one SSE event), nothing left over.
            nl = data.find(b"\r\n", 0, 18)
            if nl > 0 and data.endswith(b"\r\n"):
                size = chunk_size(data[:nl])  # None (an extension, junk): the long way says
                if size and len(data) == nl + size + 4:
                    return data[nl + 2 : nl + 2 + size]
        buf = self.cbuf + data if self.cbuf else data
        pos, n = 0, len(buf)
        out: list[bytes] = []
        while pos < n:
            if self.data_left < 0:
                if n - pos < 2:
                    break
                self.complete = True  # trailers are not read: such a connection is not reused
                self.close = self.close or buf[pos : pos + 2] != b"\r\n"
                pos = n
            elif self.data_left:
                take = min(self.data_left, n - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self.data_left -= take
                if not self.data_left:
                    self.crlf_left = 2
            elif self.crlf_left:
                take = min(self.crlf_left, n - pos)
                want = b"\r\n"[2 - self.crlf_left : 2 - self.crlf_left + take]
                if buf[pos : pos + take] != want:
                    self.fail("transport error: malformed chunked body: no CRLF after a chunk")
                    return None
                pos += take
                self.crlf_left -= take
            else:
                nl = buf.find(b"\r\n", pos, pos + MAX_CHUNK_LINE + 2)
                if nl < 0:
                    if n - pos > MAX_CHUNK_LINE:
                        self.fail(
                            "transport error: malformed chunked body: chunk-size line over "
                            f"{MAX_CHUNK_LINE} bytes (MAX_CHUNK_LINE)"
                        )
                        return None
                    break
                size = chunk_size(buf[pos:nl])
                if size is None:
                    shown = buf[pos:nl][:40].decode("latin-1")
                    self.fail(f"transport error: malformed chunked body: chunk size {shown!r}")
                    return None
                pos = nl + 2
                if size == 0:
                    self.data_left = -1  # the last chunk: only its CRLF (or trailers) left
                    continue
                if pos + size + 2 <= n:  # the usual case: the whole chunk is here
                    if buf[pos + size : pos + size + 2] != b"\r\n":
                        self.fail("transport error: malformed chunked body: no CRLF after a chunk")
                        return None
                    out.append(buf[pos : pos + size])
                    pos += size + 2
                else:
                    self.data_left = size
        self.cbuf = buf[pos:] if pos < n else b""
        return out[0] if len(out) == 1 else b"".join(out)

    def _http_error(self) -> None:
        text = self.err[:MAX_ERROR_BODY].decode("utf-8", "replace").strip()
        if self.location:  # a redirect is not followed: say where it pointed
            text = f"(Location: {self.location}) {text}".strip()
        self.close = True
        self.fail(f"HTTP {self.status}: {text}")

    def fail(self, error: str) -> None:
        if self.record.error is None:
            self.record.error = error
        self.close = True
        self._resolve()

    def eof(self, exc: Exception | None) -> None:
        self.close = True
        if self.done.done():
            return
        if self.status and self.status != 200:
            self._http_error()
        elif self.status and not self.chunked and self.left is None:
            self._resolve()  # body delimited by the end of the connection
        else:
            why = str(exc) if exc is not None else "connection closed by the server"
            if self.chunked:
                why += " (incomplete chunked read)"  # the stream was cut mid-body
            self.fail(f"transport error: {why}")

    def _resolve(self) -> None:
        if not self.done.done():
            self.done.set_result(None)


def _progress(ex: _Exchange) -> tuple[object, ...]:
    r = ex.record
    return (r.first_token_s is not None, r.tokens, r.unattributed, r.finished, ex.complete)


class _Connection:
    """One socket, read with `recvmsg` so that every read carries the time the kernel
    received it (bench.stream.rxstamp), however late the loop gets to it."""

    def __init__(self, sock: socket.socket, clock: Callable[[], float]) -> None:
        self.sock = sock
        self.fd = sock.fileno()
        self.clock = clock
        self.loop = asyncio.get_running_loop()
        self.exchange: _Exchange | None = None
        self.broken = False
        self.on_idle: Callable[[_Connection], None] | None = None
        self._out = bytearray()  # what the socket has not taken yet
        self.loop.add_reader(self.fd, self._readable)

    def write(self, data: bytes) -> None:
        if self.broken:
            self._lost(None)
            return
        if not self._out:
            try:
                sent = self.sock.send(data)
            except (BlockingIOError, InterruptedError):
                sent = 0
            except OSError as exc:
                self._lost(exc)
                return
            if sent == len(data):
                return
            self.loop.add_writer(self.fd, self._writable)
            data = data[sent:]
        self._out += data

    def _writable(self) -> None:
        try:
            sent = self.sock.send(self._out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        del self._out[:sent]
        if not self._out:
            self.loop.remove_writer(self.fd)

    def _readable(self) -> None:
        try:
            data, now = rxstamp.read(self.sock, _READ_SIZE, self.clock)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        if not data:
            self._lost(None)
            return
        ex = self.exchange
        if ex is None:
            self.abort()  # bytes nobody asked for: the connection cannot be trusted
            return
        ex.received(data, now)
        if ex.done.done() and ex.complete and not ex.close:
            self.exchange = None
            if self.on_idle is not None:
                self.on_idle(self)
        elif ex.close and ex.done.done():
            self.abort()

    def _lost(self, exc: Exception | None) -> None:
        self.abort()
        if self.exchange is not None:
            self.exchange.eof(exc)

    def abort(self) -> None:
        if self.broken:
            return
        self.broken = True
        self.loop.remove_reader(self.fd)
        if self._out:
            self.loop.remove_writer(self.fd)
            self._out.clear()
        self.sock.close()


class Pool:
    """Connections to one host:port for streaming POSTs; idle ones are reused."""

    def __init__(
        self,
        host: str,
        port: int,
        headers: dict[str, str],
        *,
        clock: Callable[[], float],
        read_timeout_s: float,
        connect_timeout_s: float = 30.0,
    ) -> None:
        self.host, self.port = host, port
        self.clock = clock
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s = connect_timeout_s
        fixed = {"host": f"{host}:{port}", "content-type": "application/json"}
        fixed.update(accept="text/event-stream", **{"accept-encoding": "identity"})
        fixed.update({k.lower(): v for k, v in headers.items()})
        self._head = "".join(f"{k}: {v}\r\n" for k, v in fixed.items()).encode("latin-1")
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()
        self._addr: tuple[Any, ...] | None = None  # getaddrinfo's first answer, once
        self._keeper = rxstamp.keeper()  # stamping is on before the first connection

    async def stream(
        self, path: str, body: bytes, record: RequestRecord, reader: EventReader
    ) -> None:
        """POST body to path, feeding the response to reader. Fills record; cancellable."""
        conn = await self._acquire(record)
        if conn is None:
            return
        ex = _Exchange(record, reader)
        conn.exchange = ex
        record.sent_s = self.clock()  # the write goes to the socket now (TTFT starts here)
        conn.write(
            b"POST %b HTTP/1.1\r\n%bcontent-length: %d\r\n\r\n%b"
            % (path.encode("latin-1"), self._head, len(body), body)
        )
        loop = asyncio.get_running_loop()
        watchdog = loop.call_later(
            self.read_timeout_s / 4, self._watch, ex, conn, _progress(ex), ex.reads, 0
        )
        try:
            await ex.done
            if ex.stopped and not ex.complete and not ex.close and record.error is None:
                # [DONE] came; the body's last chunk is on its way. Waiting for it (it
                # follows at once) lets a looping worker reuse this connection.
                ex.ended = loop.create_future()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(ex.ended, _BODY_END_WAIT_S)
        except asyncio.CancelledError:
            conn.abort()
            raise
        finally:
            watchdog.cancel()
            # After [DONE] the end chunk may still be on its way: `data_received` pools the
            # connection when it comes. Anything else that did not end cleanly is closed.
            clean = ex.complete and not ex.close
            if not clean and (ex.close or not ex.stopped or record.error is not None):
                conn.abort()
            if conn.broken:
                self._all.discard(conn)

    def _watch(
        self, ex: _Exchange, conn: _Connection, mark: tuple[object, ...], reads: int, ticks: int
    ) -> None:
        """Every quarter of the time-out: has the stream moved on? Moving on is a token (or
        text, or the end), not just any byte: a server that trickles keep-alive comments or
        a byte at a time is as stuck as a silent one, and is stopped after about the same
        time. `ticks` packs two counts: quarters without progress (low byte), without a read."""
        if ex.done.done():
            return
        quiet, silent = ticks & 0xFF, ticks >> 8
        now = _progress(ex)
        quiet = quiet + 1 if now == mark else 0
        silent = silent + 1 if ex.reads == reads else 0
        t = f"{self.read_timeout_s:g} s"
        if silent >= 4:
            ex.fail(f"read time-out after {t}")
        elif quiet >= 5:
            ex.fail(f"read time-out: no token for {t} (the server kept sending other bytes)")
        else:
            loop = asyncio.get_running_loop()
            ticks = min(quiet, 0xFF) | silent << 8
            loop.call_later(self.read_timeout_s / 4, self._watch, ex, conn, now, ex.reads, ticks)
            return
        conn.abort()

    async def _acquire(self, record: RequestRecord) -> _Connection | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.broken:
                return conn
            self._all.discard(conn)
        loop = asyncio.get_running_loop()
        try:
            sock = await asyncio.wait_for(self._connect(loop), self.connect_timeout_s)
        except (OSError, TimeoutError, UnicodeError) as exc:  # UnicodeError: a bad host name
            why = str(exc) or type(exc).__name__
            record.error = f"transport error: cannot connect to {self.host}:{self.port}: {why}"
            return None
        conn = _Connection(sock, self.clock)
        conn.on_idle = self._idle.append
        self._all.add(conn)
        return conn

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> socket.socket:
        if self._addr is None:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            if not infos:
                raise OSError(f"no address for {self.host}")
            self._addr = infos[0]
        family, kind, proto, _, addr = self._addr
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            rxstamp.enable(sock)
            await loop.sock_connect(sock, addr)
        except BaseException:
            sock.close()
            raise
        return sock

    def close(self) -> None:
        if self._keeper is not None:
            self._keeper.close()
        for conn in self._all:
            conn.abort()
        self._all.clear()
        self._idle.clear()
