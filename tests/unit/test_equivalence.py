"""Equivalence within a margin (bench.verdict.equivalence): the test, the runs it takes, the
margin as the user writes it."""

from __future__ import annotations

import math
import random

import pytest

from bench.errors import UsageError
from bench.verdict import equivalence as eqv
from bench.verdict.command import margins


def test_an_interval_inside_the_band_is_equivalent_and_one_across_its_edge_is_not() -> None:
    inside = eqv.tost(eqv.LogSpread(math.log(1.01), 0.01, math.inf), 5.0, 0.05)
    assert inside.equivalent and -5.0 < inside.low_pct < 1.0 < inside.high_pct < 5.0
    # centre +3 %, se 1.5 %: the upper one-sided bound, 3 + 1.645 x 1.5 ~ 5.5 %, is outside.
    edge = eqv.tost(eqv.LogSpread(math.log(1.03), 0.015, math.inf), 5.0, 0.05)
    assert not edge.equivalent and edge.high_pct > 5.0
    # the band is Δ % in (-m, +m): log(0.95) on the low side, not -log(1.05)
    low = eqv.tost(eqv.LogSpread(math.log(0.952), 1e-6, math.inf), 5.0, 0.05)
    assert low.equivalent


def test_the_run_levels_noise_counts_against_equivalence() -> None:
    own = eqv.spread(0.0, 0.01, 20.0, (3, 3))
    both = eqv.spread(0.0, 0.01, 20.0, (3, 3), (0.12, 4.0, (3, 3)))
    assert both.se > 9 * own.se and both.df < 6.0
    assert eqv.tost(own, 5.0, 0.04).equivalent and not eqv.tost(both, 5.0, 0.04).equivalent


def test_runs_to_show_gives_the_power_it_promises() -> None:
    """At the runs it names, two one-sided tests on simulated identical sides (normal log
    noise) show ±5 % in about 80 % of compares; at half as many, in clearly fewer."""
    sd, margin, alpha = 0.05, 5.0, 0.04
    n = eqv.runs_to_show(sd, 0.0, margin, alpha, run_level=False)
    assert n is not None and 15 < n < 40

    def shown(runs: int, rng: random.Random) -> bool:
        a = [rng.gauss(0.0, sd) for _ in range(runs)]
        b = [rng.gauss(0.0, sd) for _ in range(runs)]
        ma, mb = sum(a) / runs, sum(b) / runs
        var = (sum((x - ma) ** 2 for x in a) + sum((x - mb) ** 2 for x in b)) / (2 * runs - 2)
        s = eqv.LogSpread(mb - ma, math.sqrt(var * 2.0 / runs), 2.0 * runs - 2.0)
        return eqv.tost(s, margin, alpha).equivalent

    rng = random.Random(7)
    at_n = sum(shown(n, rng) for _ in range(2000)) / 2000
    at_half = sum(shown(n // 2, rng) for _ in range(2000)) / 2000
    assert 0.76 <= at_n <= 0.88 and at_half < 0.6


def test_more_noise_or_a_narrower_margin_takes_more_runs() -> None:
    base = eqv.runs_to_show(0.05, 0.0, 5.0, 0.04, run_level=False)
    assert base is not None
    assert (eqv.runs_to_show(0.10, 0.0, 5.0, 0.04, run_level=False) or 0) > base
    assert (eqv.runs_to_show(0.05, 0.05, 5.0, 0.04, run_level=True) or 0) > base
    assert (eqv.runs_to_show(0.05, 0.0, 2.0, 0.04, run_level=False) or 0) > base
    assert eqv.runs_to_show(5.0, 0.0, 0.1, 0.04, run_level=False) is None  # past MAX_RUNS


def test_margins_as_written_on_the_command_line() -> None:
    assert margins([]) == {"margin_pct": 5.0, "figure_margins": ()}
    assert margins(["3", "ttft_s=10%"]) == {
        "margin_pct": 3.0,
        "figure_margins": (("ttft_s", 10.0),),
    }
    for bad, said in (
        ("0", "more than 0"),
        ("nan", "more than 0"),
        ("100", "less than 100"),
        ("five", "not a number"),
        ("ttfx_s=5", "no figure named 'ttfx_s'"),
    ):
        with pytest.raises(UsageError, match=said):
            margins([bad])
