"""Exact prompt sizes with /tokenize, and unique prefixes."""

from __future__ import annotations

import asyncio
import random
import re

from bench.failures import ErrorKind
from bench.run import prompts
from bench.run.sweep import WARMUP_LABEL, _served_prompt
from bench.stream.records import RequestRecord
from bench.twin.tokenizer import Tokenizer


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


def test_a_prompt_count_no_server_could_have_is_dropped_and_fails_the_request() -> None:
    """usage.prompt_tokens above max_model_len (or 0) is no count: the sweep's own request
    fails as implausible and the sweep falls back on its own count (the fuzzer's find:
    11,750,101 for a 256-token prompt stretched a readiness time-out 50-fold)."""
    for n in (1, 256, 4096):
        ok = RequestRecord(worker=0, start_s=0.0)
        ok.prompt_tokens = n
        _served_prompt(ok, 4096)
        assert ok.prompt_tokens == n and ok.failure is None
    for n in (0, 4097, 11_750_101):
        bad = RequestRecord(worker=0, start_s=0.0)
        bad.prompt_tokens = n
        _served_prompt(bad, 4096)
        assert bad.prompt_tokens is None
        assert bad.failure is not None and bad.failure.kind is ErrorKind.IMPLAUSIBLE_USAGE
        assert f"prompt_tokens {n:,} for a server whose max_model_len is 4,096" in (bad.error or "")


def test_no_two_prompts_of_a_run_share_their_first_kv_block() -> None:
    # vLLM's KV blocks are 16 tokens, keyed by their prefix: a first block two prompts share is
    # read from the cache the second time. With the run id first, the warm-up's and a scout's
    # first 16 tokens (the twin's tokenizer and ChatML template) were one in about 11 % of run
    # ids, and those runs' 128-token prefills were 12 % fast.
    rng = random.Random(0)
    tok = Tokenizer()
    for _ in range(500):
        run_id = f"{rng.getrandbits(48):012x}"  # bench run's run ids: 12 hex digits
        firsts = {
            tuple(tok.pieces(tok.render_chat([{"role": "user", "content": text}], True))[:16])
            for trial, label in ((-1, WARMUP_LABEL), (0, "128"), (1, "128"), (0, "256"))
            for text in [prompts.PromptText(run_id, trial, label, 0).text(64)]
        }
        assert len(firsts) == 4, run_id
