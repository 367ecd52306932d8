"""What a workload run's plots show, taken from results.json's `workload` at server time.

results.json keeps a point's figures in client seconds (bench.workload_points); a twin's
speed factor N turns them into server time as tables.md does (bench.workload.tables):
durations times N, rates divided by N. One `LoadPoint` per point and trial; a figure that
is not a finite number (a results.json bench would never write) is left out, not drawn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from bench.results import Results
from bench.workload_points import PointResult, Quantiles

# A point's status as a marker (matplotlib's code) and in words (the page's legend).
STATUS_MARKERS: dict[str, tuple[str, str]] = {
    "valid": ("o", "circle"),
    "overloaded": ("^", "triangle"),
    "late_client": ("s", "square"),
    "failed": ("X", "cross"),
    "interrupted": ("D", "diamond"),
}


@dataclass(frozen=True)
class LoadPoint:
    """One point of one trial, at server time."""

    index: int
    trial: int
    load: float  # offered requests per server second (inf: all at once), or concurrency
    output_tok_s: float | None  # achieved output tok/s (server); None when not finite
    status: str
    ttft: Quantiles | None  # server seconds
    tpot: Quantiles | None


@dataclass(frozen=True)
class WorkloadPlotData:
    closed: bool  # closed-count: the load is the concurrency, not an offered rate
    points: tuple[LoadPoint, ...]
    slo_ttft_s: float | None  # p99 bounds, server seconds (the workload's [slo])
    slo_tpot_s: float | None


def _scaled(pair: tuple[float, float] | None, speed: float) -> tuple[float, float] | None:
    return None if pair is None else (pair[0] * speed, pair[1] * speed)


def server_quantiles(q: Quantiles | None, speed: float) -> Quantiles | None:
    """`q` in server seconds (every time x speed); None when a value is not finite."""
    if q is None:
        return None
    out = q.model_copy(
        update={
            "mean": q.mean * speed, "p50": q.p50 * speed, "p90": q.p90 * speed,
            "p99": q.p99 * speed, "min": q.min * speed, "max": q.max * speed,
            "p50_ci": _scaled(q.p50_ci, speed), "p90_ci": _scaled(q.p90_ci, speed),
            "p99_ci": _scaled(q.p99_ci, speed),
        }
    )  # fmt: skip
    cis = [v for ci in (out.p50_ci, out.p90_ci, out.p99_ci) if ci is not None for v in ci]
    values = (out.mean, out.p50, out.p90, out.p99, out.min, out.max, *cis)
    return out if all(math.isfinite(v) for v in values) else None


def _load(p: PointResult, speed: float) -> float | None:
    if p.concurrency is not None:
        return float(p.concurrency)
    if p.offered_rate is None or math.isnan(p.offered_rate) or p.offered_rate <= 0:
        return None
    return p.offered_rate / speed  # inf stays inf


def workload_plot_data(results: Results) -> WorkloadPlotData:
    """The points of results.workload (which must be set), in the order they ran."""
    assert results.workload is not None
    speed = results.speed_factor
    workload = results.workload.workload
    points = []
    for p in results.workload.points:
        load = _load(p, speed)
        if load is None:
            continue
        tok_s = p.output_tok_s / speed
        points.append(
            LoadPoint(
                p.index, p.trial, load, tok_s if math.isfinite(tok_s) else None, p.status,
                server_quantiles(p.ttft, speed), server_quantiles(p.tpot, speed),
            )
        )  # fmt: skip
    slo = workload.slo
    return WorkloadPlotData(
        closed=workload.arrivals.kind == "closed-count",
        points=tuple(points),
        slo_ttft_s=None if slo is None else slo.ttft_p99_s,
        slo_tpot_s=None if slo is None else slo.tpot_p99_s,
    )


def load_positions(points: tuple[LoadPoint, ...]) -> tuple[list[float], list[tuple[float, str]]]:
    """Each point's place on a log load axis and the axis' ticks: an offered rate of inf
    (every request at once) sits at twice the highest finite load, its tick "inf"."""
    finite = [p.load for p in points if math.isfinite(p.load)]
    at_inf = 2.0 * max(finite) if finite else 1.0
    xs = [p.load if math.isfinite(p.load) else at_inf for p in points]
    ticks = {
        x: ("inf" if not math.isfinite(p.load) else f"{p.load:g}")
        for x, p in zip(xs, points, strict=True)
    }
    return xs, sorted(ticks.items())
