"""Exact prompt sizes with /tokenize, and unique prefixes."""

from __future__ import annotations

import asyncio
import re

from bench.run import prompts


def _counter(overhead: int) -> prompts.Counter:
    """A tokenizer like a chat template + BPE: words, punctuation and a fixed overhead."""

    async def count(text: str) -> int:
        return overhead + len(re.findall(r"\w+|[^\w\s]", text))

    return count


def test_size_exactly_hits_the_target() -> None:
    text = prompts.PromptText("run1", 0, "8K", seed=0)
    for target in (300, 8192, 40_000):
        got_text, got = asyncio.run(prompts.size_exactly(target, text, _counter(11)))
        assert got == target
        assert len(re.findall(r"\w+|[^\w\s]", got_text)) + 11 == target


def test_prompts_differ_by_run_trial_and_context_and_repeat_for_resume() -> None:
    a = prompts.PromptText("run1", 0, "8K", 0).text(50)
    assert a == prompts.PromptText("run1", 0, "8K", 0).text(50)
    assert a != prompts.PromptText("run2", 0, "8K", 0).text(50)
    assert a.split("]")[0] != prompts.PromptText("run1", 1, "8K", 0).text(50).split("]")[0]
    assert a.split("]")[0] != prompts.PromptText("run1", 0, "16K", 0).text(50).split("]")[0]


def test_request_body_asks_for_continuous_usage_and_ignores_eos() -> None:
    body = prompts.request_body("chat", "m", "hi", 4096)
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["ignore_eos"] is True and body["max_tokens"] == 4096
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert prompts.request_body("completions", "m", "hi", 1)["prompt"] == "hi"
