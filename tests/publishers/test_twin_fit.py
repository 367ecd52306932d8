"""A twin profile fitted to a publisher's card, in virtual time (no sockets, no sleeps):
the closed loop the fit simulates, the fit against the InferenceX fixture's point, and a
profile some per cent slower. The fitted twin served over HTTP is tests/publishers/
test_fitted_twin.py."""

from __future__ import annotations

import itertools
import math

import pytest

from bench.errors import CardError
from bench.publishers.model import PublishedFigure, PublisherCard
from bench.publishers.workload import workload_of
from bench.twin import card_fit as twin_fit
from bench.twin import openloop
from bench.twin import profile as profiles
from tests.publishers.paths import DATA

INFERENCEX_DIR = DATA / "inferencex"

JUDGED_WITHIN_PCT = 3.5  # every judged figure of the fixture's point, simulated


@pytest.fixture(scope="module")
def card() -> PublisherCard:
    from bench.publishers import inferencex

    return inferencex.read(INFERENCEX_DIR, {"id": "101"})


@pytest.fixture(scope="module")
def fitted(card: PublisherCard) -> twin_fit.TwinFit:
    return twin_fit.fit(card)


def test_a_cap_of_c_with_every_request_due_at_0_is_a_closed_loop_of_c_streams() -> None:
    prof = profiles.load("tiny")
    arrivals = [(0.0, 64, 8 + i % 5) for i in range(12)]
    out = openloop.simulate(prof, arrivals, max_in_flight=3)
    assert [r.arrival_s for r in out[:3]] == [0.0, 0.0, 0.0]
    ends = sorted(r.finish_s for r in out)
    for r in out[3:]:  # each later request is sent the moment an earlier one ended
        assert any(math.isclose(r.arrival_s, e) for e in ends if e <= r.arrival_s)
    for r in out:  # never more than 3 open at once
        assert sum(1 for o in out if o.arrival_s <= r.arrival_s < o.finish_s) <= 3
    assert openloop.simulate(prof, arrivals) != out  # uncapped: all 12 at once
    with pytest.raises(ValueError, match="negative"):
        openloop.simulate(prof, arrivals, max_in_flight=-1)


def test_the_fit_serves_the_cards_point_at_its_judged_figures(
    card: PublisherCard, fitted: twin_fit.TwinFit
) -> None:
    by_name = {f.name: f for f in fitted.figures}
    judged = [f for f in card.figures if f.computed_as is not None and "p99" not in f.name]
    assert len(judged) >= 8
    for f in judged:
        off = by_name[f.name].off_pct
        assert off is not None and abs(off) <= JUDGED_WITHIN_PCT, (f.name, off)
    assert {"median_tpot", "median_ttft", "median_intvty"} <= set(fitted.targets)
    p = fitted.profile
    assert p.num_speculative_tokens == 0 and p.slow_request_fraction == 0.0
    assert p.max_num_seqs >= 4 and p.kv_capacity_tokens >= 4 * 2048
    text = "\n".join(fitted.lines())
    assert "median_tpot" in text and "published 0.0052224" in text


def test_a_slower_twin_is_that_much_slower(card: PublisherCard, fitted: twin_fit.TwinFit) -> None:
    w = workload_of(card)
    fast = twin_fit.simulate_figures(card, fitted.profile, w)
    slow = twin_fit.simulate_figures(card, twin_fit.slower(fitted.profile, 10.0), w)
    for name in ("median_tpot", "mean_e2el"):
        a, b = fast[name], slow[name]
        assert a is not None and b is not None
        assert b / a == pytest.approx(1.10, abs=0.01), name
    ia, ib = fast["median_intvty"], slow["median_intvty"]
    assert ia is not None and ib is not None and ia / ib == pytest.approx(1.10, abs=0.01)
    with pytest.raises(ValueError, match="slower"):
        twin_fit.slower(fitted.profile, math.nan)


def test_the_knob_moves_by_the_geometric_mean_of_its_figures() -> None:
    def f(name: str, key: str, value: float) -> PublishedFigure:
        return PublishedFigure.model_validate(
            {"name": name, "value": value, "unit": "ms", "definition": "d", "computed_as": key}
        )

    figs = (f("a", "tpot_mean_ms", 10.0), f("b", "interactivity", 100.0))
    # a: published 10, simulated 5: x2; b: 1000 / TPOT published 100, simulated 50 (a TPOT
    # twice too long): x0.5. Geometric mean 1.
    assert twin_fit._step(figs, {"a": 5.0, "b": 50.0}) == pytest.approx(1.0)
    assert twin_fit._step(figs, {"a": 5.0, "b": None}) == pytest.approx(2.0)
    assert twin_fit._step((), {}) == 1.0


def test_a_card_with_nothing_to_fit_to_is_refused(card: PublisherCard) -> None:
    bare = card.model_copy(
        update={"figures": tuple(f for f in card.figures if f.computed_as is None)}
    )
    with pytest.raises(CardError, match="nothing to fit a twin to"):
        twin_fit.fit(bare)


def test_a_capped_send_waits_its_delay_after_the_slot_frees() -> None:
    prof = profiles.load("tiny")
    arrivals = [(0.0, 64, 8) for _ in range(6)]
    plain = openloop.simulate(prof, arrivals, max_in_flight=2)
    delays = [0.0, 0.0, 0.003, 0.001, 0.002, 0.004]  # the first two never wait
    late = openloop.simulate(prof, arrivals, max_in_flight=2, send_delays_s=delays)
    assert [r.arrival_s for r in late[:2]] == [0.0, 0.0]
    ends = sorted(r.finish_s for r in late)
    for r, d in zip(late[2:], delays[2:], strict=True):  # sent d after some request ended
        assert any(math.isclose(r.arrival_s, e + d, abs_tol=1e-12) for e in ends)
    assert late[2].arrival_s > plain[2].arrival_s


def test_a_closed_loops_fit_does_not_hang_on_one_phase(card: PublisherCard) -> None:
    # Without the phases' draws every stream locks to one phase of the server's step and the
    # median TTFT jumps by most of a step between two nearby prefill costs; with them it moves
    # smoothly (the fit converges instead of circling).
    w = workload_of(card)
    base = twin_fit.base_profile(w)
    medians = []
    for k in (0.126, 0.128, 0.1298, 0.131):
        sims = twin_fit.simulate_figures(card, twin_fit.scaled(base, decode=0.1309, prefill=k), w)
        value = sims["median_ttft"]
        assert value is not None
        medians.append(value)
    steps = [b - a for a, b in itertools.pairwise(medians)]
    assert all(0 < s < 0.002 for s in steps), medians
