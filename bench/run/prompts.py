"""Prompts of exact sizes, unique per run and context, and the request bodies.

Sizes: K = 1024 tokens. A context that does not fit `max_model_len - max_tokens - 64`
is trimmed to fit. Labels follow the card: a context keeps its nominal label ("256K"
for the prefill-only row, trimmed by the 65-token margin only) unless trimming took
off 1K or more, then it is labelled by what is sent, rounded down: 257,984 tokens is
"251K".

Exact sizes come from the server's `/tokenize` (chat template included for the chat
API); without it, a line is fitted to `usage.prompt_tokens` of two short probe requests
and the real size is read back from the scout's usage (recorded, never guessed).

A prompt begins with a tag of its own (run, trial, context): an engine caches KV blocks by
their prefix (vLLM: 16 tokens), so a first block shared with another request of the run is
prefilled once and then read from the cache. With the run id first, the first 16 tokens of a
chat prompt ended before the trial in about 11 % of run ids (the twin's tokenizer, the
warm-up's and the 128-token scout's prompts): those runs' scouts took one block from the
cache, 12 % of a 128-token prefill, and the fleet test named a healthy node.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from bench.results import Api

K = 1024
SAFETY_MARGIN_TOKENS = 64

_FILLER = (
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy music market sense nation plan college interest death "
    "experience effect class control care field development role effort rate heart drug show "
    "leader light voice wife police mind price report decision son view relationship town road "
    "arm difference value building action model season society tax director position player "
    "record paper space ground form event official matter center couple site project activity "
    "star table need court oil situation cost industry figure street image phone data picture"
)
FILLER_WORDS = tuple(_FILLER.split())


def context_label(nominal_tokens: int, prompt_tokens: int) -> str:
    if nominal_tokens - prompt_tokens < K:
        return f"{nominal_tokens // K}K" if nominal_tokens % K == 0 else str(nominal_tokens)
    return f"{prompt_tokens // K}K"


def fit(nominal_tokens: int, max_model_len: int, max_tokens: int) -> int:
    return min(nominal_tokens, max_model_len - max_tokens - SAFETY_MARGIN_TOKENS)


class PromptText:
    """Deterministic filler text for one (run, trial, context): a unique prefix + words."""

    def __init__(self, run_id: str, trial: int, label: str, seed: int) -> None:
        tag = hashlib.sha256(f"{run_id}/{trial}/{label}".encode()).hexdigest()[:8]
        self.prefix = f"[{tag} benchmark run {run_id} trial {trial} context {label}] "
        self._rng = random.Random(f"{seed}:{run_id}:{trial}:{label}")
        self._words: list[str] = []

    def text(self, n_words: int) -> str:
        if n_words > len(self._words):
            self._words += self._rng.choices(FILLER_WORDS, k=n_words - len(self._words) + 1024)
        return self.prefix + " ".join(self._words[:n_words])


def message_body(api: Api, model: str, text: str) -> dict[str, Any]:
    if api == "chat":
        return {"model": model, "messages": [{"role": "user", "content": text}]}
    return {"model": model, "prompt": text}


def request_body(
    api: Api, model: str, text: str, max_tokens: int, extras: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """`extras`: the engine's own request fields (bench.engines: llama.cpp's per-token
    timings), added after the standard ones."""
    body = message_body(api, model, text)
    body.update(
        max_tokens=max_tokens,
        stream=True,
        # Cumulative token counts on every chunk: tokens are counted from usage only.
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        ignore_eos=True,
    )
    body.update(extras or {})
    return body


def endpoint(api: Api) -> str:
    return "/v1/chat/completions" if api == "chat" else "/v1/completions"


Counter = Callable[[str], Awaitable[int]]


class NotSizable(ValueError):
    """The tokenizer's counts cannot size a prompt (they do not grow with the text, or the
    best prompt lies far from its target); the message says which counts."""


async def size_exactly(target_tokens: int, text: PromptText, count: Counter) -> tuple[str, int]:
    """The longest filler whose token count is <= target, equal when the tokenizer allows.

    Never more words than target tokens (a word of the filler is at least one token, and
    the target already fits max_model_len), whatever the tokenizer says: a count that does
    not grow asked for a 266 M-word prompt before (issue 29, S6). NotSizable when the
    counts do not grow, or when the best prompt has under half its target (H1)."""
    base = await count(text.text(0))
    probe_words = 256
    probed = await count(text.text(probe_words))
    if probed <= base:
        raise NotSizable(
            f"its count does not grow with the text ({base:,} tokens for none of the filler, "
            f"{probed:,} for {probe_words} words)"
        )
    per_word = (probed - base) / probe_words
    most = max(target_tokens, 0)
    n = min(max(int((target_tokens - base) / per_word), 0), most)
    best: tuple[int, int] | None = None  # (tokens, words) with tokens <= target
    tried: dict[int, int] = {}
    for _ in range(12):
        if n in tried:
            break
        got = tried[n] = await count(text.text(n))
        if got <= target_tokens and (best is None or got > best[0]):
            best = (got, n)
        if got == target_tokens:
            break
        if n > probe_words:
            # The slope over the whole prompt is far better than the short probe's: one
            # more /tokenize usually lands on the target (each long call costs the server
            # a full tokenization of up to 256K tokens).
            per_word = max(got - base, 1) / n
        step = round((target_tokens - got) / per_word)
        n = min(max(n + (step or (1 if got < target_tokens else -1)), 0), most)
    if best is None:
        best = (base, 0)
    if best[0] < target_tokens / 2:
        raise NotSizable(
            f"its counts size a {target_tokens:,}-token prompt to {best[0]:,} tokens at most"
        )
    return text.text(best[1]), best[0]


def size_by_line(target_tokens: int, text: PromptText, line: tuple[float, float]) -> str:
    """Without /tokenize: tokens = a + b x words, fitted from two probes' usage; never more
    words than target tokens (see size_exactly)."""
    a, b = line
    return text.text(min(max(int((target_tokens - a) / b), 0), max(target_tokens, 0)))
