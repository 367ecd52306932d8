"""tools.fingerprint_cost: the answer fingerprint, long-context retrieval check included,
costs under 5 % of a card sweep's server time on the twin's published profile (issue 33),
measured in virtual time."""

from __future__ import annotations

import pytest

from bench.twin import profile as profiles
from bench.twin import virtual
from bench.twin.engine import TwinScheduler
from tools import fingerprint_cost


def test_the_fingerprint_is_under_five_percent_of_the_card_sweep(
    capsys: pytest.CaptureFixture[str],
) -> None:
    cost = fingerprint_cost.measure("published")
    # the card's 33 cells; 3 short, the reasoning and tool-call prompts, 6 contexts
    assert cost.cells == 33 and cost.answers == 11
    assert 1200 < cost.sweep_s < 1800  # 33 windows of 30 s, their gates, 7 scouts
    assert cost.share <= 0.05
    # the retrieval check rides on the context prompts: a question's worth of prefill each
    assert abs(cost.retrieval_s) < 0.01 * cost.fingerprint_s
    assert fingerprint_cost.main([]) == 0
    out = capsys.readouterr().out
    assert f"share: {cost.share:.2%} of the sweep" in out
    assert "with the retrieval check" in out


def test_the_costed_context_prompts_carry_the_code_and_the_question() -> None:
    prof = profiles.load("published")
    decode, _ = fingerprint_cost.card_contexts(prof)
    # without the code and question the prompts are other token sequences: other times
    assert fingerprint_cost.fingerprint_s(prof, decode) != fingerprint_cost.fingerprint_s(
        prof, decode, retrieval=False
    )


def test_nested_prompts_prefill_the_longest_context_once() -> None:
    prof = profiles.load("published")
    decode, _ = fingerprint_cost.card_contexts(prof)
    spent, _ = fingerprint_cost.fingerprint_s(prof, decode)
    cold = sum(
        virtual.prefill_ttft_s(TwinScheduler(prof, 0), virtual.prompt_ids(n, i))
        for i, n in enumerate(decode)
    )
    longest = virtual.prefill_ttft_s(TwinScheduler(prof, 0), virtual.prompt_ids(max(decode), 1))
    assert longest < spent < 0.75 * cold  # the shorter prompts' prefill comes from the cache
