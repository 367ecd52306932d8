"""Every query of the Grafana dashboard (bench.history.dashboard_sql), with Grafana's macro
and variables put in as Grafana does (tests/history/grafana_macros.py), against the real
PostgreSQL of tests/history/long_history.py: the rows each panel and variable shows."""

from __future__ import annotations

import statistics
from datetime import UTC, datetime
from typing import Any

import pytest

from bench.history import dashboard_sql as sql
from bench.results import Results
from tests.history.grafana_macros import substitute
from tests.history.long_history import SLOW_FROM, History, history, query

__all__ = ["history"]  # the module's fixture
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

FROM = datetime(2026, 1, 1, tzinfo=UTC)
TO = datetime(2027, 1, 1, tzinfo=UTC)
CARD = {"workload": "(card)", "cell": "8K:64", "figure": "total_tok_s"}


def _run(
    h: History, text: str, variables: dict[str, str], *, since: datetime = FROM
) -> list[tuple[Any, ...]]:
    return query(h.postgresql, substitute(text, time_from=since, time_to=TO, variables=variables))


def _mean(r: Results, context: str, concurrency: int, figure: str) -> float:
    """A night's value of a cell, from its results: the mean of its valid trials."""
    return statistics.fmean(
        getattr(c.figures.at_server_speed(r.speed_factor), figure)
        for c in r.cells
        if (c.context_label, c.concurrency) == (context, concurrency)
        and c.status == "valid" and c.figures is not None and not c.flags
    )  # fmt: skip


def _time(r: Results) -> datetime:
    return datetime.fromisoformat(r.created_at)


def test_the_variables_list_what_the_history_holds(history: History) -> None:
    assert _run(history, sql.WORKLOADS, {}) == [("(card)",), ("cap",), ("sweep",)]
    cells = [c for (c,) in _run(history, sql.CELLS, {"workload": "(card)"})]
    corpus = history.corpus[0]
    contexts = [c["label"] for c in corpus["plan"]["contexts"]]  # 1K, 2K
    expected_prefill = [f"{c}:prefill" for c in (*contexts, "8K", "16K")]
    assert [c for c in cells if c.endswith(":prefill")] == expected_prefill
    assert cells.index("1K:1") < cells.index("2K:1") < cells.index("8K:1") < cells.index("16K:1")
    assert _run(history, sql.CELLS, {"workload": "sweep"}) == [("1/s",), ("4/s",), ("16/s",)]
    figures = [f for (f,) in _run(history, sql.FIGURES, {"workload": "(card)", "cell": "8K:64"})]
    assert figures == sorted(("total_tok_s", "per_request_tok_s", "ttft_s", "tbt_s",
                              "average_active", "completed_requests", "output_tokens",
                              "measured_for_s"))  # fmt: skip


def test_the_trend_is_each_nights_mean_and_its_change_point_the_slower_night(
    history: History,
) -> None:
    got = _run(history, sql.TREND, CARD)
    nights = history.nights
    assert [(t, m) for t, m, _ in got] == [(_time(r), "gpu01 -") for r in nights]
    for (_, _, value), r in zip(got, nights, strict=True):
        assert value == pytest.approx(_mean(r, "8K", 64, "total_tok_s"), rel=1e-12)
    slow = nights[SLOW_FROM - 1]
    assert _run(history, sql.TREND_CHANGES, CARD) == [
        (_time(slow), "change gpu01 -", pytest.approx(_mean(slow, "8K", 64, "total_tok_s")))
    ]
    # the dashboard's time range: from night 10 on
    later = _run(history, sql.TREND, CARD, since=_time(nights[9]))
    assert [t for t, _, _ in later] == [_time(r) for r in nights[9:]]
    assert _run(history, sql.TREND_CHANGES, CARD, since=_time(nights[9])) == []


def test_a_workload_points_trend(history: History) -> None:
    got = _run(history, sql.TREND, {"workload": "sweep", "cell": "4/s", "figure": "ttft_p99_s"})
    # rate_results: TTFT p99 100 ms at server speed in both trials; host gpu01, no profile
    assert got == [(datetime(2026, 12, 6, tzinfo=UTC), "gpu01 -", pytest.approx(0.1))]


def test_the_matrix_is_the_latest_night_against_the_one_before(history: History) -> None:
    got = _run(history, sql.MATRIX, {"workload": "(card)", "figure": "total_tok_s"})
    by_cell = {(r[0], r[1]): r for r in got}
    assert len(by_cell) == len(got)
    latest, previous = history.nights[-1], history.nights[-2]
    _, _, profile, latest_run, latest_value, previous_run, previous_value, pct, mark = by_cell[
        ("8K:64", "gpu01")
    ]
    assert (latest_run, previous_run, profile, mark) == (latest.run_id, previous.run_id, None, 0)
    assert latest_value == pytest.approx(_mean(latest, "8K", 64, "total_tok_s"), rel=1e-12)
    assert previous_value == pytest.approx(_mean(previous, "8K", 64, "total_tok_s"), rel=1e-12)
    assert pct == pytest.approx(100 * (latest_value / previous_value - 1), rel=1e-9)
    decode = {
        (c.context_label, c.concurrency)
        for c in latest.cells
        if c.status == "valid" and c.figures is not None and not c.flags
    }
    assert {k for k in by_cell if k[1] == "gpu01"} == {(f"{x}:{c}", "gpu01") for x, c in decode}
    # the corpus' runs (no host): the newest of them against the one before it
    corpus = sorted(history.corpus, key=lambda r: r["created_at"])
    newest, before = corpus[-1], corpus[-2]
    row = by_cell[("1K:1", None)]
    assert (row[3], row[5]) == (newest["run_id"], before["run_id"])
    (trial,) = [c for c in newest["cells"] if (c["context_label"], c["concurrency"]) == ("1K", 1)]
    assert row[4] == pytest.approx(trial["figures"]["total_tok_s"], rel=1e-12)
    assert [r[0] for r in got][:4] == ["1K:1", "1K:2", "2K:1", "2K:2"]


def test_the_runs_table_is_every_run_newest_first(history: History) -> None:
    got = _run(history, sql.RUNS, {})
    assert len(got) == len(history.corpus) + len(history.nights) + 2
    times = [r[0] for r in got]
    assert times == sorted(times, reverse=True)
    assert [r[1] for r in got[:2]] == ["cap-run", "wl-run"]
    by_id = {r[1]: r for r in got}
    slow = history.nights[SLOW_FROM - 1]
    run = by_id[slow.run_id]
    assert run[3:9] == (
        f"{SLOW_FROM:040x}",
        f"sha256:{SLOW_FROM:064x}",
        "gpu01",
        None,
        "(card)",
        "signed",
    )
    cells = {(c.context_label, c.concurrency) for c in slow.cells}
    prefills = {p.context_label for p in slow.prefill}
    assert run[9] == len(cells) + len(prefills)
    assert run[10] == sum(1 for c in slow.cells if c.status != "valid") + sum(
        1 for p in slow.prefill if p.status != "valid"
    )
    assert run[11] >= 1  # total_tok_s of 8K x 64 at least
    corpus = history.corpus[0]
    mine = by_id[corpus["run_id"]]
    assert mine[9] == len(corpus["plan"]["cells"]) + len(corpus["plan"]["contexts"])
    assert by_id["cap-run"][10] == 1  # the search that met none
