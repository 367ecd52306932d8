"""A workload run's points as verdict cells (`Cell`, phase "workload"), at server speed:
compare judges them with the statistics, the answers gate and the run-level model it
applies to the card's cells (docs/workloads.md, "Comparing workload runs").

A point is keyed ("workload", its label, C): the label is its offered rate in server
requests/s ("4/s", "inf/s"), "closed" for a closed-count point, whose C is the third part
(0 for a rate point), or "trace" for a trace's one point. Its figures: output tok/s over
the point, and TTFT and TPOT at p50 and p99 over its completed requests. A point that is
not `valid` (overloaded, a late client, too many failures) is named by its status and
never judged equal.

A single trial's own spread: a p50's relative error from its order statistics as the card's
medians' (`cells.median_rse`); a p99's from its distribution-free 95 % interval (half its
width over 1.96, relative), none without one; output tok/s's from the spread of the
requests' TPOT over sqrt(requests), as a card cell's total tok/s.
"""

from __future__ import annotations

import math
from typing import Any

from bench.results import Results
from bench.verdict.cells import Cell, Key, Status, mean_rse, median_rse
from bench.workload_points import PointResult, Quantiles, WorkloadRun

_STATUS: dict[str, Status] = {
    "valid": "valid",
    "overloaded": "invalid",
    "late_client": "invalid",
    "failed": "failed",
    "interrupted": "interrupted",
}


def label(p: PointResult, speed: float) -> tuple[str, int]:
    """(label, C) of a point's key."""
    if p.concurrency is not None:
        return "closed", p.concurrency
    rate = p.offered_rate
    if rate is None:  # a trace's one point: its own arrival times
        return "trace", 0
    if rate is None or math.isinf(rate):
        return "inf/s", 0
    return f"{rate / speed:g}/s", 0


def _p99_rse(q: Quantiles) -> float | None:
    if q.p99_ci is None or q.p99 <= 0:
        return None
    return (q.p99_ci[1] - q.p99_ci[0]) / (2 * 1.96) / q.p99


def _figures(p: PointResult, n: float) -> tuple[dict[str, float], dict[str, float]]:
    """(figures at server speed, their single-trial relative errors)."""
    values: dict[str, float] = {"wl_output_tok_s": p.output_tok_s / n}
    rse: dict[str, float] = {}
    for name, q in (("ttft", p.ttft), ("tpot", p.tpot)):
        if q is None:
            continue
        values[f"wl_{name}_p50_s"] = q.p50 * n
        values[f"wl_{name}_p99_s"] = q.p99 * n
        if (r := median_rse(q.n, q.p50, q.p90)) is not None:
            rse[f"wl_{name}_p50_s"] = r
        if (r := _p99_rse(q)) is not None:
            rse[f"wl_{name}_p99_s"] = r
    if p.tpot is not None and (r := mean_rse(p.tpot.n, p.tpot.mean, p.tpot.p50, p.tpot.p90)):
        rse["wl_output_tok_s"] = r
    return values, rse


def capacity_of(results: Results) -> dict[str, Any]:
    """RunFigures' capacity fields of a `bench capacity` run (server speed), else none."""
    wl = results.workload
    if wl is None or wl.capacity is None:
        return {}
    cap = wl.capacity
    per = results.server.speed_factor if cap.by == "rate" else 1.0
    found = tuple(s.met / per for s in cap.searches if s.met is not None and s.met > 0)
    crossed = tuple(
        s.crossing / per for s in cap.searches if s.crossing is not None and s.crossing > 0
    )
    return {
        "capacity_of": f"{cap.by} at {cap.slo}",
        "capacity": found,
        "capacity_estimate": crossed,
        "capacity_searches": len(cap.searches),
    }


def cells(run: WorkloadRun, speed: float) -> dict[Key, Cell]:
    """Every point of `run`, its trials together, as a Cell; none for a capacity search,
    whose points are steps of its search (at rates of its own), not a sweep."""
    if run.capacity is not None:
        return {}
    by_key: dict[tuple[str, int], list[PointResult]] = {}
    for p in run.points:
        by_key.setdefault(label(p, speed), []).append(p)
    out: dict[Key, Cell] = {}
    for (name, c), points in by_key.items():
        key: Key = ("workload", name, c)
        bad = [p for p in points if p.status != "valid"]
        if bad:
            status = _STATUS[bad[0].status]
            why = "; ".join(
                sorted({f"{p.status}: {'; '.join(p.reasons) or 'no reason'}" for p in bad})
            )
            out[key] = Cell("workload", name, c, status, why)
            continue
        figures = [_figures(p, speed) for p in points]
        trials = {m: tuple(f[0][m] for f in figures if m in f[0]) for m in figures[0][0]}
        rse = figures[0][1] if len(points) == 1 else {}
        runs = tuple(p.trial for p in points)
        out[key] = Cell("workload", name, c, "valid", None, trials, rse, runs)
    return out
