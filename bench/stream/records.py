"""One streaming request as measured: the raw material of every figure.

Times are seconds on the run's injected clock (perf_counter by default). Tokens come
from `usage.completion_tokens`, which vLLM reports cumulatively on every chunk with
`continuous_usage_stats`; a chunk can carry several tokens (MTP speculative decoding),
so chunks are never counted as tokens. Only chunks that raise the count are kept.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any

from bench.failures import ErrorKind, RequestError


@dataclass(slots=True)
class RequestRecord:
    worker: int
    start_s: float  # the worker asked for this request (before any connection set-up)
    # The request's bytes went to the socket, on an open connection: TTFT counts from here,
    # so neither the client's own connection handling nor its loop's turn is in it.
    sent_s: float | None = None
    first_token_s: float | None = None  # first chunk with non-empty text (not the role chunk)
    end_s: float | None = None  # stream finished, failed or was cancelled
    prompt_tokens: int | None = None
    chunk_s: array[float] = field(default_factory=lambda: array("d"))
    chunk_tokens: array[int] = field(default_factory=lambda: array("q"))  # cumulative
    finished: bool = False  # the server ended the stream normally
    cancelled: bool = False  # we cancelled it (end of a window, Ctrl-C)
    failure: RequestError | None = None  # why it failed (None: it did not)
    http_status: int | None = None
    # Chunks that carried text but no usage count: their tokens are credited to a later
    # chunk (with usage only in the last one, all of them at the end), so when they were
    # made is unknown. A cell with such a request has no per-token times (bench.run.figures).
    unattributed: int = 0
    # (arrival, text) of chunks without a count, kept for the server's tokenizer when the
    # engine sends neither usage nor its own count per chunk (bench.stream.tokens).
    texts: list[tuple[float, str]] | None = None
    text_chars: int = 0  # characters in `texts`; -1: over the limit, dropped for good
    # The W3C trace id the request's traceparent header carried (bench.stream.traceparent):
    # 32 hex digits, what a server's trace span of it names. None: sent without one.
    trace_id: str | None = None

    @property
    def error(self) -> str | None:
        """The failure's one-line message (what samples.jsonl and a cell's reason say)."""
        return None if self.failure is None else self.failure.message

    def fail(self, kind: ErrorKind, message: str) -> None:
        """Record why the request failed."""
        self.failure = RequestError(kind, message)

    @property
    def tokens(self) -> int:
        return self.chunk_tokens[-1] if self.chunk_tokens else 0

    @property
    def last_token_s(self) -> float | None:
        return self.chunk_s[-1] if self.chunk_s else None

    @property
    def ttft_from_s(self) -> float:
        """Where TTFT starts: when the request was written, else when it was asked for."""
        return self.start_s if self.sent_s is None else self.sent_s

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.ttft_from_s

    @property
    def tbt_s(self) -> float | None:
        """(t_last - t_first) / (tokens - 1): every token after the first weighs the same."""
        last = self.last_token_s
        n = self.tokens
        if self.first_token_s is None or last is None or n < 2:
            return None
        return (last - self.first_token_s) / (n - 1)

    def add_usage(self, now_s: float, completion_tokens: int) -> None:
        if completion_tokens > (self.chunk_tokens[-1] if self.chunk_tokens else 0):
            # Chunk times never go back, nor before the first token: a receive stamp is
            # put on the client's clock from clock readings (bench.stream.rxstamp.to_clock)
            # that a loaded machine could once preempt between (a -1.5 ms gap under a CPU
            # hog against llama.cpp's server, -0.57 ms in a twin's trial).
            floor = self.chunk_s[-1] if self.chunk_s else self.first_token_s
            if floor is not None and now_s < floor:
                now_s = floor
            self.chunk_s.append(now_s)
            self.chunk_tokens.append(completion_tokens)

    def tokens_between(self, t0_s: float, t1_s: float) -> tuple[int, float | None]:
        """Tokens whose chunk arrived in [t0, t1], and the time of the last such chunk.

        Chunk times are non-decreasing, so two bisections do it.
        """
        lo = bisect_left(self.chunk_s, t0_s)
        hi = bisect_right(self.chunk_s, t1_s) - 1
        if hi < lo:
            return 0, None
        before = self.chunk_tokens[lo - 1] if lo > 0 else 0
        return self.chunk_tokens[hi] - before, self.chunk_s[hi]

    def gaps_s(self) -> list[float]:
        c = self.chunk_s
        return [c[i] - c[i - 1] for i in range(1, len(c))]

    def to_json(self, t0_s: float) -> dict[str, Any]:
        """The raw sample as written to samples.jsonl, times relative to t0 (the cell start)."""
        return {
            "worker": self.worker,
            "start_s": round(self.start_s - t0_s, 6),
            "sent_s": None if self.sent_s is None else round(self.sent_s - t0_s, 6),
            "first_token_s": None
            if self.first_token_s is None
            else round(self.first_token_s - t0_s, 6),
            "end_s": None if self.end_s is None else round(self.end_s - t0_s, 6),
            "prompt_tokens": self.prompt_tokens,
            "tokens": self.tokens,
            "chunk_s": [round(t - t0_s, 6) for t in self.chunk_s],
            "chunk_tokens": list(self.chunk_tokens),
            "finished": self.finished,
            "cancelled": self.cancelled,
            "error": self.error,
            "error_kind": None if self.failure is None else self.failure.kind.value,
            "http_status": self.http_status,
            "trace_id": self.trace_id,
        }
