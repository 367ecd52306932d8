"""Issue 44: a cell of three trials, one of them invalid, says "2 of 3 trials valid" in
tables.md, report.html and `bench export`, and its figures are its valid trials' alone."""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from bench.card.parse import read_card
from bench.export.command import export
from bench.report.page import report_page
from bench.results import Results
from bench.run import card_tables
from bench.verdict.run_source import Verification
from tests.card.conftest import SHIPPED
from tests.support.synth import make_results, with_failed_scout, with_failed_trial


@pytest.fixture(scope="module")
def results() -> Results:
    """Three trials of the card's matrix; trial 1 of 8K x 4 cut, trial 2 of 16K's scout failed."""
    run = make_results(read_card(SHIPPED), trials=3, noise=0.02, seed=44)
    return with_failed_scout(with_failed_trial(run, "8K", 4, 1), "16K", 2)


def _valid_total_tok_s(results: Results) -> list[float]:
    return [
        c.figures.total_tok_s
        for c in results.cells
        if (c.context_label, c.concurrency) == ("8K", 4) and c.figures is not None
    ]


def test_tables_md_says_2_of_3_trials_valid_and_shows_their_mean(results: Results) -> None:
    text = card_tables.render(results)
    valid = _valid_total_tok_s(results)
    assert len(valid) == 2
    mean = f"{statistics.fmean(valid):,.1f}"
    matrix = next(x for x in text.splitlines() if x.startswith("| 8K | "))
    assert matrix.split(" | ")[3].startswith(f"{mean}<br>")
    assert matrix.split(" | ")[3].endswith(" TTFT<br>2 of 3 trials valid")
    assert matrix.count("trials valid") == 1  # the other cells: every trial valid
    assert (
        f"| Sustained decode | 8K | 4 | Valid; 2 of 3 trials valid (1 invalid: stream cut) "
        f"| {mean} |"
    ) in text
    repeated = text.split("## Repeated trials")[1]
    assert card_tables.TRIALS_NOTE in repeated
    row = next(x for x in repeated.splitlines() if x.startswith("| 8K | 4 |"))
    assert row.startswith(f"| 8K | 4 | 2 of 3 trials valid | {mean} ± ")
    assert "| 8K | 2 | 3 |" in repeated
    scout = next(x for x in text.splitlines() if x.startswith("| 16K context |"))
    assert scout.endswith(" TTFT<br>2 of 3 trials valid |")
    assert "| Prefill | 16K | 1 | Valid; 2 of 3 trials valid (1 invalid: HTTP 500) |" in text


def test_report_html_says_2_of_3_trials_valid(results: Results) -> None:
    page = report_page(results, ())
    mean = f"{statistics.fmean(_valid_total_tok_s(results)):,.1f}"
    assert f"<td>{mean}<br>" in page
    assert " TTFT<br>2 of 3 trials valid</td>" in page
    assert '<td class="long">Valid; 2 of 3 trials valid (1 invalid: stream cut)</td>' in page
    assert "<td>2 of 3 trials valid</td>" in page  # Repeated trials


def test_bench_export_counts_each_cells_valid_trials(results: Results, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "results.json").write_text(results.model_dump_json(), encoding="utf-8")
    out = tmp_path / "run.csv"
    export(run, "csv", out, with_requests=False, how=Verification((), False))
    with out.open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    cell = [
        r for r in rows if (r["phase"], r["context"], r["concurrency"]) == ("decode", "8K", "4")
    ]
    assert {(r["cell_valid_trials"], r["cell_trials"]) for r in cell} == {("2", "3")}
    assert {r["trial"]: r["status"] for r in cell} == {"0": "valid", "1": "invalid", "2": "valid"}
    totals = [float(r["value"]) for r in cell if r["figure"] == "total_tok_s" and r["value"]]
    assert totals == pytest.approx(_valid_total_tok_s(results))
    scout = [r for r in rows if (r["phase"], r["context"]) == ("prefill", "16K")]
    assert {(r["cell_valid_trials"], r["cell_trials"]) for r in scout} == {("2", "3")}
    other = [
        r for r in rows if (r["phase"], r["context"], r["concurrency"]) == ("decode", "8K", "2")
    ]
    assert {(r["cell_valid_trials"], r["cell_trials"]) for r in other} == {("3", "3")}
