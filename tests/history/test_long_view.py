"""The view `history_long` (bench.history.long_view, schema 4) on a real PostgreSQL and a
SQLite file holding the same history (tests/history/long_history.py): the rows of a
recorded run as its committed results.json has them, the timestamp column, the change
points `bench history changes` finds, capacity intervals, and the same rows in both."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import pytest

from bench.history import database, long_view, schema, shifts
from bench.history.trend import PHASE_FIGURES
from tests.history.long_history import SLOW_FROM, History, history, query

__all__ = ["history"]  # the module's fixture
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

_SELECT = f"SELECT {', '.join(long_view.COLUMNS)} FROM history_long"


def _rows(target: database.Target, where: str = "") -> list[dict[str, Any]]:
    return [dict(zip(long_view.COLUMNS, r, strict=True)) for r in query(target, _SELECT + where)]


def _cell_label(cell: dict[str, Any]) -> str:
    return f"{cell['context_label']}:{cell['concurrency']}"


def test_a_recorded_run_has_a_row_per_cell_trial_and_figure_as_its_results_file_says(
    history: History,
) -> None:
    run = history.corpus[0]
    speed = run["server"]["speed_factor"]
    got = _rows(history.postgresql, f" WHERE run_id = '{run['run_id']}'")
    decode = [c for c in run["cells"]]
    prefill = [p for p in run["prefill"]]
    expected_count = sum(8 if c.get("figures") else 1 for c in decode) + sum(
        2 if p["status"] == "valid" else 1 for p in prefill
    )
    assert len(got) == expected_count
    cell = decode[0]
    (ttft,) = [
        r for r in got
        if r["cell"] == _cell_label(cell) and r["trial"] == cell["trial"]
        and r["figure"] == "ttft_s"
    ]  # fmt: skip
    assert ttft["value"] == pytest.approx(cell["figures"]["ttft_s"] * speed, rel=1e-12)
    assert ttft["statistic"] == "median" and ttft["unit"] == "s"
    assert ttft["status"] == cell["status"] and ttft["phase"] == "decode"
    assert ttft["time"] == datetime.fromisoformat(run["created_at"]).astimezone(UTC)
    assert ttft["time"].tzinfo is not None  # timestamptz: Grafana's time column
    assert ttft["workload"] == "(card)" and ttft["trust"] == "signed"
    assert ttft["bench_commit"] == run["bench_version"].split("+g")[1][:9]
    assert (ttft["host"], ttft["image"], ttft["vllm_commit"]) == (None, None, None)
    assert ttft["interval_low"] is None and ttft["interval_high"] is None
    sample = prefill[0]
    (rate,) = [
        r for r in got if r["cell"] == f"{sample['context_label']}:prefill"
        and r["figure"] == "prefill_tok_s"
    ]  # fmt: skip
    assert rate["value"] == pytest.approx(sample["prefill_tok_s"] / speed, rel=1e-12)
    assert rate["statistic"] == "single"


def test_every_run_recorded_is_in_the_view_with_its_provenance(history: History) -> None:
    runs = query(
        history.postgresql,
        "SELECT run_id, MIN(time), MIN(host), MIN(vllm_commit), MIN(image), MIN(workload) "
        "FROM history_long GROUP BY run_id, manifest_sha256",
    )
    by_id = {r[0]: r[1:] for r in runs}
    assert len(by_id) == len(history.corpus) + len(history.nights) + 2
    for run in history.corpus:
        assert by_id[run["run_id"]][0] == datetime.fromisoformat(run["created_at"])
    n = 3
    night = history.nights[n - 1]
    assert by_id[night.run_id] == (
        datetime(2026, 11, n, 2, tzinfo=UTC),
        "gpu01",
        f"{n:040x}",
        f"sha256:{n:064x}",
        "(card)",
    )
    assert by_id["wl-run"][4] == "sweep" and by_id["cap-run"][4] == "cap"


def test_the_slower_night_is_the_change_point_and_every_mark_is_one_changes_finds(
    history: History,
) -> None:
    marked = query(
        history.postgresql,
        "SELECT DISTINCT run_id, phase, context, concurrency, figure, change_pct "
        "FROM history_long WHERE change_point = 1",
    )
    slow = f"night-{SLOW_FROM:02d}"
    (total,) = [m for m in marked if m[0] == slow and m[4] == "total_tok_s"]
    assert total[1:4] == ("decode", "8K", 64)
    assert total[5] == pytest.approx(100 * (1 / 1.06 - 1), abs=1.0)
    with schema.opened(history.postgresql) as conn:
        found = {
            (f.points[c.index].run_id, f.cell.phase, f.cell.context, f.cell.concurrency,
             f.figure)
            for f in shifts.find(conn)
            for c in f.search.changes
        }  # fmt: skip
    assert {m[:5] for m in marked} == found


def test_a_workload_point_and_a_capacity_search_are_rows_too(history: History) -> None:
    point = _rows(
        history.postgresql, " WHERE cell = '4/s' AND figure = 'ttft_p99_s' ORDER BY trial"
    )
    # rate_results: TTFT p50 50 ms at server speed, p99 twice that, in each trial
    assert [(r["trial"], r["value"]) for r in point] == [
        (0, pytest.approx(0.1)),
        (1, pytest.approx(0.1)),
    ]
    assert {(r["workload"], r["phase"], r["statistic"]) for r in point} == {
        ("sweep", "workload", "p99")
    }
    capacity = _rows(history.postgresql, " WHERE cell = 'capacity' ORDER BY trial, figure")
    met = [r for r in capacity if r["figure"] == "capacity"]
    assert [r["value"] for r in met] == [pytest.approx(4.0), pytest.approx(5.0)]
    assert [(r["interval_low"], r["interval_high"]) for r in met] == [
        (pytest.approx(4.0), pytest.approx(5.0))
    ] * 2
    assert [r["statistic"] for r in met] == ["highest_met"] * 2
    missed = [r for r in capacity if r["figure"] == "capacity_missed"]
    assert {r["interval_low"] for r in missed} == {None}
    (none_met,) = [r for r in capacity if r["trial"] == 2]
    assert (none_met["status"], none_met["figure"], none_met["value"]) == ("none_met", None, None)


def _key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(row[c]) for c in ("manifest_sha256", "phase", "context", "concurrency",
                                       "trial", "figure"))  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-12)
    return bool(a == b)


def test_sqlite_holds_the_same_rows(history: History) -> None:
    pg = sorted(_rows(history.postgresql), key=_key)
    lite = sorted(_rows(history.sqlite), key=_key)
    assert len(pg) == len(lite) > 1000
    for p, s in zip(pg, lite, strict=True):
        when = p.pop("time")
        assert s.pop("time") == when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
        assert all(_same(p[c], s[c]) for c in p), (p, s)


def test_the_statistics_name_every_figure_the_history_keeps() -> None:
    named = {(phase, f) for phase, _, figures in long_view.STATISTICS for f in figures}
    every = {(phase, f) for phase, figures in PHASE_FIGURES.items() for f in figures}
    assert named == every
    assert len(named) == sum(len(f) for _, _, f in long_view.STATISTICS)  # each named once
