"""What a workload run becomes in the history (bench.history.workload_rows through
bench.history.rows), without a database: its `workloads` row, a cell per point and trial
keyed as compare keys it, its figures at server speed as `bench export` gives them, and a
capacity run's searches."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from bench.card.model import Card
from bench.export import points as export_points
from bench.history import rows, workload_rows
from bench.results import Results
from bench.workload_points import PointResult, WorkloadRun
from bench.workload_spec import Arrivals, Workload
from tests.history.conftest import environment, unsigned_record
from tests.support.synth import make_results
from tests.support.workload_results import capacity_results, point, rate_results

SPEED = 10.0


def _cells(record: rows.Record, phase: str = "workload") -> dict[tuple[str, int, int], Any]:
    return {(c[2], c[4], c[5]): c for c in record.cells if c[1] == phase}


def _figures(
    record: rows.Record, phase: str = "workload"
) -> dict[tuple[str, int, int, str], float]:
    return {(f[2], f[3], f[4], f[5]): f[6] for f in record.figures if f[1] == phase}


def test_each_point_and_trial_is_a_cell_keyed_by_its_rate_with_figures_at_server_speed() -> None:
    results = rate_results(rates=(1.0, 4.0, 16.0), trials=2, spread=0.02, speed=SPEED)
    record = unsigned_record(results)
    cells = _cells(record)
    assert sorted(cells) == sorted((f"{r:g}/s", 0, t) for r in (1, 4, 16) for t in (0, 1))
    assert {c[6] for c in cells.values()} == {"valid"}
    assert all(c[3] is None and c[8] is None for c in cells.values())  # no prompt size, flags
    figures = _figures(record)
    names = {name for name, _ in workload_rows.POINT_FIGURES}
    assert {k[3] for k in figures} == names
    assert len(figures) == 6 * len(names)
    # Server speed, and exactly the numbers `bench export` writes for the point.
    exported = export_points.point_rows(results)
    assert results.workload is not None
    for p, row in zip(results.workload.points, exported, strict=True):
        assert p.offered_rate is not None and p.tpot is not None and p.goodput_rate is not None
        key = (f"{p.offered_rate / SPEED:g}/s", 0, p.trial)
        assert figures[(*key, "output_tok_s")] == row["output_tok_s"] == p.output_tok_s / SPEED
        assert figures[(*key, "ttft_p99_s")] == row["ttft_p99"]
        assert figures[(*key, "tpot_p50_s")] == pytest.approx(p.tpot.p50 * SPEED)
        assert figures[(*key, "goodput_rate")] == pytest.approx(p.goodput_rate / SPEED)
        for q in ("p50", "p90", "p99"):
            for d in ("ttft", "tpot", "itl", "e2el"):
                assert figures[(*key, f"{d}_{q}_s")] == row[f"{d}_{q}"]
    assert figures[("4/s", 0, 0, "output_tok_s")] == pytest.approx(4000.0, rel=0.1)
    units = {f[5]: f[7] for f in record.figures if f[1] == "workload"}
    assert units["output_tok_s"] == "tok/s" and units["achieved_rate"] == "requests/s"
    assert units["e2el_p90_s"] == "s"


def test_the_workloads_row_names_the_traffic_and_the_settings_carry_its_hash() -> None:
    results = rate_results(name="nightly", workload_seed=7)
    record = unsigned_record(results)
    assert record.workload is not None
    row = dict(zip(workload_rows.WORKLOAD_COLUMNS, record.workload, strict=True))
    run = results.workload
    assert run is not None
    assert (row["name"], row["sha256"], row["kind"], row["seed"]) == (
        "nightly",
        run.sha256,
        "rate",
        7,
    )
    assert json.loads(row["workload_json"])["arrivals"]["rates"] == [1.0, 4.0, 16.0]
    assert row["capacity_by"] is None and row["capacity_estimate"] is None
    settings = json.loads(record.run["settings_json"])
    assert settings["workload"] == f"nightly ({run.sha256[:12]})"
    # Another seed is other traffic: another series. Another engine is what a trend follows.
    other_seed = unsigned_record(rate_results(name="nightly", workload_seed=8))
    engine = results.model_copy(
        update={"server": results.server.model_copy(update={"version": "0.31.0"})}
    )
    keys = [r.run["settings_sha256"] for r in (record, other_seed, unsigned_record(engine))]
    assert keys[0] != keys[1] and keys[0] == keys[2]


def test_a_point_that_is_not_valid_has_its_status_and_reasons_and_no_figures() -> None:
    results = rate_results(statuses={2: "overloaded", 0: "late_client"})
    record = unsigned_record(results)
    cells = _cells(record)
    assert cells[("16/s", 0, 0)][6:8] == ("overloaded", "overloaded: the test says so")
    assert cells[("1/s", 0, 0)][6] == "late_client"
    assert {k[0] for k in _figures(record)} == {"4/s"}


def test_a_figure_out_of_range_makes_its_point_invalid() -> None:
    results = rate_results(rates=(1.0, 2.0))
    run = results.workload
    assert run is not None
    bad = run.points[1].model_copy(update={"output_tok_s": 1e30})
    results = results.model_copy(
        update={"workload": run.model_copy(update={"points": (run.points[0], bad)})}
    )
    record = unsigned_record(results)
    cell = _cells(record)[("2/s", 0, 0)]
    assert cell[6] == "invalid" and "implausible output_tok_s" in cell[7]
    assert {k[0] for k in _figures(record)} == {"1/s"}


def test_closed_trace_and_all_at_once_points_are_keyed_as_compare_keys_them() -> None:
    results = rate_results(rates=(2.0,))
    run = results.workload
    assert run is not None
    at_once = point(1, 1.0).model_copy(update={"offered_rate": math.inf})
    closed: PointResult = point(2, 1.0).model_copy(update={"offered_rate": None, "concurrency": 8})
    trace = point(3, 1.0).model_copy(update={"offered_rate": None})
    again = point(4, 2.0)  # a rate given twice: its key is the first point's
    run = run.model_copy(update={"points": (*run.points, at_once, closed, trace, again)})
    record = unsigned_record(results.model_copy(update={"workload": run}))
    assert sorted(_cells(record)) == sorted(
        [("2/s", 0, 0), ("inf/s", 0, 0), ("closed", 8, 0), ("trace", 0, 0)]
    )
    twice = [f for f in record.figures if f[2] == "2/s"]
    assert len(twice) == len(workload_rows.POINT_FIGURES)
    inf = _figures(record)[("inf/s", 0, 0, "output_tok_s")]
    assert math.isfinite(inf)


def test_a_capacity_run_records_each_search_not_its_steps() -> None:
    results = capacity_results([3.0, 3.5, None], speed=SPEED, crossing=[3.2])
    assert results.workload is not None
    steps = (point(0, 3.0), point(1, 6.0))
    results = results.model_copy(
        update={"workload": results.workload.model_copy(update={"points": steps})}
    )
    record = unsigned_record(results)
    assert results.workload is not None
    assert _cells(record) == {}  # the searches' steps are no sweep's points
    cells = _cells(record, "capacity")
    assert sorted(cells) == [("capacity", 0, 0), ("capacity", 0, 1), ("capacity", 0, 2)]
    assert [cells[("capacity", 0, t)][6] for t in range(3)] == ["valid", "valid", "none_met"]
    assert "no point met the SLO" in cells[("capacity", 0, 2)][7]
    figures = _figures(record, "capacity")
    assert figures[("capacity", 0, 0, "capacity")] == pytest.approx(3.0)  # server requests/s
    assert figures[("capacity", 0, 1, "capacity_missed")] == pytest.approx(3.85)
    assert figures[("capacity", 0, 0, "capacity_estimate")] == pytest.approx(3.2)
    assert ("capacity", 0, 1, "capacity_estimate") not in figures  # that search gave none
    assert not [k for k in figures if k[2] == 2]
    assert {f[7] for f in record.figures if f[1] == "capacity"} == {"requests/s"}
    assert record.workload is not None
    row = dict(zip(workload_rows.WORKLOAD_COLUMNS, record.workload, strict=True))
    cap = results.workload.capacity
    assert cap is not None and cap.estimate is not None and cap.interval is not None
    assert row["capacity_by"] == "rate" and row["capacity_slo"] == cap.slo
    assert row["capacity_estimate"] == pytest.approx(cap.estimate / SPEED)
    assert (row["capacity_low"], row["capacity_high"]) == pytest.approx((3.0, 3.5))


def test_a_run_of_the_card_records_what_it_did_before(card: Card) -> None:
    results = make_results(card, speed=10.0, trials=2)
    record = unsigned_record(results, environment())
    assert record.workload is None
    assert {c[1] for c in record.cells} == {"decode", "prefill"}
    assert "workload" not in json.loads(record.run["settings_json"])
    assert record.of_workload().cells == () and record.of_workload().figures == ()


def test_a_workload_run_without_points_is_a_row_and_nothing_else() -> None:
    w = Workload(name="empty", arrivals=Arrivals(kind="rate", rates=(1.0,)))
    empty = WorkloadRun(workload=w, source="empty", sha256="0" * 64)
    results: Results = rate_results().model_copy(update={"workload": empty})
    record = unsigned_record(results)
    assert record.workload is not None and record.cells == () and record.figures == ()
