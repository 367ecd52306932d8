"""A workload request's prompt: its drawn length in tokens, as text, from the workload's seed.

    [shared prefix: P tokens of words, the same for each group of G requests]
    [a tag of its own: "[<8 hex> request <point>.<trial>.<index>] "]
    [filler words up to the drawn length]

The tag makes every prompt's first KV block its own (or, with a prefix, its first block
after the prefix), so no prefix cache helps beyond what the workload shares on purpose. No
run id enters the text: the same seed gives the same bytes in every run (A and B of a
compare send identical prompts). Repeated runs against one live server with one seed thus
send prompts it has seen; the orchestrator starts a server per run, and a user running
twice by hand gives another seed (docs/workloads.md).

Words become tokens by a line fitted once per run, tokens = a + b x words (a: the chat
template's and the tag's share): from the server's /tokenize where it has one, else from
usage.prompt_tokens of two probe requests. What each request really carried is read back
from its usage and recorded; a point reports requested and measured means.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Awaitable, Callable

from bench.run.prompts import FILLER_WORDS, PromptText
from bench.workload.schedule import Planned, point_seed
from bench.workload_spec import Workload

PROBE_WORDS = (64, 1024)
Count = Callable[[str], Awaitable[int]]


async def fit_line(count: Count) -> tuple[float, float]:
    """(a, b) of tokens = a + b x words, from the token counts of two probe texts; a
    ValueError when the counts do not grow with the text."""
    probe = PromptText("sizing", -1, "probe", 0)
    small = await count(probe.text(PROBE_WORDS[0]))
    large = await count(probe.text(PROBE_WORDS[1]))
    if large <= small:
        raise ValueError(
            f"the token count does not grow with the text ({small:,} tokens for "
            f"{PROBE_WORDS[0]} words, {large:,} for {PROBE_WORDS[1]:,})"
        )
    b = (large - small) / (PROBE_WORDS[1] - PROBE_WORDS[0])
    return small - PROBE_WORDS[0] * b, b


def _words(seed: str, n: int) -> list[str]:
    return random.Random(seed).choices(FILLER_WORDS, k=n)


class WorkloadTexts:
    """The prompts of one point of one trial."""

    def __init__(
        self, workload: Workload, point: int, trial: int, line: tuple[float, float]
    ) -> None:
        self.workload, self.point, self.trial = workload, point, trial
        self.a, self.b = line
        self._prefixes: dict[int, list[str]] = {}

    def _prefix(self, group: int) -> list[str]:
        tokens = self.workload.prefix.tokens
        if tokens == 0:
            return []
        if group not in self._prefixes:
            seed = point_seed(self.workload, self.point, self.trial, f"prefix/{group}")
            self._prefixes[group] = _words(seed, max(round(tokens / self.b), 1))
        return self._prefixes[group]

    def text(self, planned: Planned, stream: str = "measured") -> str:
        """The prompt of `planned`, `stream` "measured" or "warmup" (their own texts)."""
        seed = point_seed(self.workload, self.point, self.trial, f"{stream}/prompt/{planned.index}")
        tag = [f"[{hashlib.sha256(seed.encode()).hexdigest()[:8]}", "request",
               f"{self.point}.{self.trial}.{planned.index}]"]  # fmt: skip
        head = [*self._prefix(planned.group), *tag]
        total = max(round((planned.input_tokens - self.a) / self.b), 0)
        return " ".join([*head, *_words(seed, max(total - len(head), 0))])
