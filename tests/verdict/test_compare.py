"""Compare: run-to-run noise from trials only, Welch on logs, BH over the matrix, MDE."""

from __future__ import annotations

import dataclasses

import pytest

from bench import stats
from bench.card.model import Card
from bench.errors import Exit
from bench.results import Results
from bench.verdict import headline, page
from bench.verdict.cells import BY_NAME, Cell
from bench.verdict.command import compare_exit
from bench.verdict.compare import POWER, Policy, compare, figure_delta
from bench.verdict.run_figures import from_results, sweep_server_s
from bench.verdict.run_source import merge_runs
from bench.verdict.tables import compare_markdown
from tests.support.synth import make_results


def test_identical_profiles_with_three_noisy_trials_flag_nothing(card: Card) -> None:
    for pair in range(5):
        a = from_results(make_results(card, trials=3, noise=0.01, seed=2 * pair), name="a")
        b = from_results(make_results(card, trials=3, noise=0.01, seed=2 * pair + 1), name="b")
        c = compare(a, b, Policy())
        assert c.flagged == [], [f"{x.key} {x.mark}" for x in c.flagged]
        methods = {f.method for x in c.cells for f in x.figures if x.key[0] == "decode"}
        assert methods == {"pooled"}  # 1 % everywhere: pooling is sound
        assert compare_exit([c]) == Exit.OK


def test_eight_percent_slower_at_64_and_above_flags_exactly_those(card: Card) -> None:
    def slower(ctx: str, conc: int) -> float:
        return 1 / 1.08 if conc >= 64 else 1.0

    a = from_results(make_results(card, trials=3, noise=0.01, seed=1), name="a")
    b = from_results(make_results(card, trials=3, noise=0.01, seed=2, scale=slower), name="b")
    c = compare(a, b, Policy())
    expected = {("decode", "8K", 64), ("decode", "8K", 128), ("decode", "16K", 64)}
    assert {x.key for x in c.flagged} == expected
    assert {x.mark for x in c.flagged} == {"regressed"}
    cell = next(x for x in c.cells if x.key == ("decode", "8K", 64))
    marks = {f.metric.name: f.mark for f in cell.figures}
    # Slower means less throughput and more latency: all four are regressions.
    assert marks == dict.fromkeys(
        ("total_tok_s", "per_request_tok_s", "ttft_s", "tbt_s"), "regressed"
    )
    total = next(f for f in cell.figures if f.metric.name == "total_tok_s")
    assert total.ci_pct is not None and -12.0 < total.ci_pct[0] < total.ci_pct[1] < 0
    assert total.delta_pct is not None and -9.5 < total.delta_pct < -5.5
    assert total.p_value is not None and total.p_value < 0.001
    assert compare_exit([c]) == Exit.NOT_REPRODUCED


def test_faster_is_improved_and_lower_latency_is_better(card: Card) -> None:
    a = from_results(make_results(card, trials=3, noise=0.005, seed=1), name="a")
    b = from_results(
        make_results(card, trials=3, noise=0.005, seed=2, scale=lambda ctx, c: 1.2), name="b"
    )
    c = compare(a, b, Policy())
    decode = [x for x in c.cells if x.key[0] == "decode" and x.figures]
    assert decode and {x.mark for x in decode} == {"improved"}


def test_one_trial_a_side_cannot_tell_noise_from_change(card: Card) -> None:
    # Issue 14: the spread of requests inside one window is not run-to-run noise.
    a = from_results(make_results(card, seed=1), name="a")
    b = from_results(make_results(card, seed=2, scale=lambda ctx, c: 0.9), name="b")
    c = compare(a, b, Policy())
    assert c.raw_only and c.flagged == []
    cell = next(x for x in c.cells if x.key == ("decode", "8K", 16))
    tbt = next(f for f in cell.figures if f.metric.name == "tbt_s")
    assert tbt.method == "raw" and tbt.mark == "raw" and tbt.p_value is None
    assert tbt.delta_pct is not None and abs(tbt.delta_pct - (1 / 0.9 - 1) * 100) < 1e-6
    text = compare_markdown(c)
    assert "noise cannot be told from change" in text
    assert "CANNOT TELL NOISE FROM CHANGE (ONE TRIAL A SIDE): RAW Δ ONLY" in text
    assert compare_exit([c]) == Exit.PARTIAL


def test_unchanged_at_1_percent_noise_is_equivalent_within_5_percent(card: Card) -> None:
    a = from_results(make_results(card, trials=3, noise=0.01, seed=1), name="a")
    b = from_results(make_results(card, trials=3, noise=0.01, seed=2), name="b")
    c = compare(a, b, Policy())
    f = next(f for x in c.cells for f in x.figures if f.metric.name == "total_tok_s")
    assert f.mark == "unchanged" and f.mde_pct is not None and f.equivalence is not None
    # pooled sd ~1 %, 3 trials a side, the cells' alpha / 2 = 0.02 over m at 80 % power: 4.1 %;
    # more where this cell's own runs are noisier than that (compare.mde_noise).
    assert f.sd_log is not None and f.df is not None
    moderated = stats.mde_pct(f.sd_log, 3, 3, alpha=c.level_for_one, power=POWER, df=f.df)
    assert 2.5 < moderated < 5.0 and moderated <= f.mde_pct < 2 * moderated
    assert (f.mde_pct > moderated) == (f.mde_sd_log is not None)
    e = f.equivalence
    assert f.outcome == "equivalent" and -5.0 < e.low_pct < e.high_pct < 5.0
    text = compare_markdown(c)
    band = f"[{e.low_pct:+.1f}, {e.high_pct:+.1f}]".replace("-", "−")
    assert f"equivalent within ±5 % {band}" in text
    assert "MDE median" in text
    assert text.rstrip().endswith(
        "EVERY CELL EQUIVALENT WITHIN ±5 % (3 + 3 TRIALS, ONE SERVER START A SIDE); "
        "NOT MEASURED BY EITHER SIDE: 15"
    )
    assert compare_exit([c]) == Exit.OK
    # A margin narrower than the noise allows leaves them not resolved: exit 11, and the line
    # says what would resolve it.
    tight = compare(a, b, Policy(margin_pct=0.5))
    line = headline.verdict(tight)
    assert line.startswith("NOT RESOLVED: CHANGES UNDER ") and "±0.5 % NEEDS ABOUT " in line
    assert compare_exit([tight]) == Exit.INCONCLUSIVE
    assert "; not resolved; MDE " in compare_markdown(tight)
    # the page colours only an equivalence as a pass
    assert 'class="verdict pass">EVERY CELL EQUIVALENT' in page.compare_page([c])
    assert 'class="verdict open">NOT RESOLVED: ' in page.compare_page([tight])


def test_benjamini_hochberg_controls_false_alarms_over_the_matrix(card: Card) -> None:
    # Without a correction, ~5 % of ~170 figures of identical runs would be flagged.
    flagged_runs = 0
    for seed in range(20):
        a = from_results(make_results(card, trials=3, noise=0.01, seed=100 + 2 * seed))
        b = from_results(make_results(card, trials=3, noise=0.01, seed=101 + 2 * seed))
        flagged_runs += bool(compare(a, b, Policy()).flagged)
    assert flagged_runs <= 3


def test_welch_per_cell_when_noise_differs_between_cells() -> None:
    metric = BY_NAME["ttft_s"]
    a = Cell("decode", "8K", 1, "valid", trials={"ttft_s": (1.00, 1.01, 0.99)})
    b = Cell("decode", "8K", 1, "valid", trials={"ttft_s": (1.12, 1.13, 1.11)})
    d = figure_delta(metric, a, b, Policy())
    assert d.method == "welch log" and d.p_value is not None and d.p_value < 0.001
    assert d.ci_pct is not None and d.ci_pct[0] > 5.0


def test_several_bundles_per_side_are_trials(card: Card) -> None:
    runs_a = [from_results(make_results(card, noise=0.01, seed=s), name=f"a{s}") for s in (1, 2, 3)]
    runs_b = [from_results(make_results(card, noise=0.01, seed=s), name=f"b{s}") for s in (4, 5, 6)]
    a, b = merge_runs(runs_a, "A"), merge_runs(runs_b, "B")
    assert len(a.cells[("decode", "8K", 4)].trials["total_tok_s"]) == 3
    c = compare(a, b, Policy())
    assert not c.raw_only and c.flagged == []


def _spoil(res: Results, key: tuple[str, int], status: str) -> Results:
    cells = tuple(
        x.model_copy(update={"status": status, "reason": "gate never held"})
        if (x.context_label, x.concurrency) == key
        else x
        for x in res.cells
    )
    return res.model_copy(update={"cells": cells})


def test_not_valid_cells_cannot_be_compared_and_are_listed(card: Card) -> None:
    a = from_results(make_results(card, trials=3, noise=0.01, seed=1), name="a")
    res = _spoil(make_results(card, trials=3, noise=0.01, seed=2), ("8K", 8), "not_ready")
    b = from_results(res, name="b")
    c = compare(a, b, Policy())
    bad = next(x for x in c.cells if x.key == ("decode", "8K", 8))
    assert bad.mark == "cannot compare" and not bad.flagged and bad.figures == ()
    assert c.cannot_compare == [bad]
    text = compare_markdown(c)
    assert "- decode 8K x 8: not ready in B: 3 of 3 trials not ready: gate never held" in text
    assert text.rstrip().endswith(
        "EVERY CELL EQUIVALENT WITHIN ±5 % (3 + 3 TRIALS, ONE SERVER START A SIDE); "
        "CANNOT COMPARE 1 CELLS; NOT MEASURED BY EITHER SIDE: 15"
    )
    assert compare_exit([c]) == Exit.PARTIAL


def test_settings_that_differ_between_sides_are_not_comparable(card: Card) -> None:
    a = from_results(make_results(card, trials=3, noise=0.01, seed=1), name="a")
    res = make_results(card, trials=3, noise=0.01, seed=2)
    res = res.model_copy(update={"settings": res.settings.model_copy(update={"max_tokens": 256})})
    c = compare(a, from_results(res), Policy())
    assert not c.settings.comparable and compare_exit([c]) == Exit.NOT_COMPARABLE
    ok = compare(a, from_results(res), Policy(accept=frozenset({"max_tokens"})))
    assert ok.settings.comparable


def test_status_change_and_metadata_are_listed(card: Card) -> None:
    a = from_results(make_results(card, trials=3, noise=0.01, seed=1), name="a")
    oc = {(m.context, m.concurrency) for m in card.measurements if m.over_capacity}
    b = from_results(
        make_results(
            card, trials=3, noise=0.01, seed=2, over_capacity=oc | {("8K", 128)}, version="0.31.0"
        ),
        name="b",
    )
    c = compare(a, b, Policy())
    assert [(x.key, x.mark) for x in c.flagged] == [(("decode", "8K", 128), "status changed")]
    assert ("server version", "0.30.1rc1.dev452+g73a583112", "0.31.0") in c.metadata_diff
    text = compare_markdown(c)
    assert "- server version: 0.30.1rc1.dev452+g73a583112 → 0.31.0" in text
    assert "Total tok/s: 0 improved, 0 regressed, 32 equivalent, 0 not resolved of 32" in text
    assert (
        "1 OF 40 CELLS CHANGED, 39 EQUIVALENT WITHIN ±5 %; NOT MEASURED BY EITHER SIDE: 15" in text
    )
    assert c.settings.comparable  # the engine is what compare compares
    assert dataclasses.replace(c, cells=()).flagged == []


def test_a_side_from_a_dirty_tree_says_so_in_the_header(card: Card) -> None:
    a = from_results(make_results(card), name="a")
    assert "dirty tree" not in compare_markdown(compare(a, a, Policy()))
    dirty = make_results(card).model_copy(update={"bench_version": "0.2.0.dev5+gabc1234.d20261203"})
    b = from_results(dirty, name="b")
    head = compare_markdown(compare(a, b, Policy())).split("What differs")[0]
    assert "A (a)" not in head
    assert "B (b) was made by bench 0.2.0.dev5+gabc1234.d20261203, from a dirty tree" in head


def test_the_verdict_reports_the_server_time_it_took(card: Card) -> None:
    """Per side: the sum of its runs' sweeps in server time, whatever the speed factor."""
    runs = [make_results(card, trials=1, noise=0.01, seed=s, speed=5.0) for s in (1, 2, 3)]
    valid = sum(1 for c in runs[0].cells if c.status == "valid")
    # 5 s before the first cell, then 41 server seconds per measured cell, the last one
    # ending 1 s before the next would start: the same at any speed factor.
    assert sweep_server_s(runs[0]) == pytest.approx(5.0 + 41.0 * valid - 1.0)
    a = merge_runs([from_results(r, name="a") for r in runs], "A")
    b = from_results(make_results(card, trials=3, noise=0.01, seed=9), name="B")
    assert a.server_s == pytest.approx((5.0 + 41.0 * valid - 1.0,) * 3)
    text = compare_markdown(compare(a, b, Policy()))
    a_h = 3 * (5.0 + 41.0 * valid - 1.0) / 3600
    b_h = (5.0 + 41.0 * 3 * valid - 1.0) / 3600  # one run of 3 trials
    assert (
        f"Server time of this verdict: A {a_h:.2f} h over 3 runs; "
        f"B {b_h:.2f} h over 1 run; {a_h + b_h:.2f} h in all"
    ) in text


def test_cells_neither_side_measured_are_not_counted_as_compared(card: Card) -> None:
    """The card's 15 over-capacity cells are over capacity in A and in B: no figures on
    either side. They are listed as not measured by either side, never among the cells
    compared (issue 15: "1 of 55 cells changed")."""

    def slower(ctx: str, conc: int) -> float:
        return 1 / 1.2 if (ctx, conc) == ("8K", 64) else 1.0

    a = from_results(make_results(card, trials=3, noise=0.01, seed=1), name="a")
    b = from_results(make_results(card, trials=3, noise=0.01, seed=2, scale=slower), name="b")
    c = compare(a, b, Policy())
    assert len(c.cells) == 55 and len(c.unmeasured) == 15
    assert {x.a.status for x in c.unmeasured if x.a} == {"over_capacity"}
    assert {x.key for x in c.flagged} == {("decode", "8K", 64)}
    verdict = headline.verdict(c)
    assert verdict.startswith("1 OF 40 CELLS CHANGED")
    assert "NOT MEASURED BY EITHER SIDE: 15" in verdict
    text = compare_markdown(c)
    assert "Not measured by either side: 15 cells" in text
    assert compare_exit([c]) == Exit.NOT_REPRODUCED
