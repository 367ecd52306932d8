"""The HTTP client of the server under test (httpx stays inside this package: here, in
bench.stream.bodies and in bench.stream.urls).

    httpx.TimeoutException (read)      -> record.error "read time-out after N s"
    httpx.HTTPError (connect, protocol) -> record.error "transport error: ..."
    HTTP status != 200                 -> record.error "HTTP 429: <body start>"
    error event inside a 200 stream    -> record.error "error event: <message>"
    a chunk that is not one JSON object -> record.error "malformed chunk: ..."
    a stream with usage but no text     -> record.error "usage-only stream ..."
    no [DONE], no usage, nothing at all -> "stream ended without [DONE]", "no usage in
                                           stream ...", "empty stream ..."

Request failures are data on the record: a kind (bench.failures.ErrorKind) and
the message above (`record.error`); only the small JSON helpers used before the
sweep (model, version, metrics, tokenize) raise `ServerUnreachable` when nothing answers.

Limits on what a server may send (a hostile one must not exhaust memory or time):

    MAX_SETUP_BODY_BYTES    body of /v1/models, /version, /tokenize (decoded: a gzip bomb
                            stops here too)                         -> ServerError, exit 3
    MAX_METRICS_BODY_BYTES  body of one /metrics scrape             -> ServerError, exit 3
    MAX_SSE_LINE            one line of the measured stream (bench.stream.sse) -> record.error
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

KnownSecrets: a URL with credentials is refused (bench.stream.urls.check_url): the API key
comes from VLLM_API_KEY or BENCH_API_KEY only. What the client hands on of a server's bytes
(the small calls' bodies, a stream's failure message and captured text) has been through
bench.secrets, the one door: every form of the key and of the run's other secrets masked.
For a loopback server no proxy from the environment is used (HTTP_PROXY, ALL_PROXY):
the small calls go the way the measured stream goes (bench.stream.http1 never uses a
proxy), so a proxy never sees the key.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import ssl
from collections.abc import Callable
from typing import Any

import httpx
from pydantic import SecretStr

from bench.errors import ServerUnreachable
from bench.failures import ErrorKind
from bench.results import ReadTimes
from bench.secrets import KnownSecrets
from bench.stream import bodies, http1, rxstamp, sse, tokens, traceparent
from bench.stream import response as h1response
from bench.stream.records import RequestRecord
from bench.stream.urls import check_url, is_loopback

Clock = Callable[[], float]

# The measured stream's request, as bench.stream.http1 sends it.
_STREAM_HEADERS = {
    "content-type": "application/json",
    "accept": "text/event-stream",
    "accept-encoding": "identity",
}
_MIB = 1 << 20
MAX_SETUP_BODY_BYTES = 4 * _MIB
MAX_METRICS_BODY_BYTES = 16 * _MIB
MAX_SSE_LINE = sse.MAX_SSE_LINE
MAX_ERROR_BODY = h1response.MAX_ERROR_BODY
# bench.stream.http1's watchdog ends a stream after five quarters of the read time-out without
# progress; the httpx path uses the same deadline (a silent server meets httpx's own read
# time-out first, as it meets the watchdog's "no byte" rule first on bench.stream.http1).
NO_PROGRESS_FACTOR = 1.25


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
        secrets: KnownSecrets | None = None,
    ) -> None:
        """`ca_file`: a PEM file of the CA (or self-signed certificate) an https:// server
        is checked against, instead of the system's (a server with a private CA).
        `secrets`: the run's other secrets, masked with this server's key in all it hands on
        (a server may echo any of them: issue 29 L4, issue 48)."""
        headers = {}
        self.secrets = KnownSecrets.of(api_key) | (secrets or KnownSecrets())
        if api_key is not None:
            headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
        self.base_url = check_url(base_url)
        self.read_timeout_s = read_timeout_s
        self._clock = clock
        # Set once the engine is known: how chunks without usage are counted.
        self.counting: tokens.Counting | None = None
        # Called with each measured stream's record once it is complete (bench.live).
        self.on_finished: Callable[[RequestRecord], None] | None = None
        # Every measured stream carries a W3C traceparent; its trace id is drawn here (and
        # remembered while the run receives the server's spans: bench.live.span_receiver).
        self.traces = traceparent.SentTraces()
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
        try:  # a GET is safe to send again (_small's once_more)
            status, body, charset = await self._small("GET", path, timeout, limit, once_more=True)
        except httpx.HTTPError as exc:
            raise ServerUnreachable(
                f"cannot reach {self.base_url}{path}: {bodies.describe(exc)}",
                hint="check --url and that the server is up",
            ) from None
        return status, self.secrets.mask(bodies.decode(body, charset))

    async def post_json(
        self, path: str, body: dict[str, Any], wait_s: float = 120.0, *, idempotent: bool = False
    ) -> tuple[int, Any]:
        """POST a JSON body -> (status, its JSON answer or None), read within bounds: at most
        MAX_SETUP_BODY_BYTES, and within twice `wait_s` in all. An `idempotent` POST (a
        /tokenize: it changes nothing on the server) is sent again once, on a fresh
        connection, when the kept-alive one it went out on turns out closed by the server
        ("Server disconnected without sending a response"), as a GET is. A server may close
        a connection after an error answer without saying so; the next request on it fails
        that way."""
        content = json.dumps(body).encode()
        try:
            status, raw, _ = await self._small(
                "POST", path, wait_s, MAX_SETUP_BODY_BYTES, content, once_more=idempotent,
                trace=True,
            )  # fmt: skip
        except httpx.HTTPError as exc:
            raise ServerUnreachable(
                f"cannot reach {self.base_url}{path}: {bodies.describe(exc)}"
            ) from None
        try:
            answer = json.loads(raw)
        except (ValueError, RecursionError):
            return status, None
        return status, self.secrets.mask_tree(answer) if self.secrets.could_hide_in(raw) else answer

    async def _small(
        self,
        method: str,
        path: str,
        wait_s: float,
        limit: int,
        content: bytes | None = None,
        *,
        once_more: bool = False,
        trace: bool = False,
    ) -> tuple[int, bytes, str | None]:
        """One small request read within bounds (bench.stream.bodies.read_small). With
        `once_more` (a request that changes nothing on the server) it is sent a second time
        when the kept-alive connection it went out on was closed by the server as it was
        reused ("Server disconnected without sending a response"): the pool opens a fresh
        connection for it. `trace`: it carries a traceparent too (a POST the server may
        trace: its span is then one of the run's, not an unknown one)."""
        name = "MAX_METRICS_BODY_BYTES" if path == "/metrics" else "MAX_SETUP_BODY_BYTES"
        extra = {traceparent.HEADER: traceparent.header(self.traces.draw())} if trace else None

        async def send() -> tuple[int, bytes, str | None]:
            return await bodies.read_small(
                self._http, method, path, base_url=self.base_url, wait_s=wait_s, limit=limit,
                limit_name=name, content=content, extra_headers=extra,
            )  # fmt: skip

        try:
            return await send()
        except httpx.RemoteProtocolError:
            if not once_more:
                raise
        return await send()

    # -- the measured stream ------------------------------------------------------------

    async def stream(self, path: str, body: dict[str, Any] | bytes, record: RequestRecord) -> None:
        """Run one streaming request, filling `record`. Never raises for request failures.
        What it keeps of the server's text (a failure's message, the captured text) has its
        secrets masked (a server may echo the header)."""
        try:
            await self._stream(path, body, record)
        finally:
            if self.secrets:
                self._mask(record)
            if self.on_finished is not None:
                self.on_finished(record)

    def _mask(self, record: RequestRecord) -> None:
        failed = record.failure
        if failed is not None:
            # A message quotes a bounded start of what the server said: it may end inside
            # a key (`cut`).
            message = self.secrets.mask(failed.message, cut=True)
            record.failure = dataclasses.replace(failed, message=message)
        if record.texts and self.secrets.found_in("".join(text for _, text in record.texts)):
            # Kept for a tokenizer (another server, maybe): a key split over chunks is found
            # in the joined text and the text masked as a whole, on the last chunk's time.
            whole = self.secrets.mask("".join(text for _, text in record.texts))
            record.texts = [(record.texts[-1][0], whole)]

    async def _stream(self, path: str, body: dict[str, Any] | bytes, record: RequestRecord) -> None:
        """`stream` itself.

        `body` may come JSON-encoded already: a cell sends the same (up to 1.5 MB) prompt
        over and over, and encoding it once keeps that cost off the request path.
        Cancellation (end of a window) marks the record cancelled and propagates.
        """
        clock = self._clock
        content = body if isinstance(body, bytes) else json.dumps(body).encode()
        record.trace_id = self.traces.draw()
        trace_head = traceparent.header(record.trace_id)
        if self._raw is not None:
            await self._stream_raw(path, content, record, trace_head)
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
                    "POST", path, content=content,
                    headers={**_STREAM_HEADERS, traceparent.HEADER: trace_head},
                    extensions={"trace": trace},
                ) as response:  # fmt: skip
                    record.http_status = response.status_code
                    if response.status_code != 200:
                        record.fail(ErrorKind.HTTP_STATUS, await bodies.http_error(response))
                        return
                    problem = bodies.not_an_event_stream(response.headers)
                    if problem is not None:
                        record.fail(ErrorKind.NOT_EVENT_STREAM, f"transport error: {problem}")
                        return
                    await self._read_events(response, record, clock, deadline, stuck_s)
        except asyncio.CancelledError:
            record.cancelled = True
            raise
        except TimeoutError:
            record.fail(
                ErrorKind.STALLED,
                f"read time-out: no token for {self.read_timeout_s:g} s "
                "(the server kept sending other bytes)",
            )
        except httpx.TimeoutException:
            record.fail(ErrorKind.TIMEOUT, f"read time-out after {self.read_timeout_s:g} s")
        except httpx.HTTPError as exc:
            record.fail(ErrorKind.TRANSPORT, f"transport error: {bodies.describe(exc)}")
        finally:
            record.end_s = clock()
        if record.error is None and not record.cancelled:
            _check_complete(record)

    async def _stream_raw(
        self, path: str, content: bytes, record: RequestRecord, trace_head: str
    ) -> None:
        assert self._raw is not None
        try:
            await self._raw.stream(
                self._raw_prefix + path,
                content,
                record,
                sse.Events(record, self.counting),
                traceparent=trace_head,
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
        events = sse.Events(record, self.counting)
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


def _progress(record: RequestRecord) -> tuple[object, ...]:
    """What moves on when a stream makes progress (bench.stream.http1's watchdog reads the same)."""
    return (record.first_token_s is not None, record.tokens, record.unattributed)


def _check_complete(record: RequestRecord) -> None:
    if not record.finished:
        record.fail(ErrorKind.NO_DONE, "stream ended without [DONE]")
    elif record.first_token_s is None and record.tokens > 0:
        record.fail(ErrorKind.USAGE_ONLY, "usage-only stream: tokens counted but no text received")
    elif record.first_token_s is not None and record.tokens == 0 and not record.texts:
        record.fail(
            ErrorKind.NO_USAGE,
            "no usage in stream: the server must send continuous usage stats",
        )
    elif record.tokens == 0:
        record.fail(ErrorKind.EMPTY, "empty stream: no token received")
