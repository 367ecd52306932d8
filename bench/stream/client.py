"""The HTTP client of the server under test: the one module that imports httpx.

    httpx.TimeoutException (read)      -> record.error "read time-out after N s"
    httpx.HTTPError (connect, protocol) -> record.error "transport error: ..."
    HTTP status != 200                 -> record.error "HTTP 429: <body start>"
    error event inside a 200 stream    -> record.error "error event: <message>"
    a chunk that is not one JSON object -> record.error "malformed chunk: ..."
    a stream with usage but no text     -> record.error "usage-only stream ..."

Request failures are data on the record; only the small JSON helpers used before the
sweep (model, version, metrics, tokenize) raise `ServerUnreachable` when nothing answers.

Limits on what a server may send (a hostile one must not exhaust memory or time):

    MAX_SETUP_BODY_BYTES    body of /v1/models, /version, /tokenize (decoded: a gzip bomb
                            stops here too)                         -> ServerError, exit 3
    MAX_METRICS_BODY_BYTES  body of one /metrics scrape             -> ServerError, exit 3
    MAX_SSE_LINE            one line of the measured stream         -> record.error
    MAX_ERROR_BODY          bytes of a non-200 stream's body read for its message (the
                            rest is never read)                     -> record.error "HTTP N: ..."
    a small call's whole answer takes at most twice its read time-out (a server that
    trickles bytes cannot hold a run forever)
    a measured stream that makes no progress (no token, no text, no end) for
    NO_PROGRESS_FACTOR x its read time-out ends, even while bytes keep coming
                                            -> record.error "read time-out: no token for N s"

The measured stream goes over bench.stream.http1 for http:// and over httpx for https://; both
apply the limits above with the same messages, ask for an identity-encoded event stream and
refuse at the head a 200 that is encoded or not text/event-stream (an encoded stream would
only fail at its end, or inflate in memory).

Secrets: a URL with credentials (http://user:pass@host) is refused (`check_url`): the API
key comes from VLLM_API_KEY or BENCH_API_KEY only. For a loopback server no proxy from
the environment is used (HTTP_PROXY, ALL_PROXY): the small calls go the way the measured
stream goes (bench.stream.http1 never uses a proxy), so a proxy never sees the key.

The per-chunk path is kept cheap: bytes are split on newlines by hand, the clock is
read once per network read (every event in that read shares the timestamp), and each
`data:` line is scanned with precompiled byte regexes instead of a JSON parse. The
scans are safe against look-alikes inside generated text because JSON escapes every
quote inside a string, so `"completion_tokens":` can only match a key.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import ssl
import zlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
from pydantic import SecretStr

from bench.errors import ServerError, ServerUnreachable, UsageError
from bench.results import ReadTimes
from bench.stream import http1, rxstamp, tokens
from bench.stream.records import RequestRecord

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
# The measured stream's request, as bench.stream.http1 sends it.
_STREAM_HEADERS = {
    "content-type": "application/json",
    "accept": "text/event-stream",
    "accept-encoding": "identity",
}
_MIB = 1 << 20
MAX_SETUP_BODY_BYTES = 4 * _MIB
MAX_METRICS_BODY_BYTES = 16 * _MIB
MAX_SSE_LINE = 1 * _MIB
MAX_ERROR_BODY = http1.MAX_ERROR_BODY
# bench.stream.http1's watchdog ends a stream after five quarters of the read time-out without
# progress; the httpx path uses the same deadline (a silent server meets httpx's own read
# time-out first, as it meets the watchdog's "no byte" rule first on bench.stream.http1).
NO_PROGRESS_FACTOR = 1.25


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost: the server is on this machine."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")


def check_url(url: str) -> str:
    """The server's base URL, checked: http(s), a host that can be a name, no credentials.

    A password in the URL would be written to results.json, the report, the plan line and
    the signed bundle: it is refused, naming the environment variable to use instead.
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, UnicodeError, ValueError):
        raise UsageError(
            "--url is not a valid URL", hint="write e.g. http://127.0.0.1:8000"
        ) from None
    if parsed.userinfo:
        shown = parsed.copy_with(username=None, password=None)
        raise UsageError(
            f"--url must not carry a user name or password (given for {shown})",
            hint="drop USER:PASSWORD@ from it and give the API key in VLLM_API_KEY "
            "(or BENCH_API_KEY) instead",
        )
    if parsed.scheme not in ("http", "https"):
        raise UsageError(
            f"--url must be http:// or https://, not {parsed.scheme or 'no scheme'}",
            hint="write e.g. http://127.0.0.1:8000",
        )
    host = parsed.host
    literal = host.startswith("[") or ":" in host
    try:
        ipaddress.ip_address(host.strip("[]"))
        literal = True
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if not host or (
        not literal and (len(host) > 253 or not all(_LABEL.match(label) for label in labels))
    ):
        raise UsageError(
            f"--url has no valid host name ({host[:80]!r})",
            hint="a host name is dot-separated labels of letters, digits and '-'",
        )
    return url.rstrip("/")


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
        ca_file: str | None = None,
    ) -> None:
        """`ca_file`: a PEM file of the CA (or self-signed certificate) an https:// server
        is checked against, instead of the system's (a server with a private CA)."""
        headers = {}
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
        self.base_url = check_url(base_url)
        self.read_timeout_s = read_timeout_s
        # Set once the engine is known: how chunks without usage are counted.
        self.counting: tokens.Counting | None = None
        self._clock = clock
        url = httpx.URL(self.base_url)
        # One connection per stream: C streams must never queue behind each other.
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(read_timeout_s, connect=30.0),
            limits=httpx.Limits(max_connections=max_connections, max_keepalive_connections=None),
            transport=transport,
            verify=ssl.create_default_context(cafile=ca_file) if ca_file else True,
            # The environment's proxies never carry a request (and its key) to a server on
            # this machine: the same rule as the measured stream on bench.stream.http1.
            trust_env=not is_loopback(url.host),
        )
        # raw_http1 (plain http:// without an injected transport): the measured stream over
        # bench.stream.http1, where every read is timed by the kernel's receive stamp and the
        # client's CPU per token is a fraction of httpx's (docs/performance.md). httpx
        # serves https, the small JSON calls, and tests that inject a transport. Through
        # httpx a read is timed when httpx hands it over, and the events of one read get
        # separate times microseconds apart, as if tokens had come that fast.
        self._raw: http1.Pool | None = None
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
        limit = MAX_METRICS_BODY_BYTES if path == "/metrics" else MAX_SETUP_BODY_BYTES
        try:
            try:
                status, body, charset = await self._small("GET", path, timeout, limit)
            except httpx.RemoteProtocolError:
                # A kept-alive connection the server closed as we reused it ("Server
                # disconnected without sending a response"): a GET is safe to send again,
                # and the pool opens a fresh connection for it.
                status, body, charset = await self._small("GET", path, timeout, limit)
        except httpx.HTTPError as exc:
            raise ServerUnreachable(
                f"cannot reach {self.base_url}{path}: {_describe(exc)}",
                hint="check --url and that the server is up",
            ) from None
        return status, _decode(body, charset)

    async def post_json(self, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        try:
            status, raw, _ = await self._small(
                "POST", path, 120.0, MAX_SETUP_BODY_BYTES, json.dumps(body).encode()
            )
        except httpx.HTTPError as exc:
            raise ServerUnreachable(
                f"cannot reach {self.base_url}{path}: {_describe(exc)}"
            ) from None
        try:
            return status, json.loads(raw)
        except (ValueError, RecursionError):
            return status, None

    async def _small(
        self, method: str, path: str, timeout: float, limit: int, content: bytes | None = None
    ) -> tuple[int, bytes, str | None]:
        """One small request, its (decoded) body read up to `limit` bytes and within twice
        `timeout` in all; over either, a one-line ServerError / time-out. A gzip or deflate
        body is inflated here at most `limit` bytes at a time (httpx would inflate each read
        whole: a 64 KB bomb was 64 MiB at once); other encodings are refused."""
        headers = {**_JSON_HEADERS} if content is not None else {}
        headers["accept-encoding"] = "gzip, deflate"
        got = bytearray()
        try:
            async with asyncio.timeout(2 * timeout):
                async with self._http.stream(
                    method, path, content=content, headers=headers, timeout=timeout
                ) as r:
                    if r.is_stream_consumed:
                        # A response made whole in memory (httpx.MockTransport's): httpx
                        # has decoded it already.
                        inflate, parts = None, _once(r.content)
                    else:
                        inflate = _inflater(r.headers.get("content-encoding", ""))
                        parts = r.aiter_raw()
                    async for part in parts:
                        if inflate is None:
                            got += part
                        else:
                            data = inflate.decompress(part, limit + 1 - len(got))
                            got += data
                            while inflate.unconsumed_tail and len(got) <= limit:
                                tail = inflate.unconsumed_tail
                                got += inflate.decompress(tail, limit + 1 - len(got))
                        if len(got) > limit:
                            name = (
                                "MAX_METRICS_BODY_BYTES"
                                if path == "/metrics"
                                else ("MAX_SETUP_BODY_BYTES")
                            )
                            raise ServerError(
                                f"{self.base_url}{path} answered more than {limit // _MIB} MiB "
                                f"(the limit {name}, counted after decoding)",
                                hint="is --url a vLLM-compatible server?",
                            )
                    return r.status_code, bytes(got), r.charset_encoding
        except TimeoutError:
            raise httpx.ReadTimeout(f"no whole answer within {2 * timeout:g} s") from None
        except (zlib.error, _NotDecoded) as exc:
            raise ServerError(
                f"{self.base_url}{path} sent a body that does not decode: {exc}"
            ) from None

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

        stuck_s = NO_PROGRESS_FACTOR * self.read_timeout_s
        try:
            # The deadline moves on with every token (bench.stream.http1's watchdog rule): bytes
            # that are not progress (keep-alive comments, a trickled head or error body)
            # cannot hold a request past it.
            async with asyncio.timeout(stuck_s) as deadline:
                async with self._http.stream(
                    "POST", path, content=content, headers=_STREAM_HEADERS,
                    extensions={"trace": trace},
                ) as response:  # fmt: skip
                    record.http_status = response.status_code
                    if response.status_code != 200:
                        record.error = await _http_error(response)
                        return
                    problem = _not_an_event_stream(response.headers)
                    if problem is not None:
                        record.error = f"transport error: {problem}"
                        return
                    await self._read_events(response, record, clock, deadline, stuck_s)
        except asyncio.CancelledError:
            record.cancelled = True
            raise
        except TimeoutError:
            record.error = (
                f"read time-out: no token for {self.read_timeout_s:g} s "
                "(the server kept sending other bytes)"
            )
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
            await self._raw.stream(
                self._raw_prefix + path, content, record, _Events(record, self.counting)
            )
        except asyncio.CancelledError:
            record.cancelled = True
            raise
        finally:
            record.end_s = self._clock()
        if record.error is None and not record.cancelled:
            _check_complete(record)

    async def _read_events(
        self,
        response: httpx.Response,
        record: RequestRecord,
        clock: Clock,
        deadline: asyncio.Timeout,
        stuck_s: float,
    ) -> None:
        events = _Events(record, self.counting)
        loop = asyncio.get_running_loop()
        mark = _progress(record)
        # Raw bytes: the body is identity-encoded (checked at the head), no decoder runs.
        async for data in response.aiter_raw():
            if events.feed(data, clock()):
                return
            now = _progress(record)
            if now != mark:
                mark = now
                deadline.reschedule(loop.time() + stuck_s)


async def _once(data: bytes) -> AsyncIterator[bytes]:
    yield data


class _NotDecoded(Exception):
    pass


def _inflater(encoding: str) -> Any:
    """A zlib decompressor for a gzip or deflate body, None for identity; else refused."""
    encoding = encoding.strip().lower()
    if encoding in ("", "identity"):
        return None
    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise _NotDecoded(f"content-encoding {encoding[:40]!r} (asked for gzip, deflate or none)")


def _progress(record: RequestRecord) -> tuple[object, ...]:
    """What moves on when a stream makes progress (bench.stream.http1's watchdog reads the same)."""
    return (record.first_token_s is not None, record.tokens, record.unattributed)


def _not_an_event_stream(headers: httpx.Headers) -> str | None:
    """Why a 200's head is no measured stream (bench.stream.http1 says the same), or None."""
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        return f"the response is content-encoding {encoding[:40]!r}, not identity"
    ctype = headers.get("content-type", "").strip().lower()
    if ctype and not ctype.startswith("text/event-stream"):
        return f"the response is {ctype[:60]!r}, not text/event-stream"
    return None


async def _http_error(response: httpx.Response) -> str:
    """`HTTP N: <body start>` from at most MAX_ERROR_BODY bytes (a redirect: where to).

    The body's end is never read: leaving a response before its end closes the connection
    instead of pooling it, as bench.stream.http1 closes one after an error (a server that closes
    it without saying so would otherwise fail the next request, reusing it at once)."""
    got = bytearray()
    length = response.headers.get("content-length", "")
    expected = int(length) if length.isdigit() and len(length) <= 18 else None
    parts = _once(response.content) if response.is_stream_consumed else response.aiter_raw()
    if expected == 0:
        parts = _once(b"")
    async for part in parts:  # (consumed already: a response made whole in memory)
        got += part
        if len(got) >= MAX_ERROR_BODY or (expected is not None and len(got) >= expected):
            break
    text = bytes(got[:MAX_ERROR_BODY]).decode("utf-8", "replace").strip()
    location = response.headers.get("location")
    if location:  # a redirect is not followed: say where it pointed
        text = f"(Location: {location.strip()[:200]}) {text}".strip()
    return f"HTTP {response.status_code}: {text}"


class _Events:
    """SSE lines of one stream -> the record; every event of one read shares `now`."""

    __slots__ = ("counting", "held", "parts", "record")

    def __init__(self, record: RequestRecord, counting: tokens.Counting | None = None) -> None:
        self.parts: list[bytes] = []  # the start of a line not ended yet
        self.held = 0  # its length
        self.record = record
        self.counting = counting

    def feed(self, data: bytes, now: float) -> bool:
        """True when the stream is over: [DONE] or an error event."""
        if self.parts:
            if b"\n" not in data:
                # Still inside one line: keep the piece, join once at its end (joining
                # at every read made one long line cost quadratic time).
                return self._hold(data)
            buf = b"".join(self.parts) + data
            self.parts, self.held = [], 0
        else:
            buf = data
        record = self.record
        end = buf.rfind(b"\n") + 1
        if (
            record.first_token_s is not None
            and record.prompt_tokens is not None
            and buf.find(b'"error"', 0, end) < 0
        ):
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
                return self._hold(buf[end:])
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
            if _feed(payload, record, now, self.counting):
                return True
        return self._hold(buf[start:])

    def _hold(self, rest: bytes) -> bool:
        if not rest:
            return False
        self.parts.append(rest)
        self.held += len(rest)
        if self.held > MAX_SSE_LINE:
            self.record.error = (
                f"malformed stream: a line over {MAX_SSE_LINE // _MIB} MiB (MAX_SSE_LINE)"
            )
            return True
        return False


def _feed(
    payload: bytes, record: RequestRecord, now: float, counting: tokens.Counting | None = None
) -> bool:
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
    elif b'"error"' in payload and _ERROR.search(payload):
        record.error = "error event: " + _error_message(payload)
        return True
    if record.prompt_tokens is None:
        # Usually on the first chunk; a server with usage only at the end says it last.
        p = _PROMPT_TOKENS.search(payload)
        if p:
            if len(p.group(1)) > _MAX_COUNT_DIGITS:
                record.error = _implausible(p.group(1), "prompt_tokens")
                return True
            record.prompt_tokens = int(p.group(1))
    m = _COMPLETION_TOKENS.search(payload)
    if m:
        digits = m.group(1)
        if len(digits) > _MAX_COUNT_DIGITS:
            record.error = _implausible(digits)
            return True
        record.add_usage(now, int(digits))
    elif text or (text is None and _TEXT.search(payload)):
        tokens.without_usage(payload, record, now, counting)  # counted, or kept, or neither
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
    elif record.first_token_s is not None and record.tokens == 0 and not record.texts:
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


def _decode(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", "replace")
    except LookupError:  # a charset Python does not know
        return body.decode("utf-8", "replace")


def _describe(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
