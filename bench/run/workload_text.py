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

A dataset's prompt (`[prompts] source = "sharegpt"`) is its conversation's first turn,
verbatim: no tag, so a conversation drawn twice (within a point, or by two points) is the
same text, and a prefix cache may serve it, as under vLLM. A trace's prompt is built from
its blocks: each hash id stands for BLOCK_TOKENS tokens of words seeded by that id (and the
trial), so requests whose leading ids are equal share that text; what its ids do not cover
is a tag and filler of its own. Its warm-ups are tag and filler only.

Words become tokens by a line fitted once per run, tokens = a + b x words (a: the chat
template's share): from the server's /tokenize where it has one, else from
usage.prompt_tokens of two probe requests. The tag's own cost (a hex digest and dotted
numbers: about 12 tokens for its 3 words under a Llama tokenizer) is counted once on the
same /tokenize and taken off the filler; without /tokenize it counts as its words. What
each request really carried is read back from its usage and recorded; a point reports
requested and measured means.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Awaitable, Callable
from typing import NamedTuple

from bench.run.prompts import FILLER_WORDS
from bench.workload.datasets import ShareGptData
from bench.workload.schedule import Planned, dataset_of, point_seed, trace_of
from bench.workload.trace import BLOCK_TOKENS, MooncakeTrace
from bench.workload_spec import Workload

PROBE_WORDS = (64, 1024)
Count = Callable[[str], Awaitable[int]]
# A tag as `WorkloadTexts.text` writes one, to count what a tag costs on this tokenizer.
TAG_SAMPLE = "[9c41d07e request 12.0.137]"


class TokenLine(NamedTuple):
    """tokens = a + b x words, and a request tag's tokens (None: counted as its words)."""

    a: float
    b: float
    tag_tokens: float | None = None


def probe_text(words: int) -> str:
    """A probe of `words` filler words and nothing else: a workload prompt is words, so the
    line's intercept is the chat template's alone (a card prompt's probe starts with its
    tag, whose tokens would move the intercept: 25 % short on 128-token prompts)."""
    return " ".join(_words("bench-workload/sizing-probe", words))


async def fit_line(count: Count) -> TokenLine:
    """tokens = a + b x words from the token counts of two probe texts, and a tag's tokens
    from a third (the first with TAG_SAMPLE before it); a ValueError when the counts do not
    grow with the text."""
    small = await count(probe_text(PROBE_WORDS[0]))
    tagged = await count(f"{TAG_SAMPLE} {probe_text(PROBE_WORDS[0])}")
    large = await count(probe_text(PROBE_WORDS[1]))
    if large <= small:
        raise ValueError(
            f"the token count does not grow with the text ({small:,} tokens for "
            f"{PROBE_WORDS[0]} words, {large:,} for {PROBE_WORDS[1]:,})"
        )
    b = (large - small) / (PROBE_WORDS[1] - PROBE_WORDS[0])
    tag = float(tagged - small) if tagged > small else None
    return TokenLine(small - PROBE_WORDS[0] * b, b, tag)


def _words(seed: str, n: int) -> list[str]:
    return random.Random(seed).choices(FILLER_WORDS, k=n)


class WorkloadTexts:
    """The prompts of one point of one trial."""

    def __init__(
        self, workload: Workload, point: int, trial: int, line: TokenLine | tuple[float, float]
    ) -> None:
        self.workload, self.point, self.trial = workload, point, trial
        self.a, self.b = line[0], line[1]
        self.tag_tokens = line.tag_tokens if isinstance(line, TokenLine) else None
        self._prefixes: dict[int, list[str]] = {}
        self._block = functools.lru_cache(maxsize=4096)(self._block_words)

    def _prefix(self, group: int) -> list[str]:
        tokens = self.workload.prefix.tokens
        if tokens == 0:
            return []
        if group not in self._prefixes:
            seed = point_seed(self.workload, self.point, self.trial, f"prefix/{group}")
            self._prefixes[group] = _words(seed, max(round(tokens / self.b), 1))
        return self._prefixes[group]

    @functools.cached_property
    def _dataset(self) -> ShareGptData:
        return dataset_of(self.workload)

    @functools.cached_property
    def _trace(self) -> MooncakeTrace:
        return trace_of(self.workload)

    def _block_words(self, block: int) -> list[str]:
        seed = point_seed(self.workload, self.point, self.trial, f"block/{block}")
        return _words(seed, max(round(BLOCK_TOKENS / self.b), 1))

    def _blocks(self, planned: Planned, total: int) -> list[str]:
        """The words of a trace request's blocks, at most `total`."""
        out: list[str] = []
        for block in self._trace.blocks(planned.index):
            if len(out) >= total:
                break
            out += self._block(block)[: total - len(out)]
        return out

    def text(self, planned: Planned, stream: str = "measured") -> str:
        """The prompt of `planned`, `stream` "measured" or "warmup" (their own texts)."""
        w = self.workload
        if w.prompts.source == "sharegpt":
            return self._dataset.prompt(planned.group)
        total = max(round((planned.input_tokens - self.a) / self.b), 0)
        shared = self._blocks(planned, total) if w.arrivals.kind == "trace" and (
            stream == "measured"
        ) else []  # fmt: skip
        if shared and len(shared) == total:
            return " ".join(shared)
        seed = point_seed(w, self.point, self.trial, f"{stream}/prompt/{planned.index}")
        tag = [f"[{hashlib.sha256(seed.encode()).hexdigest()[:8]}", "request",
               f"{self.point}.{self.trial}.{planned.index}]"]  # fmt: skip
        head = [*shared, *self._prefix(planned.group), *tag]
        # the tag's cost in filler words: its tokens where counted, else its own words
        cost = len(tag) if self.tag_tokens is None else round(self.tag_tokens / self.b)
        filler = total - len(head) + len(tag) - cost
        return " ".join([*head, *_words(seed, max(filler, 0))])
