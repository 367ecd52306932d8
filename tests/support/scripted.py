"""Test doubles that are not mocks of a server: scripted clocks and canned SSE bodies."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import httpx


class ScriptedClock:
    """Each read advances time by `step_s` (or by the next scripted step)."""

    def __init__(self, start_s: float = 100.0, step_s: float = 1.0) -> None:
        self.now_s = start_s
        self.step_s = step_s
        self.reads = 0

    def __call__(self) -> float:
        self.reads += 1
        self.now_s += self.step_s
        return self.now_s


def chat_chunk(
    content: str | None = None,
    *,
    completion_tokens: int | None = None,
    prompt_tokens: int = 100,
    role: bool = False,
    reasoning: str | None = None,
) -> bytes:
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = "assistant"
        delta["content"] = ""
    if content is not None:
        delta["content"] = content
    if reasoning is not None:
        delta["reasoning_content"] = reasoning
    obj: dict[str, Any] = {
        "id": "x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
    }
    if completion_tokens is not None:
        obj["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"


class Body(httpx.AsyncByteStream):
    def __init__(self, parts: Sequence[bytes | Exception]) -> None:
        self.parts = parts

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for part in self.parts:
            if isinstance(part, Exception):
                raise part
            yield part


def transport(parts: Sequence[bytes | Exception], status: int = 200) -> httpx.MockTransport:
    """A transport answering every request with `parts`, one network read each."""

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            status, stream=Body(parts), headers={"content-type": "text/event-stream"}
        )

    return httpx.MockTransport(handler)


# The client's perf_counter and the wall clock run side by side, 1,000 s apart.
OFFSET = 1000.0


def paused_clocks(preempted: list[float]) -> tuple[Callable[[], float], Callable[[], float]]:
    """A perf_counter and a time.time read alternately (clock, wall, clock, ...), as
    bench.stream.rxstamp reads them; the k-th wall reading comes `preempted[k]` seconds
    after the clock reading before it, as when the scheduler takes the CPU away between the
    two calls; each call takes 1 us."""
    now = [5.0]
    pauses: Iterator[float] = iter(preempted)

    def clock() -> float:
        now[0] += 1e-6
        return now[0]

    def wall() -> float:
        now[0] += next(pauses, 0.0) + 1e-6
        return now[0] + OFFSET

    return clock, wall
