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

The response itself (status, head, chunked framing, an error body) is parsed by
bench.stream.response, which gives the reasons for what it refuses.

A connection goes back to the pool only after the terminating zero-length chunk (or the
whole Content-Length) of a 200 response has arrived; anything else closes it.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

from bench.failures import ErrorKind
from bench.stream import rxstamp
from bench.stream.records import RequestRecord
from bench.stream.response import EventReader, Exchange

_BODY_END_WAIT_S = 0.05
_READ_SIZE = 65_536


def _progress(ex: Exchange) -> tuple[object, ...]:
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
        self.exchange: Exchange | None = None
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
        if not (ex.complete or ex.close):
            return  # the usual read: the exchange goes on
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
        self,
        path: str,
        body: bytes,
        record: RequestRecord,
        reader: EventReader,
        *,
        traceparent: str | None = None,
    ) -> None:
        """POST body to path, feeding the response to reader. Fills record; cancellable.
        `traceparent`: the request's W3C trace context header (bench.stream.traceparent).

        A pooled connection the server closed while it sat idle (the end came before any
        byte of the answer) is dropped and the request sent once more on a new connection:
        the server never saw it (RFC 9112, 9.3.1), and the record's clock restarts."""
        extra = b"" if traceparent is None else b"traceparent: %b\r\n" % traceparent.encode()
        if await self._attempt(path, body, record, reader, extra, fresh=False):
            await self._attempt(path, body, record, reader, extra, fresh=True)

    async def _attempt(
        self,
        path: str,
        body: bytes,
        record: RequestRecord,
        reader: EventReader,
        extra: bytes,
        *,
        fresh: bool,
    ) -> bool:
        """One send; True when it went to a stale kept-alive connection (nothing recorded)."""
        conn, reused = await self._acquire(record, fresh=fresh)
        if conn is None:
            return False
        ex = Exchange(record, reader)
        ex.stale_ok = reused
        conn.exchange = ex
        record.sent_s = self.clock()  # the write goes to the socket now (TTFT starts here)
        conn.write(
            b"POST %b HTTP/1.1\r\n%b%bcontent-length: %d\r\n\r\n%b"
            % (path.encode("latin-1"), self._head, extra, len(body), body)
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
                # asyncio.wait, not wait_for: on Python 3.11 wait_for swallows a
                # cancellation that comes as the future completes (CPython gh-86296), and a
                # looping worker that lost the end of its cell's window ran on for good.
                ex.ended = loop.create_future()
                await asyncio.wait({ex.ended}, timeout=_BODY_END_WAIT_S)
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
        return ex.stale

    def _watch(
        self, ex: Exchange, conn: _Connection, mark: tuple[object, ...], reads: int, ticks: int
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
            ex.fail(ErrorKind.TIMEOUT, f"read time-out after {t}")
        elif quiet >= 5:
            why = f"read time-out: no token for {t} (the server kept sending other bytes)"
            ex.fail(ErrorKind.STALLED, why)
        else:
            loop = asyncio.get_running_loop()
            ticks = min(quiet, 0xFF) | silent << 8
            loop.call_later(self.read_timeout_s / 4, self._watch, ex, conn, now, ex.reads, ticks)
            return
        conn.abort()

    async def _acquire(
        self, record: RequestRecord, *, fresh: bool
    ) -> tuple[_Connection | None, bool]:
        """A connection for one request, and whether it was kept alive from an earlier one
        (`fresh`: a new one whatever the pool holds)."""
        while self._idle and not fresh:
            conn = self._idle.pop()
            if not conn.broken:
                return conn, True
            self._all.discard(conn)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout_s):  # not wait_for: see above
                sock = await self._connect(loop)
        except (OSError, TimeoutError, UnicodeError) as exc:  # UnicodeError: a bad host name
            why = str(exc) or type(exc).__name__
            where = f"{self.host}:{self.port}"
            record.fail(ErrorKind.TRANSPORT, f"transport error: cannot connect to {where}: {why}")
            return None, False
        conn = _Connection(sock, self.clock)
        conn.on_idle = self._idle.append
        self._all.add(conn)
        return conn, False

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
