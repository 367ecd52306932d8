"""Workload points in the history's trend, change points and page, on SQLite histories
filled with rows (no server): a point is a cell of its workload, each workload a series of
its own, a planted slowdown found and named, the page's workloads matrix, and a recorded
workload or capacity run read back as compare reads its bundle."""

from __future__ import annotations

import pathlib
import re
from typing import Any

import pytest

from bench.card.model import Card
from bench.cli import main
from bench.errors import Exit, UsageError
from bench.history import matrix, page, runs, schema, shifts, trend
from bench.history.database import Target
from bench.results import Results
from bench.verdict.run_figures import from_results
from tests.history.conftest import env_of, fill, nights, unsigned_record
from tests.support.workload_results import capacity_results, rate_results

POINT = trend.parse_cell("4/s")


def _night(n: int, *, slow_from: int | None = None, **kw: Any) -> Results:
    """Night N of a nightly workload run: every point 6 % slower from night SLOW_FROM on."""
    slow = 1.06 if slow_from is not None and n >= slow_from else 1.0
    return rate_results(
        slow=slow, spread=0.005, seed=n, run_id=f"night-{n:02d}",
        created_at=f"2026-11-{n:02d}T03:00:00Z", **kw,
    )  # fmt: skip


def _workload_nights(count: int, **kw: Any) -> list[Any]:
    return [unsigned_record(_night(n, **kw), env_of(n)) for n in range(1, count + 1)]


def _sha12(results: Results) -> str:
    assert results.workload is not None
    return results.workload.sha256[:12]


def report(target: Target, figure: str, **kw: Any) -> str:
    with schema.opened(target, create=False) as conn:
        return page.report(conn, figure, where=target.where, **kw)


def test_a_workloads_point_is_a_cell_to_trend() -> None:
    assert trend.parse_cell("4/s") == trend.CellChoice("workload", "4/s", 0)
    assert trend.parse_cell(" 4.0/s") == trend.parse_cell("4/s")
    assert trend.parse_cell("0.5/s").context == "0.5/s"
    assert trend.parse_cell("INF/s") == trend.CellChoice("workload", "inf/s", 0)
    assert trend.parse_cell("closed:8") == trend.CellChoice("workload", "closed", 8)
    assert trend.parse_cell("trace") == trend.CellChoice("workload", "trace", 0)
    assert trend.parse_cell("capacity") == trend.CellChoice("capacity", "capacity", 0)
    given = ("4/s", "closed:8", "trace", "capacity", "8K:64")
    assert [str(trend.parse_cell(t)) for t in given] == list(given)
    for bad in ("0/s", "-1/s", "4/min", "closed", "closed:x"):
        with pytest.raises(UsageError, match="not CONTEXT:CONCURRENCY nor a workload's point"):
            trend.parse_cell(bad)
    assert trend.default_figure(POINT) == "output_tok_s"
    assert trend.default_figure(trend.parse_cell("capacity")) == "capacity"
    assert trend.default_figure(trend.parse_cell("8K:prefill")) == "prefill_tok_s"
    with pytest.raises(UsageError) as caught:
        trend.check_figure(POINT, "tbt_s")
    assert caught.value.one_line().startswith("--figure tbt_s: not a workload point figure (one")


def test_each_workload_is_a_series_of_its_own_and_says_so(tmp_path: pathlib.Path) -> None:
    other = rate_results(name="other", run_id="other-01", created_at="2026-11-20T00:00:00Z")
    target = fill(tmp_path, [*_workload_nights(3), unsigned_record(other, env_of(20))])
    with schema.opened(target, create=False) as conn:
        found = trend.points(conn, POINT, "output_tok_s")
    assert [p.run_id for p in found] == ["night-01", "night-02", "night-03", "other-01"]
    assert all(p.values == [pytest.approx(4000.0, rel=0.05)] for p in found)
    text = trend.render(POINT, "output_tok_s", trend.series(found), show_host=False)
    sha = _sha12(_night(1))
    assert f"Series 1 of 2: cell 4/s of workload sweep ({sha}), output_tok_s, 3 runs" in text
    assert f"(workload sweep ({sha}) → other ({_sha12(other)})), 1 runs" in text


def test_a_planted_slowdown_of_a_workload_is_found_and_named(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = fill(tmp_path, _workload_nights(12, slow_from=9))
    with schema.opened(target, create=False) as conn:
        found = shifts.find(conn, cell=POINT, figure="output_tok_s")
        every = shifts.find(conn)
    (series,) = found
    (change,) = series.search.changes
    assert series.points[change.index].run_id == "night-09"
    assert change.shift.delta_pct == pytest.approx(-100 * (1 - 1 / 1.06), abs=1.0)
    text = shifts.render(found)
    sha = _sha12(_night(1))
    assert f"4/s output_tok_s of workload sweep ({sha}), host gpu01, profile —: 12 runs" in text
    assert "first bad night-09" in text and "no make bisect: it follows decode cells" in text
    # Without --cell: every point, each of the figures compare judges a point by.
    searched = {(str(f.cell), f.figure) for f in every}
    assert searched == {
        (f"{r}/s", fig) for r in (1, 4, 16)
        for fig in ("output_tok_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s")
    }  # fmt: skip
    assert all(len(f.search.changes) == 1 for f in every)
    assert main(["history", "trend", "--cell", "4/s", "--db", target.where]) == 0
    out = capsys.readouterr().out
    assert f"cell 4/s of workload sweep ({sha}), output_tok_s, 12 runs" in out
    assert main(["history", "changes", "--cell", "16/s", "--figure", "ttft_p99_s",
                 "--db", target.where]) == 0  # fmt: skip
    assert "16/s ttft_p99_s of workload sweep" in capsys.readouterr().out
    assert main(["history", "trend", "--cell", "4/s", "--figure", "tbt_s",
                 "--db", target.where]) == Exit.USAGE  # fmt: skip
    assert "not a workload point figure" in capsys.readouterr().err


def test_the_page_draws_a_workloads_matrix_beside_the_cards(
    tmp_path: pathlib.Path, card: Card
) -> None:
    other = rate_results(name="other", rates=(2.0,), run_id="other-01",
                         created_at="2026-11-20T00:00:00Z")  # fmt: skip
    records = [*_workload_nights(12, slow_from=9), unsigned_record(other, env_of(20))]
    target = fill(tmp_path, records)
    text = report(target, "output_tok_s")
    assert text.count('<table class="matrix">') == 1
    assert f"<th>{matrix.POINTS_CORNER}</th><th>1/s</th><th>2/s</th><th>4/s</th>" in text
    sha = _sha12(_night(1))
    assert f"<tr><th>other ({_sha12(other)})</th>" in text
    assert text.count('<svg class="trend"') == 4 and text.count('<line class="change"') == 3
    found = re.search(
        r'<div class="panel" id="panel-\d+" hidden><h2>'
        + re.escape(f"4/s of workload sweep ({sha}): output_tok_s")
        + r"</h2>(.*?)</div></div>",
        text, re.S,
    )  # fmt: skip
    assert found and re.search(r"<td>night-09</td>(?:(?!</tr>).)*>first bad</td>", found.group(1))
    assert "Workloads: output_tok_s of a workload run&#x27;s points" in text
    # The latest workload run against the one before it, as compare shows two bundles.
    assert "<h2>other-01</h2><p>No earlier run of its series" in text
    # total_tok_s is both the card's and a point's: both matrices, the card's first.
    mixed = Target("sqlite", str(tmp_path / "mixed.sqlite3"))
    fill(mixed, [*nights(card, 3, contexts={"8K"}), *_workload_nights(3)])
    text = report(mixed, "total_tok_s")
    assert text.count('<table class="matrix">') == 2
    assert text.index(matrix.CARD_CORNER) < text.index(matrix.POINTS_CORNER)
    assert text.count('<svg class="trend"') == 8 + 3
    # A card's figure alone: the card's matrix only, as before.
    assert report(mixed, "tbt_s").count('<table class="matrix">') == 1


def test_a_recorded_workload_run_reads_as_its_bundle_reads_for_compare(
    tmp_path: pathlib.Path,
) -> None:
    results = rate_results(trials=2, spread=0.01, statuses={2: "overloaded"})
    target = fill(tmp_path, [unsigned_record(results, env_of(1))])
    with schema.opened(target, create=False) as conn:
        (run,) = runs.all_runs(conn, host=None, profile=None)
        recorded = runs.figures(conn, run)
    bundle = from_results(results, env_of(1))
    assert set(recorded.cells) == set(bundle.cells) == {
        ("workload", "1/s", 0), ("workload", "4/s", 0), ("workload", "16/s", 0),
    }  # fmt: skip
    for key, cell in bundle.cells.items():
        mine = recorded.cells[key]
        assert mine.status == cell.status, key
        assert set(mine.trials) == set(cell.trials), key
        for metric, values in cell.trials.items():
            assert mine.trials[metric] == pytest.approx(values), (key, metric)
    overloaded = recorded.cells[("workload", "16/s", 0)]
    assert overloaded.status == "invalid" and "overloaded" in (overloaded.detail or "")
    assert recorded.settings["workload"] == bundle.settings["workload"]


def test_capacity_runs_trend_and_compare_by_their_searches(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = capacity_results(
        [3.0, 3.2], run_id="cap-01", created_at="2026-11-01T00:00:00Z", crossing=[3.3, 3.4]
    )
    second = capacity_results([2.5, None], run_id="cap-02", created_at="2026-11-02T00:00:00Z")
    target = fill(tmp_path, [unsigned_record(first), unsigned_record(second)])
    assert main(["history", "trend", "--cell", "capacity", "--db", target.where]) == 0
    out = capsys.readouterr().out
    assert "cell capacity of workload cap (" in out and ", capacity, 2 runs" in out
    assert "| 3.1 ± " in out and "(n=2) | valid |" in out
    assert "| 2.5 | none_met 1, valid 1 |" in out
    with schema.opened(target, create=False) as conn:
        found = runs.all_runs(conn, host=None, profile=None)
        recorded = runs.figures(conn, found[0])
        later = runs.figures(conn, found[1])
    bundle = from_results(first)
    assert recorded.capacity_of == bundle.capacity_of == "rate at ttft_p99<=2s,tpot_p99<=80ms"
    assert recorded.capacity == pytest.approx(bundle.capacity)
    # each search's point estimate too, and the count that says whether every search has one
    assert recorded.capacity_estimate == pytest.approx(bundle.capacity_estimate)
    assert bundle.capacity_estimate == pytest.approx((3.3, 3.4))
    assert recorded.capacity_searches == bundle.capacity_searches == 2
    assert later.capacity_searches == 2 and later.capacity_estimate == ()
    assert recorded.cells == {}
    text = report(target, "capacity")
    assert f"<th>{matrix.CAPACITY_CORNER}</th><th>capacity</th>" in text
    assert "<h2>cap-02 against cap-01</h2>" in text and "SLO capacity" in text
