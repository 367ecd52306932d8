"""The API-server side of a request before the engine sees it, as a pure function of time.

vLLM renders and tokenizes prompts in the API-server process, so a burst of C long prompts
reaches the scheduler staggered: each takes `frontend_s` on a single FIFO worker, then
`request_overhead_s` that overlaps with other requests. The worker's time per prompt
depends on the prompt's size and on how many requests the server holds when the worker
starts on it (the same process streams every running request), which is what shapes the
card's warm-cache TTFT as C grows.

`Frontend` is a FIFO queue that is told the time: `submit` queues a request, `start_due`
starts every queued request whose turn has come (sampling the load as it starts) and says
when each reaches the engine. The real-time server and the virtual-time calibration drive
the same object.
"""

from __future__ import annotations

from collections import deque
from typing import Generic, NamedTuple, TypeVar

from bench.twin.profile import Profile

T = TypeVar("T")


class _Queued(NamedTuple, Generic[T]):
    arrival_s: float
    prompt_tokens: int
    item: T


class Frontend(Generic[T]):
    def __init__(self, profile: Profile) -> None:
        self._profile = profile
        self._free_s = float("-inf")
        self._queue: deque[_Queued[T]] = deque()

    def submit(self, arrival_s: float, prompt_tokens: int, item: T) -> None:
        """Queue a request that arrived at `arrival_s` (profile seconds)."""
        self._queue.append(_Queued(arrival_s, prompt_tokens, item))

    def next_start_s(self) -> float | None:
        """When the head of the queue starts (profile seconds); None when nothing waits."""
        if not self._queue:
            return None
        return max(self._queue[0].arrival_s, self._free_s)

    def start_due(self, now_s: float, held: int) -> list[tuple[float, T]]:
        """Start every queued request whose turn is at or before `now_s`, with the server
        holding `held` requests; returns when each reaches the engine, in order."""
        p, out = self._profile, []
        while self._queue:
            head = self._queue[0]
            start = max(head.arrival_s, self._free_s)
            if start > now_s:
                break
            self._queue.popleft()
            self._free_s = start + p.frontend_seconds(head.prompt_tokens, held)
            out.append((self._free_s + p.request_overhead_seconds(head.prompt_tokens), head.item))
        return out
