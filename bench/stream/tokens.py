"""Output tokens of a server that cannot send cumulative usage on every chunk.

vLLM (and SGLang) put `usage.completion_tokens` on every chunk when asked: the client reads
it and nothing here runs. Otherwise, in this order:

1. the engine's own per-chunk count (llama.cpp with `timings_per_token`: `predicted_n`
   in each chunk's `timings`): read as the chunk arrives, exactly like usage;
2. the streamed text, kept chunk by chunk with its arrival time, tokenized after the cell
   with the server's tokenizer (`/tokenize`). Where the tokenizer gives token pieces that
   spell the text (llama.cpp `with_pieces`), each token is placed in the chunk that
   completed it; otherwise the request's count is shared out in proportion to the text's
   bytes. Re-tokenized text need not be the tokens the model made (a model can pick a
   non-canonical split): a final usage count, when the server sends one, is the total.

A request's tokens are never all stamped at its last chunk: without one of the two, its
chunks stay "unattributed" and its cell is invalid (bench.run.figures says why).
"""

from __future__ import annotations

import json
import re
from bisect import bisect_right
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from bench.results import TokenSource
from bench.stream.records import RequestRecord

_MAX_COUNT_DIGITS = 12
# Text kept per request for the tokenizer: beyond this the request's text is dropped and
# its chunks stay unattributed (a hostile stream must not fill memory). 256 K characters
# is some 64 K tokens, whose /tokenize answer with pieces stays under the client's
# MAX_SETUP_BODY_BYTES.
MAX_TEXT_CHARS = 256 << 10
_TEXT_KEYS = ("content", "reasoning_content", "reasoning", "text")


@dataclass(frozen=True)
class Counting:
    """How the client counts tokens of chunks that carry no usage."""

    chunk_count: re.Pattern[bytes] | None = None  # the engine's per-chunk cumulative count
    capture_text: bool = False  # keep the text for the tokenizer


# text -> (token count, each token's bytes or None)
Tokenize = Callable[[str], Awaitable[tuple[int, list[bytes] | None] | None]]


def run_source(counting: Counting | None) -> TokenSource:
    """The run's main way of counting (each cell says what it really used)."""
    return "engine_chunk_count" if counting is not None and counting.chunk_count else "usage"


def without_usage(payload: bytes, record: RequestRecord, now: float, c: Counting | None) -> None:
    """A chunk with text and no usage count (the client's hook)."""
    if c is not None and c.chunk_count is not None:
        m = c.chunk_count.search(payload)
        if m is not None and len(m.group(1)) <= _MAX_COUNT_DIGITS:
            record.add_usage(now, int(m.group(1)))
            return
    record.unattributed += 1
    if c is not None and c.capture_text:
        keep(record, now, chunk_text(payload))


def keep(record: RequestRecord, now: float, text: str) -> None:
    """Keep one chunk's text; past MAX_TEXT_CHARS the request's text is dropped for good
    (its chunks stay unattributed and its cell invalid)."""
    if not text or record.text_chars < 0:
        return
    if record.text_chars + len(text) > MAX_TEXT_CHARS:
        record.texts, record.text_chars = None, -1
        return
    if record.texts is None:
        record.texts = []
    record.texts.append((now, text))
    record.text_chars += len(text)


def chunk_text(payload: bytes) -> str:
    """The generated text of one chunk (chat delta, reasoning or completions text)."""
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):
        return ""
    choices = obj.get("choices") if isinstance(obj, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return ""
    first = choices[0]
    delta = first.get("delta")
    where = delta if isinstance(delta, dict) else first
    return "".join(v for k in _TEXT_KEYS if isinstance(v := where.get(k), str))


def _piece(value: object) -> bytes | None:
    """A token's bytes: a string piece, or llama.cpp's list of byte values for a piece
    that is no valid UTF-8 by itself."""
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    if isinstance(value, list) and all(
        isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 256 for b in value
    ):
        return bytes(value)
    return None


def _pieces(values: list[Any]) -> list[bytes] | None:
    got = [_piece(v) for v in values]
    return None if not got or any(p is None for p in got) else [p for p in got if p is not None]


def read_tokenize(answer: Any) -> tuple[int, list[bytes] | None] | None:
    """(count, pieces) from a /tokenize answer: vLLM's `count`/`tokens`/`token_strs`,
    llama.cpp's `tokens` of ids or of {"id", "piece"}; None when it is neither."""
    if not isinstance(answer, dict):
        return None
    toks, count = answer.get("tokens"), answer.get("count")
    pieces: list[bytes] | None = None
    if isinstance(toks, list) and toks and all(isinstance(t, dict) for t in toks):
        pieces = _pieces([t.get("piece") for t in toks])
    strs = answer.get("token_strs")
    if pieces is None and isinstance(strs, list) and all(isinstance(s, str) for s in strs):
        pieces = _pieces(strs)
    if isinstance(count, int) and not isinstance(count, bool) and count >= 0:
        return count, pieces
    if isinstance(toks, list):
        return len(toks), pieces
    return None


def boundaries(texts: list[str], total: int, pieces: list[bytes] | None) -> tuple[list[int], bool]:
    """Cumulative tokens at the end of each chunk, and whether they are placed by the
    tokenizer's pieces (whose bytes spell the text back) or shared in proportion to the
    text's bytes. Never decreasing; ends at `total` (no text: 0 everywhere)."""
    raw = [t.encode("utf-8", "surrogatepass") for t in texts]
    ends = list(accumulate(len(t) for t in raw))
    size = ends[-1] if ends else 0
    if pieces is not None and b"".join(pieces) == b"".join(raw):
        token_ends = list(accumulate(len(p) for p in pieces))
        placed = [bisect_right(token_ends, e) for e in ends]
        n = len(pieces)
        if n and n != total:  # the server's own total wins; the pieces place the tokens
            placed = [round(total * k / n) for k in placed]
        return placed, True
    if size == 0:
        return [0 for _ in texts], False
    return [round(total * e / size) for e in ends], False


async def attribute(records: list[RequestRecord], tokenize: Tokenize | None) -> TokenSource | None:
    """Give every request with kept text per-chunk token counts (after the cell, when the
    server is idle); returns how, or None when no request had kept text."""
    kept = [r for r in records if r.texts]
    if not kept or tokenize is None:
        return None
    exact_all = True
    for r in kept:
        if not r.texts:
            continue
        times = [t for t, _ in r.texts]
        texts = [x for _, x in r.texts]
        got = await tokenize("".join(texts))
        if got is None:
            continue
        count, pieces = got
        total = r.tokens if r.tokens > 0 else count
        cumulative, exact = boundaries(texts, total, pieces)
        exact_all = exact_all and exact
        r.chunk_s = type(r.chunk_s)("d")
        r.chunk_tokens = type(r.chunk_tokens)("q")
        for t, n in zip(times, cumulative, strict=True):
            r.add_usage(t, n)
        r.unattributed = 0
        r.texts, r.text_chars = None, 0
    return "tokenized_text" if exact_all else "tokenized_text_share"
