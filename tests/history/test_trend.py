"""`bench history trend` on a SQLite history filled with rows (bench.history.trend)."""

from __future__ import annotations

import pathlib

import pytest

from bench import stats
from bench.card.model import Card
from bench.errors import UsageError
from bench.history import ingest, schema, trend
from bench.history.database import Target
from bench.results import Results
from tests.history.conftest import environment, unsigned_record
from tests.support.synth import make_results

CELL = trend.parse_cell("8K:64")


def _run(card: Card, n: int, **kw: object) -> Results:
    r = make_results(card, contexts={"8K"}, seed=n, **kw)  # type: ignore[arg-type]
    return r.model_copy(
        update={"run_id": f"night-{n:02d}", "created_at": f"2026-11-{n:02d}T02:00:00Z"}
    )


def _fill(tmp: pathlib.Path, runs: list[tuple[Results, dict[str, object]]]) -> Target:
    target = Target("sqlite", str(tmp / "h.sqlite3"))
    with schema.opened(target) as conn:
        for results, env in runs:
            ingest.write(conn, unsigned_record(results, env))
    return target


def _points(target: Target, **kw: str) -> list[trend.Point]:
    with schema.opened(target, create=False) as conn:
        return trend.points(conn, CELL, "total_tok_s", **kw)


def test_cells_and_figures_are_checked() -> None:
    assert trend.parse_cell("8k:prefill") == trend.CellChoice("prefill", "8K", 1)
    with pytest.raises(UsageError, match="not CONTEXT:CONCURRENCY"):
        trend.parse_cell("8K-64")
    with pytest.raises(UsageError) as caught:
        trend.check_figure(trend.parse_cell("8K:prefill"), "total_tok_s")
    assert caught.value.one_line() == (
        "--figure total_tok_s: not a prefill figure (one of prefill_tok_s, ttft_s)"
    )


def test_one_point_per_run_in_date_order_with_an_interval_over_trials(
    tmp_path: pathlib.Path, card: Card
) -> None:
    runs = [_run(card, n, trials=3, noise=0.02) for n in (3, 1, 2)]
    target = _fill(tmp_path, [(r, environment()) for r in runs])
    found = _points(target)
    assert [p.run_id for p in found] == ["night-01", "night-02", "night-03"]
    first = runs[1]
    expected = [c.figures.total_tok_s for c in first.cells  # type: ignore[union-attr]
                if (c.context_label, c.concurrency) == ("8K", 64)]  # fmt: skip
    assert found[0].values == pytest.approx(expected)  # speed 1: client = server figures
    ci = stats.mean_ci(expected)
    assert found[0].value_text() == f"{ci.mean:,.4g} ± {(ci.high - ci.low) / 2:,.2g} (n=3)"
    assert found[0].status == "valid"
    assert found[0].engine == "73a5831127a9"


def test_a_change_of_settings_starts_a_new_series_and_says_what_changed(
    tmp_path: pathlib.Path, card: Card
) -> None:
    a, b = _run(card, 1), _run(card, 2)
    c = _run(card, 3)
    c = c.model_copy(update={"settings": c.settings.model_copy(update={"duration_s": 60.0})})
    target = _fill(tmp_path, [(a, environment()), (b, environment()), (c, environment())])
    found = trend.series(_points(target))
    assert [[p.run_id for p in s.points] for s in found] == [["night-01", "night-02"], ["night-03"]]
    text = trend.render(CELL, "total_tok_s", found, show_host=True)
    assert "Series 1 of 2: cell 8K:64, total_tok_s, 2 runs" in text
    assert (
        "Series 2 of 2: a new series, its settings differ from series 1 (window_s 30 → 60)" in text
    )
    assert text.count("| night-0") == 3


def test_host_and_profile_filter_and_a_throttled_trial_is_shown_not_averaged(
    tmp_path: pathlib.Path, card: Card
) -> None:
    a, b = _run(card, 1), _run(card, 2)
    cells = list(b.cells)
    i = next(i for i, x in enumerate(cells) if (x.context_label, x.concurrency) == ("8K", 64))
    cells[i] = cells[i].model_copy(update={"flags": {"gpu_throttled": "clocks low"}})
    b = b.model_copy(update={"cells": tuple(cells)})
    target = _fill(tmp_path, [(a, environment(host="gpu01")), (b, environment(host="gpu02"))])
    only = _points(target, host="gpu02")
    assert [p.run_id for p in only] == ["night-02"]
    assert only[0].values == [] and only[0].status == "gpu_throttled"
    assert only[0].value_text() == "—"
    assert _points(target, profile="published") == []  # no recipe: no profile recorded


def test_hostile_text_cannot_forge_a_row(tmp_path: pathlib.Path, card: Card) -> None:
    target = _fill(tmp_path, [(_run(card, 1), environment(host="evil|\n| forged \x1b[2J"))])
    text = trend.render(CELL, "total_tok_s", trend.series(_points(target)), show_host=True)
    row = next(line for line in text.splitlines() if "night-01" in line)
    assert "evil\\| \\| forged \\x1b[2J" in row
    assert "\x1b" not in text and len(text.splitlines()) == 5


def test_no_history_is_a_usage_error_not_a_new_file(tmp_path: pathlib.Path) -> None:
    target = Target("sqlite", str(tmp_path / "none.sqlite3"))
    with pytest.raises(UsageError, match="no history at"), schema.opened(target, create=False):
        pass
    assert not (tmp_path / "none.sqlite3").exists()
