"""Reproduce: verdicts per cell and overall against the shipped card."""

from __future__ import annotations

from bench.card.model import Card
from bench.verdict.card_source import from_card
from bench.verdict.reproduce import Tolerances, reproduce
from bench.verdict.run_source import from_results
from bench.verdict.tables import reproduce_markdown
from tests.verdict.synth import make_results


def _judge(card: Card, tol: Tolerances | None = None, **kw: object) -> object:
    run = from_results(make_results(card, **kw), name="bundle")  # type: ignore[arg-type]
    return reproduce(run, from_card(card), tol or Tolerances())


def test_the_card_at_twin_speed_10_reproduces_every_cell(card: Card) -> None:
    r = reproduce(
        from_results(make_results(card, speed=10.0), name="b"), from_card(card), Tolerances()
    )
    assert r.reproduced
    assert len(r.judged) == 55 and r.failed == []
    verdicts = [c.verdict for c in r.cells]
    assert verdicts.count("both over capacity") == 15
    assert verdicts.count("pass") == 40
    # Our figures were divided back by the speed factor: equal to the card's.
    check = next(c for c in r.cells if c.key == ("decode", "8K", 128))
    total = next(f for f in check.figures if f.metric.name == "total_tok_s")
    assert total.ours is not None and abs(total.ours - 1259.4) < 1e-9
    assert "REPRODUCED: 55 of 55" in reproduce_markdown(r)


def test_ignoring_the_speed_factor_would_fail(card: Card) -> None:
    run = from_results(make_results(card, speed=10.0), name="b")
    wrong = type(run)(**{**run.__dict__, "cells": {
        k: type(c)(**{**c.__dict__, "trials": {m: tuple(v * 10 for v in vs)
                                               for m, vs in c.trials.items()}})
        for k, c in run.cells.items()}})  # fmt: skip
    assert not reproduce(wrong, from_card(card), Tolerances()).reproduced


def test_one_cell_cut_by_10_percent_is_the_only_failure(card: Card) -> None:
    cut = make_results(card, speed=10.0, scale=lambda ctx, c: 0.9 if (ctx, c) == ("32K", 8) else 1)
    r = reproduce(from_results(cut, name="b"), from_card(card), Tolerances())
    assert not r.reproduced
    assert [c.key for c in r.failed] == [("decode", "32K", 8)]
    bad = {f.metric.name: round(f.delta_pct or 0, 1) for f in r.failed[0].figures}
    assert bad["total_tok_s"] == -10.0
    assert "NOT REPRODUCED: 54 of 55" in r.summary()


def test_tolerances_are_configurable(card: Card) -> None:
    slow = make_results(card, scale=lambda ctx, c: 0.93)
    run, ref = from_results(slow, name="b"), from_card(card)
    assert not reproduce(run, ref, Tolerances()).reproduced  # −7 % > 5 %
    assert reproduce(run, ref, Tolerances(throughput_pct=8.0, latency_pct=10.0)).reproduced
    # Latencies rise by 1/0.93 − 1 = 7.5 %: a 7 % latency tolerance fails them.
    assert not reproduce(run, ref, Tolerances(8.0, 7.0)).reproduced


def test_over_capacity_on_one_side_only_is_reported_as_such(card: Card) -> None:
    oc = {(m.context, m.concurrency) for m in card.measurements if m.over_capacity}
    moved = (oc - {("16K", 128)}) | {("8K", 128)}
    r = reproduce(
        from_results(make_results(card, over_capacity=moved), name="b"),
        from_card(card),
        Tolerances(),
    )
    failed = {c.key: c.verdict for c in r.failed}
    assert failed == {
        ("decode", "8K", 128): "over capacity here only",
        ("decode", "16K", 128): "over capacity on card only",
    }


def test_a_subset_run_is_judged_on_what_it_measured(card: Card) -> None:
    r = reproduce(
        from_results(make_results(card, contexts={"8K", "64K"}), name="b"),
        from_card(card),
        Tolerances(),
    )
    assert r.reproduced
    assert len(r.judged) == 16 + 2  # two decode rows and their prefill rows
    assert sum(c.verdict == "not measured here" for c in r.cells) == 55 - 18
    assert "37 of the card's 55 cells not measured here" in r.summary()


def test_a_failed_cell_fails(card: Card) -> None:
    res = make_results(card)
    cells = tuple(
        c.model_copy(update={"status": "invalid", "figures": None, "reason": "stream cut"})
        if (c.context_label, c.concurrency) == ("8K", 4)
        else c
        for c in res.cells
    )
    r = reproduce(
        from_results(res.model_copy(update={"cells": cells}), name="b"),
        from_card(card),
        Tolerances(),
    )
    assert [(c.key, c.verdict, c.note) for c in r.failed] == [
        (("decode", "8K", 4), "failed here", "invalid: stream cut")
    ]


def test_a_run_from_a_dirty_tree_says_so_in_the_header(card: Card) -> None:
    clean = make_results(card, speed=10.0)
    text = reproduce_markdown(
        reproduce(from_results(clean, name="b"), from_card(card), Tolerances())
    )
    assert "dirty tree" not in text
    dirty = clean.model_copy(update={"bench_version": "0.2.0.dev5+gabc1234.d20261203"})
    text = reproduce_markdown(
        reproduce(from_results(dirty, name="b"), from_card(card), Tolerances())
    )
    head = text.split("Tolerances:")[0]
    assert (
        "The run was made by bench 0.2.0.dev5+gabc1234.d20261203, from a dirty tree: tracked "
        "files had uncommitted changes" in head
    )
