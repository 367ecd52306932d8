"""The HTTP client of the server under test: the one module that imports httpx.

    httpx.TimeoutException (read)      -> record.error "read time-out after N s"
    httpx.HTTPError (connect, protocol) -> record.error "transport error: ..."
    HTTP status != 200                 -> record.error "HTTP 429: <body start>"
    error event inside a 200 stream    -> record.error "error event: <message>"
    a chunk that is not one JSON object -> record.error "malformed chunk: ..."
    a stream with usage but no text     -> record.error "usage-only stream ..."

Request failures are data on the record; only the small JSON helpers used before the
sweep (model, version, metrics, tokenize) raise `ServerUnreachable` when nothing answers.

The per-chunk path is kept cheap: bytes are split on newlines by hand, the clock is
read once per network read (every event in that read shares the timestamp), and each
`data:` line is scanned with precompiled byte regexes instead of a JSON parse. The
scans are safe against look-alikes inside generated text because JSON escapes every
quote inside a string, so `"completion_tokens":` can only match a key.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import SecretStr

from bench import http1, rxstamp
from bench.errors import ServerUnreachable
from bench.records import RequestRecord
from bench.results import ReadTimes

Clock = Callable[[], float]

_COMPLETION_TOKENS = re.compile(rb'"completion_tokens":\s*(\d+)')
_PROMPT_TOKENS = re.compile(rb'"prompt_tokens":\s*(\d+)')
# A non-empty string value of a text field: chat content, reasoning (vLLM's reasoning
# parsers use `reasoning_content` or `reasoning`), or completions `text`.
_TEXT = re.compile(rb'"(?:content|reasoning_content|reasoning|text)":\s*"(?!")')
_ERROR = re.compile(rb'"error":|"object":\s*"error"')
_DONE = re.compile(rb"data:[ \t]*\[DONE\][ \t]*\r?\n")
# A usage count longer than this is a lie (10^12 tokens), and would overflow the record's
# 64-bit array (a count of 2^63 was a traceback) or Python's int() digit limit.
_MAX_COUNT_DIGITS = 12


_JSON_HEADERS = {"content-type": "application/json"}


class Client:
    def __init__(
        self,
        base_url: str,
        api_key: SecretStr | None = None,
        *,
        clock: Clock,
        read_timeout_s: float = 600.0,
        max_connections: int = 2048,
        transport: httpx.AsyncBaseTransport | None = None,
        raw_http1: bool = True,
    ) -> None:
        headers = {}
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
        self.base_url = base_url.rstrip("/")
        self.read_timeout_s = read_timeout_s
        self._clock = clock
        # One connection per stream: C streams must never queue behind each other.
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(read_timeout_s, connect=30.0),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=None),
            transport=transport,
        )
        # raw_http1 (plain http:// without an injected transport): the measured stream over
        # bench.http1, where every read is timed by the kernel's receive stamp and the
        # client's CPU per token is a fraction of httpx's (docs/performance.md). httpx
        # serves https, the small JSON calls, and tests that inject a transport. Through
        # httpx a read is timed when httpx hands it over, and the events of one read get
        # separate times microseconds apart, as if tokens had come that fast.
        self._raw: http1.Pool | None = None
        url = httpx.URL(self.base_url)
        if raw_http1 and transport is None and url.scheme == "http" and url.host:
            self._raw_prefix = url.raw_path.decode("ascii").rstrip("/")
            self._raw = http1.Pool(
                url.host, url.port or 80, headers, clock=clock, read_timeout_s=read_timeout_s
            )

    @property
    def read_times(self) -> ReadTimes:
        """How the measured stream times its reads (recorded with every run)."""
        stamped = self._raw is not None and rxstamp.SUPPORTED
        return "kernel_receive_stamp" if stamped else "client_clock"

    async def aclose(self) -> None:
        if self._raw is not None:
            self._raw.close()
        await self._http.aclose()

    # -- small JSON calls (before the sweep) -------------------------------------------

    async def get(self, path: str) -> tuple[int, str]:
        """GET path -> (status, body text). Unreachable server -> ServerUnreachable.

        A server that accepts but never answers fails within the read time-out (at most 30 s).
        """
        timeout = min(30.0, self.read_timeout_s)
        try:
            try:
                r = await self._http.get(path, timeout=timeout)
            except httpx.RemoteProtocolError:
                # A kept-alive connection the server closed as we reused it ("Server
                # disconnected without sending a response"): a GET is safe to send again,
                # and the pool opens a fresh connection for it.
                r = await self._http.get(path, timeout=timeout)
        except httpx.HTTPError as exc:
            raise ServerUnreachable(
                f"cannot reach {self.base_url}{path}: {_describe(exc)}",
                hint="check --url and that the server is up",
            ) from None
        return r.status_code, r.text

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        try:
            r = await self._http.post(path, json=body, timeout=120.0)
        except httpx.HTTPError as exc:
            raise ServerUnreachable(
                f"cannot reach {self.base_url}{path}: {_describe(exc)}"
            ) from None
        try:
            return r.status_code, r.json()
        except ValueError:
            return r.status_code, None

    # -- the measured stream ------------------------------------------------------------

    async def stream(self, path: str, body: dict[str, Any] | bytes, record: RequestRecord) -> None:
        """Run one streaming request, filling `record`. Never raises for request failures.

        `body` may come JSON-encoded already: a cell sends the same (up to 1.5 MB) prompt
        over and over, and encoding it once keeps that cost off the request path.
        Cancellation (end of a window) marks the record cancelled and propagates.
        """
        clock = self._clock
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        if self._raw is not None:
            await self._stream_raw(path, content, record)
            return

        async def trace(event: str, info: dict[str, Any]) -> None:
            # httpcore's hook: the request head is about to go out on an open connection
            # (a retry on a fresh connection stamps again). TTFT counts from here.
            if event.endswith("send_request_headers.started"):
                record.sent_s = clock()

        try:
            async with self._http.stream(
                "POST", path, content=content, headers=_JSON_HEADERS, extensions={"trace": trace}
            ) as response:
                record.http_status = response.status_code
                if response.status_code != 200:
                    text = (await response.aread())[:300].decode("utf-8", "replace")
                    record.error = f"HTTP {response.status_code}: {text.strip()}"
                    return
                await self._read_events(response, record, clock)
        except asyncio.CancelledError:
            record.cancelled = True
            raise
        except httpx.TimeoutException:
            record.error = f"read time-out after {self.read_timeout_s:g} s"
        except httpx.HTTPError as exc:
            record.error = f"transport error: {_describe(exc)}"
        finally:
            record.end_s = clock()
        if record.error is None and not record.cancelled:
            _check_complete(record)

    async def _stream_raw(self, path: str, content: bytes, record: RequestRecord) -> None:
        assert self._raw is not None
        try:
            await self._raw.stream(self._raw_prefix + path, content, record, _Events(record))
        except asyncio.CancelledError:
            record.cancelled = True
            raise
        finally:
            record.end_s = self._clock()
        if record.error is None and not record.cancelled:
            _check_complete(record)

    async def _read_events(
        self, response: httpx.Response, record: RequestRecord, clock: Clock
    ) -> None:
        events = _Events(record)
        # Raw bytes skip httpx's decoder chain when the body is not encoded (vLLM's is not).
        encoded = response.headers.get("content-encoding", "identity") != "identity"
        reads = response.aiter_bytes() if encoded else response.aiter_raw()
        async for data in reads:
            if events.feed(data, clock()):
                return


class _Events:
    """SSE lines of one stream -> the record; every event of one read shares `now`."""

    __slots__ = ("buf", "record")

    def __init__(self, record: RequestRecord) -> None:
        self.buf = b""
        self.record = record

    def feed(self, data: bytes, now: float) -> bool:
        """True when the stream is over: [DONE] or an error event."""
        buf = self.buf + data if self.buf else data
        record = self.record
        end = buf.rfind(b"\n") + 1
        if record.first_token_s is not None and buf.find(b'"error"', 0, end) < 0:
            # After the first token only usage counts matter, and every event of this read
            # shares `now`: one scan of the complete lines instead of one per event. Raw
            # newlines cannot occur inside JSON strings, so a line-anchored [DONE] is real,
            # and every data line must end with "}" (else the exact path below says why).
            done = _done_line(buf, end)
            stop = end if done < 0 else done
            lines = buf.count(b"\ndata:", 0, stop) + buf.startswith(b"data:")
            counts = _COMPLETION_TOKENS.findall(buf, 0, stop)
            # Every data line carries its usage count (else the exact path below looks
            # at each line: one with text and no count cannot be attributed).
            if lines == len(counts) == buf.count(b"}\n", 0, stop) + buf.count(b"}\r\n", 0, stop):
                add = record.add_usage
                for digits in counts:
                    if len(digits) > _MAX_COUNT_DIGITS:
                        record.error = _implausible(digits)
                        return True
                    add(now, int(digits))
                if done >= 0:
                    record.finished = True
                    return True
                self.buf = buf[end:]
                return False
        start = 0
        while True:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            line = buf[start:nl]
            start = nl + 1
            if not line.startswith(b"data:"):
                continue  # blank separators, comments, event: lines
            payload = line[5:].strip()
            if payload == b"[DONE]":
                record.finished = True
                return True
            if _feed(payload, record, now):
                return True
        self.buf = buf[start:]
        return False


def _feed(payload: bytes, record: RequestRecord, now: float) -> bool:
    """Account one data payload; True when the stream must stop (an error event)."""
    if not payload.endswith(b"}"):
        # A cheap well-formedness check: every chunk is one JSON object on one line.
        record.error = "malformed chunk: " + payload[:80].decode("utf-8", "replace")
        return True
    text = None
    if record.first_token_s is None:
        if _ERROR.search(payload):
            record.error = "error event: " + _error_message(payload)
            return True
        text = _TEXT.search(payload)
        if text:
            record.first_token_s = now
        if record.prompt_tokens is None:
            p = _PROMPT_TOKENS.search(payload)
            if p:
                if len(p.group(1)) > _MAX_COUNT_DIGITS:
                    record.error = _implausible(p.group(1), "prompt_tokens")
                    return True
                record.prompt_tokens = int(p.group(1))
    elif b'"error"' in payload and _ERROR.search(payload):
        record.error = "error event: " + _error_message(payload)
        return True
    m = _COMPLETION_TOKENS.search(payload)
    if m:
        digits = m.group(1)
        if len(digits) > _MAX_COUNT_DIGITS:
            record.error = _implausible(digits)
            return True
        record.add_usage(now, int(digits))
    elif text or (text is None and _TEXT.search(payload)):
        record.unattributed += 1
    return False


def _implausible(digits: bytes, name: str = "completion_tokens") -> str:
    shown = digits[:24].decode("ascii") + ("..." if len(digits) > 24 else "")
    return f"implausible usage: {name} {shown} (over {_MAX_COUNT_DIGITS} digits)"


def _done_line(buf: bytes, end: int) -> int:
    """Where the `data: [DONE]` line starts in buf[:end], or -1 (a C scan, then a check)."""
    i = buf.find(b"[DONE]", 0, end)
    while i >= 0:
        line = buf.rfind(b"\n", 0, i) + 1
        if _DONE.match(buf, line, end):
            return line
        i = buf.find(b"[DONE]", i + 6, end)
    return -1


def _check_complete(record: RequestRecord) -> None:
    if not record.finished:
        record.error = "stream ended without [DONE]"
    elif record.first_token_s is None and record.tokens > 0:
        record.error = "usage-only stream: tokens counted but no text received"
    elif record.first_token_s is not None and record.tokens == 0:
        record.error = "no usage in stream: the server must send continuous usage stats"
    elif record.tokens == 0:
        record.error = "empty stream: no token received"


def _error_message(payload: bytes) -> str:
    try:
        obj = json.loads(payload)
    except ValueError:
        return payload[:200].decode("utf-8", "replace")
    err = obj.get("error", obj) if isinstance(obj, dict) else obj
    if isinstance(err, dict):
        return str(err.get("message", err))[:200]
    return str(err)[:200]


def _describe(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
