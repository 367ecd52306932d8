"""What the history keeps of a workload run (`bench run --workload`, `bench capacity`): its
`workloads` row, and its points as rows of `cells` and `figures`, so that the trend, the
change points and the page read a point as they read a cell of the card.

A point's cell is (phase `workload`, context its label, concurrency its C, trial), the key
`bench compare` gives it (bench.verdict.workload_cells.label): the offered rate at server
speed ("4/s", "inf/s"), "closed" with C for a closed-count point, "trace" for a trace's one
point. Which workload it belongs to is the run's comparable settings' `workload` (its name
and the hash of the workload as run: seed, arrivals, rates, lengths, prompts and their
dataset's sha256, SLO), so two runs' "4/s" stand on one line only when the same traffic
was offered. Every point has its cell with its status (valid, overloaded, late_client,
failed, interrupted) and reasons; a valid one has its figures (POINT_FIGURES), at server
speed: bench.export.points' numbers, so the history and an export hold the same ones. A
figure outside the bounds every number from outside passes makes its point `invalid` with
the reason, as for a cell.

A `bench capacity` run records no points (they are steps of its searches, at rates of their
own, as compare leaves them out) but a cell (phase `capacity`, context `capacity`) per
search, its trial the search's repeat: `capacity`, the highest point shown to meet the SLO
below every other, `capacity_missed`, the lowest not shown to meet (the bracket it ended
with), and `capacity_estimate`, its point estimate (where its points' measured percentile
crosses the bound; absent when it gave none), in server requests/s or streams. A search that
found none is `none_met`, its note the reason. A run's value (the geometric mean of its
searches, as `changes` takes it) is the capacity `bench capacity` reports; the run's
estimate and 95 % interval are in `workloads`.
"""

from __future__ import annotations

import math
from typing import Any

from bench import bounds
from bench.export import points as export_points
from bench.results import Results
from bench.verdict import workload_cells
from bench.workload_points import CapacityRun

WORKLOAD_PHASE = "workload"
CAPACITY_PHASE = "capacity"
CAPACITY_CONTEXT = "capacity"
WORKLOAD_COLUMNS = (
    "manifest_sha256", "name", "sha256", "kind", "seed", "source", "workload_json",
    "prompt_sizing", "capacity_by", "capacity_slo", "capacity_method", "capacity_estimate",
    "capacity_low", "capacity_high", "capacity_server_s",
)  # fmt: skip
_QUANTILES = ("p50", "p90", "p99")
# A valid point's figures: (the history's name, its unit, bench.export.points' column).
POINT_SOURCES: tuple[tuple[str, str, str], ...] = (
    ("output_tok_s", "tok/s", "output_tok_s"),
    ("total_tok_s", "tok/s", "total_tok_s"),
    ("achieved_rate", "requests/s", "achieved_rate"),
    ("goodput_rate", "requests/s", "goodput_rate"),
    *((f"{d}_{q}_s", "s", f"{d}_{q}") for d in ("ttft", "tpot", "itl", "e2el") for q in _QUANTILES),
)
POINT_FIGURES: tuple[tuple[str, str], ...] = tuple((n, u) for n, u, _ in POINT_SOURCES)
CAPACITY_FIGURES: tuple[tuple[str, str], ...] = (
    ("capacity", "requests/s or streams"),
    ("capacity_missed", "requests/s or streams"),
    ("capacity_estimate", "requests/s or streams"),
)
NONE_MET = "none_met"  # a capacity search that found no point within the SLO

Row = tuple[Any, ...]


def workload_row(results: Results, manifest_sha256: str) -> Row | None:
    """The run's `workloads` row (WORKLOAD_COLUMNS order); None for the card's matrix."""
    run = results.workload
    if run is None:
        return None
    cap = run.capacity
    per = _per(cap, results.speed_factor) if cap is not None else 1.0
    low, high = cap.interval if cap is not None and cap.interval is not None else (None, None)
    w = run.workload
    return (
        manifest_sha256, w.name, run.sha256, w.arrivals.kind, w.seed, run.source,
        w.model_dump_json(), run.prompt_sizing,
        None if cap is None else cap.by, None if cap is None else cap.slo,
        None if cap is None else cap.method,
        _server(None if cap is None else cap.estimate, per), _server(low, per),
        _server(high, per), None if cap is None else cap.server_s,
    )  # fmt: skip


def _per(cap: CapacityRun, speed: float) -> float:
    """What a capacity divides by for server units: rates by the speed, streams by 1."""
    return speed if cap.by == "rate" else 1.0


def _server(value: float | None, per: float) -> float | None:
    if value is None or not math.isfinite(value / per):
        return None
    return value / per


def _problem(values: dict[str, float | None]) -> str | None:
    """The first figure outside the bounds of every number from outside, as its line."""
    for name, value in values.items():
        if value is not None and (why := bounds.figure_problem(value, name)):
            return why
    return None


def _reason(texts: tuple[str, ...]) -> str | None:
    return "; ".join(texts) or None


def point_rows(results: Results, manifest_sha256: str) -> tuple[list[Row], list[Row]]:
    """(cells, figures) of the run's points, in bench.history.rows' CELL_COLUMNS and
    FIGURE_COLUMNS order; none for the card's matrix or a capacity search. A key met twice
    (a rate repeated in one workload) keeps its first point."""
    run = results.workload
    if run is None or run.capacity is not None:
        return [], []
    speed = results.speed_factor
    cells: dict[tuple[str, str, int, int], Row] = {}
    figures: list[Row] = []
    exported = export_points.point_rows(results)
    for point, shown in zip(run.points, exported, strict=True):
        label, conc = workload_cells.label(point, speed)
        key = (WORKLOAD_PHASE, label, conc, point.trial)
        if key in cells:
            continue
        values = {name: _number(shown[column]) for name, _, column in POINT_SOURCES}
        status: str = point.status
        reason = _reason(point.reasons)
        if status == "valid" and (why := _problem(values)):
            status, reason = "invalid", why
        cells[key] = (manifest_sha256, *key[:2], None, *key[2:], status, reason, None)
        if status == "valid":
            figures += [
                (manifest_sha256, *key, name, value, unit)
                for (name, unit, _), value in zip(POINT_SOURCES, values.values(), strict=True)
                if value is not None
            ]
    return list(cells.values()), figures


def _number(value: Any) -> float | None:
    return None if value is None else float(value)


def capacity_rows(results: Results, manifest_sha256: str) -> tuple[list[Row], list[Row]]:
    """(cells, figures) of a `bench capacity` run's searches, one cell each; none else."""
    run = results.workload
    if run is None or run.capacity is None:
        return [], []
    cap = run.capacity
    per = _per(cap, results.speed_factor)
    unit = "requests/s" if cap.by == "rate" else "streams"
    cells: dict[int, Row] = {}
    figures: list[Row] = []
    for search in cap.searches:
        if search.repeat in cells:
            continue
        key = (CAPACITY_PHASE, CAPACITY_CONTEXT, 0, search.repeat)
        values = {"capacity": _server(search.met, per),
                  "capacity_missed": _server(search.missed, per),
                  "capacity_estimate": _server(search.crossing, per)}  # fmt: skip
        found = values["capacity"]
        status, reason = ("valid", search.note) if found and found > 0 else (NONE_MET, search.note)
        if status == "valid" and (why := _problem(values)):
            status, reason = "invalid", why
        cells[search.repeat] = (manifest_sha256, *key[:2], None, *key[2:], status, reason, None)
        if status == "valid":
            figures += [
                (manifest_sha256, *key, name, value, unit)
                for name, value in values.items()
                if value is not None
            ]
    return list(cells.values()), figures


def rows_of(results: Results, manifest_sha256: str) -> tuple[list[Row], list[Row]]:
    """(cells, figures) of the run's workload: its points, or its capacity searches."""
    cells, figures = point_rows(results, manifest_sha256)
    more_cells, more_figures = capacity_rows(results, manifest_sha256)
    return cells + more_cells, figures + more_figures


def is_point(phase: object) -> bool:
    return phase in (WORKLOAD_PHASE, CAPACITY_PHASE)
