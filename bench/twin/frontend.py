"""The API-server side of a request before the engine sees it, as a pure function of time.

vLLM renders and tokenizes prompts in the API-server process one request at a time, so a
burst of C long prompts reaches the scheduler staggered: each takes `frontend_s` (per
prompt size) on a single FIFO worker, then `request_overhead_s` that overlaps with other
requests. This stagger, not the GPU, is what makes warm-cache TTFT grow with C on the card.
"""

from __future__ import annotations

from bench.twin.profile import Profile


class Frontend:
    def __init__(self, profile: Profile) -> None:
        self._profile = profile
        self._free_s = float("-inf")

    def ready_at(self, arrival_s: float, prompt_tokens: int) -> float:
        """When a request arriving at `arrival_s` (profile seconds) reaches the engine."""
        p = self._profile
        start = max(arrival_s, self._free_s)
        self._free_s = start + p.frontend_seconds(prompt_tokens)
        return self._free_s + p.request_overhead_seconds(prompt_tokens)
