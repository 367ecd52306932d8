"""Issue 14 acceptance on the twin in virtual time: a full-card reproduce of `published`
with 3 trials passes; a variant 5 % slower at concurrency >= 64 is flagged by compare on
exactly those cells, on every figure the variant changes."""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from bench.twin import profile as profiles
from bench.verdict.card_source import load_card
from bench.verdict.compare import Policy, compare
from bench.verdict.reproduce import Tolerances, reproduce
from tests.card.conftest import SHIPPED
from tools import verdict_power as power
from tools.compare_twin import slower_variant

pytestmark = pytest.mark.timeout(300)


def test_full_card_reproduce_of_published_with_3_trials_passes(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    p, base = published
    ours = power.side(p, base, [11, 12, 13], "published x3")
    ours = dataclasses.replace(ours, twin=True)
    r = reproduce(ours, load_card(SHIPPED), Tolerances())
    # The twin's noiseless figures are within the band; 3 trials of 1 % noise keep each
    # interval inside it. Over-capacity cells are not simulated here: not measured.
    judged = [c for c in r.cells if c.verdict not in ("not measured here",)]
    # Every row at the prompt size `bench run` sends (251K is 256K trimmed: 257,984 tokens);
    # at 251 x 1024 the twin's TTFT at 251K x 4 came out 17 % above the card.
    assert all(c.verdict == "pass" for c in judged), [
        (c.key, c.verdict, [(f.metric.name, f.ci_pct) for f in c.figures])
        for c in judged
        if c.verdict != "pass"
    ]
    assert len(judged) == 33 + 7
    assert all(f.ci_pct is not None for c in judged for f in c.figures if f.card is not None)


def test_a_variant_5_percent_slower_at_64_and_up_is_flagged_exactly_there(
    published: tuple[profiles.Profile, power.Base], tmp_path: pathlib.Path
) -> None:
    p, base = published
    slow_profile = profiles.load(str(slower_variant("published", 5.0, 64, tmp_path / "s.json")))
    slow = power.simulate_card(slow_profile, SHIPPED)
    changed = {
        (key, m)
        for key, figs in base.figures.items()
        for m, v in figs.items()
        if abs(slow.figures[key][m] / v - 1) > 0.01
    }
    assert {k for k, _ in changed} == {k for k in base.figures if k[0] == "decode" and k[2] >= 64}
    a = power.side(p, base, [21, 22, 23], "A")
    b = power.side(p, slow, [31, 32, 33], "B")
    c = compare(a, b, Policy())
    assert {x.key for x in c.flagged} == {k for k, _ in changed}
    flagged = {(x.key, f.metric.name) for x in c.cells for f in x.figures if f.mark == "regressed"}
    assert flagged == changed
    assert not any(f.mark == "improved" for x in c.cells for f in x.figures)
