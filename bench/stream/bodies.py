"""Bodies and heads of httpx responses, read within bounds.

The small JSON calls before the sweep (/v1/models, /version, /tokenize, /metrics) read
their whole (decoded) body up to a limit and within twice their read time-out; a gzip or
deflate body is inflated here at most `limit` bytes at a time (httpx would inflate each
read whole: a 64 KB bomb was 64 MiB at once); other encodings are refused.

The measured stream over httpx (https, an injected transport) reads only the start of a
non-200 body (MAX_ERROR_BODY bytes, for its message) and refuses at the head a 200 that is
encoded or not text/event-stream, with bench.stream.http1's words.
"""

from __future__ import annotations

import asyncio
import zlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from bench.errors import ServerError
from bench.stream.response import MAX_ERROR_BODY

_MIB = 1 << 20
_JSON_HEADERS = {"content-type": "application/json"}


async def read_small(
    http: httpx.AsyncClient,
    method: str,
    path: str,
    *,
    base_url: str,
    wait_s: float,
    limit: int,
    limit_name: str,
    content: bytes | None = None,
    extra_headers: dict[str, str] | None = None,
) -> tuple[int, bytes, str | None]:
    """One small request, its (decoded) body read up to `limit` bytes and within twice
    `wait_s` in all; over either, a one-line ServerError / time-out (httpx.ReadTimeout).
    `extra_headers`: sent too (a POST's traceparent)."""
    headers = {**_JSON_HEADERS} if content is not None else {}
    headers.update(extra_headers or {})
    headers["accept-encoding"] = "gzip, deflate"
    where = base_url + path
    try:
        async with asyncio.timeout(2 * wait_s):
            async with http.stream(
                method, path, content=content, headers=headers, timeout=wait_s
            ) as r:
                if r.is_stream_consumed:
                    # A response made whole in memory (httpx.MockTransport's): httpx
                    # has decoded it already.
                    inflate, parts = None, _once(r.content)
                else:
                    inflate = _inflater(r.headers.get("content-encoding", ""))
                    parts = r.aiter_raw()
                got = bytearray()
                async for part in parts:
                    _take(got, part, inflate, limit)
                    if len(got) > limit:
                        raise ServerError(
                            f"{where} answered more than {limit // _MIB} MiB "
                            f"(the limit {limit_name}, counted after decoding)",
                            hint="is --url a vLLM-compatible server?",
                        )
                return r.status_code, bytes(got), r.charset_encoding
    except TimeoutError:
        raise httpx.ReadTimeout(f"no whole answer within {2 * wait_s:g} s") from None
    except (zlib.error, _NotDecodedError) as exc:
        raise ServerError(f"{where} sent a body that does not decode: {exc}") from None


def _take(got: bytearray, part: bytes, inflate: Any, limit: int) -> None:
    """Add one read to `got`, inflated (when encoded) to at most one byte past `limit`."""
    if inflate is None:
        got += part
        return
    got += inflate.decompress(part, limit + 1 - len(got))
    while inflate.unconsumed_tail and len(got) <= limit:
        got += inflate.decompress(inflate.unconsumed_tail, limit + 1 - len(got))


async def _once(data: bytes) -> AsyncIterator[bytes]:
    """A body already in memory, as the one read of an async iteration."""
    yield data


class _NotDecodedError(Exception):
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
    raise _NotDecodedError(f"content-encoding {encoding[:40]!r} (asked for gzip, deflate or none)")


def not_an_event_stream(headers: httpx.Headers) -> str | None:
    """Why a 200's head is no measured stream (bench.stream.http1 says the same), or None."""
    encoding = headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity"):
        return f"the response is content-encoding {encoding[:40]!r}, not identity"
    ctype = headers.get("content-type", "").strip().lower()
    if ctype and not ctype.startswith("text/event-stream"):
        return f"the response is {ctype[:60]!r}, not text/event-stream"
    return None


async def http_error(response: httpx.Response) -> str:
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


def decode(body: bytes, charset: str | None) -> str:
    """A body as text in its charset (UTF-8 when none, one Python does not know, or one
    that cannot decode at all: `undefined`, `idna`, issue 29 H2)."""
    try:
        return body.decode(charset or "utf-8", "replace")
    except (LookupError, UnicodeError):
        return body.decode("utf-8", "replace")


def describe(exc: httpx.HTTPError) -> str:
    """An httpx error in one line of at most 200 characters."""
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:200]
