"""One HTTP/1.1 response as bench.stream.http1 receives it: head, framing, error body.

`Exchange` holds the parse state of one request/response on a connection: it parses the
status line and headers, undoes chunked (or Content-Length) framing and hands the payload
to the caller's event reader, with no task switch per read.

    status != 200                        -> record.error "HTTP 429: <body start>"
    a 200 encoded or not an event stream -> record.error "transport error: the response is ..."
    malformed head or framing            -> record.error "transport error: malformed ..."
    connection closed before the end     -> record.error "transport error: ..."

Chunked framing is read as RFC 9112 writes it: a chunk size is 1 to MAX_CHUNK_SIZE_DIGITS
hex digits (no sign, no prefix, no underscore), an optional `;extension` after it, the
whole size line at most MAX_CHUNK_LINE bytes, and CRLF after every chunk's data. Anything
else ends the request at once with a one-line reason: every read moves the parse forward.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from bench.failures import ErrorKind
from bench.stream.records import RequestRecord

_MAX_HEAD = 65_536
# A chunk-size line (size, extensions) longer than this is refused: a server that never
# ends it would otherwise grow the buffer without bound.
MAX_CHUNK_LINE = 4096
# 16 hex digits already say 2^64 bytes; more (or leading zeros past that) is hostile.
MAX_CHUNK_SIZE_DIGITS = 16
_BROKEN = -1  # a chunked-parse step failed the exchange
_HEX = frozenset(b"0123456789abcdefABCDEF")
# Bytes of a non-200 body read for the record's message; the rest is never read.
MAX_ERROR_BODY = 300


class EventReader(Protocol):
    def feed(self, data: bytes, now: float) -> bool:
        """Account body bytes read at `now`; True once the stream is over ([DONE], error)."""


def _informational(head: bytes) -> bool:
    """Whether a head is a 1xx interim response (101 Switching Protocols is no such thing)."""
    parts = head.split(b"\r\n", 1)[0].split(b" ", 2)
    return (
        len(parts) > 1 and len(parts[1]) == 3 and parts[1].startswith(b"1") and (parts[1] != b"101")
    )


def _whole_chunk(data: bytes) -> bytes | None:
    """The usual read: exactly one whole chunk (one SSE event), nothing left over; its data
    (None for anything else: an extension, junk or a partial chunk go the long way)."""
    nl = data.find(b"\r\n", 0, 18)
    if nl > 0 and data.endswith(b"\r\n"):
        line = data[:nl]
        # The usual size line is bare hex digits: chunk_size's answer without the call.
        size = int(line, 16) if nl <= MAX_CHUNK_SIZE_DIGITS and _HEX.issuperset(line) else None
        if size is None:
            size = chunk_size(line)
        if size and len(data) == nl + size + 4:
            return data[nl + 2 : nl + 2 + size]
    return None


def chunk_size(line: bytes) -> int | None:
    """The size of a chunk-size line (`1*HEXDIG [BWS ";" ext]`), or None if malformed.

    Python's int(x, 16) also takes a sign, `0x`, underscores and spaces: a size of -6
    would step the parse back forever, so only hex digits are read, and few of them.
    """
    semi = line.find(b";")  # not `in`: see bench.stream.sse.Events._feed_all
    size = line if semi < 0 else line[:semi].rstrip(b" \t")
    if not 0 < len(size) <= MAX_CHUNK_SIZE_DIGITS or not _HEX.issuperset(size):
        return None
    return int(size, 16)


class Exchange:
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
        "stale",
        "stale_ok",
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
        # On a kept-alive connection the server may have closed since its last answer (llama.cpp's
        # server closes after every stream although it says keep-alive): an end before any
        # byte of the answer then means the request never reached it (`stale`), not a failure.
        self.stale_ok = False
        self.stale = False

    def received(self, data: bytes, now: float) -> None:
        self.reads += 1
        if (
            self.status == 200
            and self.chunked
            and not (self.cbuf or self.data_left or self.crlf_left or self.stopped or self.complete)
        ):
            # The usual read of a stream under way: one whole chunk, one event (or a few).
            # What `_received` does with it, without the steps that cannot apply.
            payload = _whole_chunk(data)
            if payload is not None:
                if self.reader.feed(payload, now):
                    self.stopped = True
                    self._resolve()
                return
        self._received(data, now)

    def _received(self, data: bytes, now: float) -> None:
        """Any read at any point of the exchange (`received` counts it first)."""
        if not self.status:
            end = self._head_end(data)
            if end < 0:
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

    def _head_end(self, data: bytes) -> int:
        """Where the answer's head ends in what has come so far (-1: not yet, or too large).
        A 1xx (103 Early Hints) before the answer is skipped (RFC 9110 §15.2), never taken
        for it (issue 29, L1)."""
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        while end >= 0 and _informational(self.head[:end]):
            self.head = self.head[end + 4 :]
            end = self.head.find(b"\r\n\r\n")
        if end < 0 and len(self.head) > _MAX_HEAD:
            self.fail(ErrorKind.TRANSPORT, "transport error: response head too large")
        return end

    def _parse_head(self, head: bytes) -> bool:
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        try:
            self.status = int(parts[1])
        except (IndexError, ValueError):
            shown = lines[0][:80]
            self.fail(ErrorKind.TRANSPORT, f"transport error: malformed status line {shown!r}")
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
            self.fail(ErrorKind.NOT_EVENT_STREAM, f"transport error: {problem}")
            return False
        return True

    def _delimited(self, data: bytes) -> bytes:
        if self.left is not None:
            data = data[: self.left]
            self.left -= len(data)
            self.complete = self.left == 0
        return data

    def _unframe(self, data: bytes) -> bytes | None:
        """The payload of one read of a chunked body; None once the framing is broken."""
        if not (self.cbuf or self.data_left or self.crlf_left):
            whole = _whole_chunk(data)
            if whole is not None:
                return whole
        buf = self.cbuf + data if self.cbuf else data
        pos, n = 0, len(buf)
        out: list[bytes] = []
        while pos < n:
            if self.data_left < 0:
                step = self._last_chunk_end(buf, pos, n)
            elif self.data_left:
                step = self._chunk_data(buf, pos, n, out)
            elif self.crlf_left:
                step = self._chunk_crlf(buf, pos, n)
            else:
                step = self._chunk_start(buf, pos, n, out)
            if step is None:  # the rest of the buffer is an unfinished piece: wait for more
                break
            if step == _BROKEN:
                return None
            pos = step
        self.cbuf = buf[pos:] if pos < n else b""
        return out[0] if len(out) == 1 else b"".join(out)

    # Each step of the chunked parse takes buf[pos:n] and returns where the parse goes on,
    # None to wait for more bytes, or _BROKEN after failing the exchange.

    def _last_chunk_end(self, buf: bytes, pos: int, n: int) -> int | None:
        if n - pos < 2:
            return None
        self.complete = True  # trailers are not read: such a connection is not reused
        self.close = self.close or buf[pos : pos + 2] != b"\r\n"
        return n

    def _chunk_data(self, buf: bytes, pos: int, n: int, out: list[bytes]) -> int:
        take = min(self.data_left, n - pos)
        out.append(buf[pos : pos + take])
        self.data_left -= take
        if not self.data_left:
            self.crlf_left = 2
        return pos + take

    def _chunk_crlf(self, buf: bytes, pos: int, n: int) -> int:
        take = min(self.crlf_left, n - pos)
        want = b"\r\n"[2 - self.crlf_left : 2 - self.crlf_left + take]
        if buf[pos : pos + take] != want:
            return self._broken("no CRLF after a chunk")
        self.crlf_left -= take
        return pos + take

    def _chunk_start(self, buf: bytes, pos: int, n: int, out: list[bytes]) -> int | None:
        """A chunk-size line, and the whole chunk after it when it is all here."""
        nl = buf.find(b"\r\n", pos, pos + MAX_CHUNK_LINE + 2)
        if nl < 0:
            if n - pos > MAX_CHUNK_LINE:
                return self._broken(f"chunk-size line over {MAX_CHUNK_LINE} bytes (MAX_CHUNK_LINE)")
            return None
        size = chunk_size(buf[pos:nl])
        if size is None:
            return self._broken(f"chunk size {buf[pos:nl][:40].decode('latin-1')!r}")
        pos = nl + 2
        if size == 0:
            self.data_left = -1  # the last chunk: only its CRLF (or trailers) left
        elif pos + size + 2 <= n:  # the usual case: the whole chunk is here
            if buf[pos + size : pos + size + 2] != b"\r\n":
                return self._broken("no CRLF after a chunk")
            out.append(buf[pos : pos + size])
            pos += size + 2
        else:
            self.data_left = size
        return pos

    def _broken(self, why: str) -> int:
        self.fail(ErrorKind.TRANSPORT, f"transport error: malformed chunked body: {why}")
        return _BROKEN

    def _http_error(self) -> None:
        text = self.err[:MAX_ERROR_BODY].decode("utf-8", "replace").strip()
        if self.location:  # a redirect is not followed: say where it pointed
            text = f"(Location: {self.location}) {text}".strip()
        self.close = True
        self.fail(ErrorKind.HTTP_STATUS, f"HTTP {self.status}: {text}")

    def fail(self, kind: ErrorKind, message: str) -> None:
        """End the exchange; the record keeps its first failure."""
        if self.record.failure is None:
            self.record.fail(kind, message)
        self.close = True
        self._resolve()

    def eof(self, exc: Exception | None) -> None:
        self.close = True
        if self.done.done():
            return
        if self.stale_ok and self.reads == 0:
            self.stale = True  # bench.stream.http1 sends it again on a new connection
            self._resolve()
            return
        if self.status and self.status != 200:
            self._http_error()
        elif self.status and not self.chunked and self.left is None:
            self._resolve()  # body delimited by the end of the connection
        else:
            why = str(exc) if exc is not None else "connection closed by the server"
            if self.chunked:
                why += " (incomplete chunked read)"  # the stream was cut mid-body
            self.fail(ErrorKind.TRANSPORT, f"transport error: {why}")

    def _resolve(self) -> None:
        if not self.done.done():
            self.done.set_result(None)
