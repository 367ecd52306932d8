"""Issue 44: a cell with one invalid trial of three is judged on its two valid trials, in
`bench compare` and `bench reproduce` alike, and says "2 of 3 trials valid" wherever it is
shown (its row, the list above the tables, the reproduce summary, the HTML page)."""

from __future__ import annotations

import statistics

import pytest

from bench.card.model import Card
from bench.errors import Exit
from bench.results import Results
from bench.verdict.card_source import from_card
from bench.verdict.command import compare_exit
from bench.verdict.compare import Policy, compare
from bench.verdict.page import compare_page, reproduce_page
from bench.verdict.reproduce import Tolerances, reproduce
from bench.verdict.run_figures import from_results
from bench.verdict.run_source import merge_runs
from bench.verdict.tables import compare_markdown, compare_tables, reproduce_markdown
from tests.support.synth import make_results, with_failed_trial

KEY = ("decode", "8K", 4)
NOTE = "2 of 3 trials valid; 1 invalid: stream cut"


def _valid(results: Results, figure: str) -> list[float]:
    return [
        getattr(c.figures, figure)
        for c in results.cells
        if (c.context_label, c.concurrency) == KEY[1:] and c.figures is not None
    ]


def test_the_cell_keeps_its_valid_trials_and_counts_every_trial(card: Card) -> None:
    res = with_failed_trial(make_results(card, trials=3, noise=0.01, seed=2), "8K", 4, 1)
    cell = from_results(res).cells[KEY]
    assert cell.status == "valid" and cell.runs == (0, 2)
    assert cell.trials["total_tok_s"] == pytest.approx(_valid(res, "total_tok_s"))
    assert cell.trials_run == 3 and cell.valid_trials == 2
    assert cell.trials_count == "2 of 3 trials valid" and cell.trials_note == NOTE
    # Every trial invalid: nothing to judge, as before; a not-ready trial still spoils it.
    bad = res
    for trial in (0, 2):
        bad = with_failed_trial(bad, "8K", 4, trial)
    assert from_results(bad).cells[KEY].status == "invalid"
    gate = with_failed_trial(res, "8K", 4, 0, status="not_ready", reason="gate")
    assert from_results(gate).cells[KEY].status == "invalid"  # never judged


def test_compare_judges_the_cell_on_its_valid_trials_and_says_so(card: Card) -> None:
    a = from_results(make_results(card, trials=3, noise=0.01, seed=1), name="a")
    res = with_failed_trial(make_results(card, trials=3, noise=0.01, seed=2), "8K", 4, 1)
    c = compare(a, from_results(res, name="b"), Policy())
    cell = next(x for x in c.cells if x.key == KEY)
    assert cell.mark != "cannot compare" and c.cannot_compare == []
    total = next(f for f in cell.figures if f.metric.name == "total_tok_s")
    assert total.b == pytest.approx(statistics.fmean(_valid(res, "total_tok_s")))
    assert total.p_value is not None  # tested: 3 trials of A against B's 2 valid ones
    row = next(
        r for t in compare_tables(c) for r in t.rows if r[0].text == "8K" and r[1].text == "4"
    )
    assert row[-1].text.endswith("; B 2 of 3 trials valid") and row[-1].css in ("warn", "worse")
    shown = [r[-1].text for t in compare_tables(c) for r in t.rows]
    assert sum("trials valid" in x for x in shown) == 1  # every other cell: all its trials
    text = compare_markdown(c)
    assert "Judged on their valid trials only (1 cells; their other trials had no figures):" in text
    assert f"- decode 8K x 4: B {NOTE}" in text
    assert f"B {NOTE}" in compare_page([c])
    assert compare_exit([c]) == Exit.OK


def test_a_side_merged_from_bundles_counts_a_bundles_invalid_cell(card: Card) -> None:
    a = merge_runs(
        [from_results(make_results(card, noise=0.01, seed=s), name=f"a{s}") for s in (1, 2, 3)],
        "A",
    )
    runs = [make_results(card, noise=0.01, seed=s) for s in (4, 5, 6)]
    runs[1] = with_failed_trial(runs[1], "8K", 4, 0)  # one bundle's only trial of the cell
    b = merge_runs([from_results(r, name=f"b{i}") for i, r in enumerate(runs)], "B")
    cell = b.cells[KEY]
    assert cell.status == "valid" and cell.trials_note == NOTE
    assert cell.trials["total_tok_s"] == pytest.approx(
        [x for r in (runs[0], runs[2]) for x in _valid(r, "total_tok_s")]
    )
    c = compare(a, b, Policy())
    delta = next(x for x in c.cells if x.key == KEY)
    assert delta.mark != "cannot compare" and delta.figures
    assert f"- decode 8K x 4: B {NOTE}" in compare_markdown(c)


def test_reproduce_judges_the_cell_on_its_valid_trials_and_says_so(card: Card) -> None:
    res = with_failed_trial(make_results(card, trials=3, noise=0.005, seed=3), "8K", 4, 1)
    r = reproduce(from_results(res, name="b"), from_card(card), Tolerances())
    check = next(x for x in r.cells if x.key == KEY)
    assert check.verdict == "pass" and check.note == NOTE
    assert r.fewer_trials == [check] and r.not_valid == []
    total = next(f for f in check.figures if f.metric.name == "total_tok_s")
    assert total.ours == pytest.approx(statistics.fmean(_valid(res, "total_tok_s")))
    assert total.ci_pct is not None  # the interval of two trials' mean
    assert r.overall == "REPRODUCED"
    assert "; 1 judged on their valid trials only" in r.summary()
    text = reproduce_markdown(r)
    assert f"- decode 8K x 4: pass ({NOTE})" in text
    row = next(x for x in text.splitlines() if x.startswith("| 8K | 4 |"))
    assert row.endswith(f"| pass ({NOTE}) |")
    assert f"pass ({NOTE})" in reproduce_page(r)
