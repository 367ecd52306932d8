"""The export's workload points (`bench run --workload`): one tidy row per point and trial.

Every scalar of the point's record (bench.workload_points.PointResult) and, for each of its
distributions (TTFT, TPOT, ITL, E2EL, lateness, held), the mean, p50, p90, p99 and the
p99's 95 % interval (`_p99_lo`, `_p99_hi`; empty when too few requests for one). At server
time, as the cells' rows (bench.export.rows): durations times the run's speed factor,
rates divided by it. The point's reasons and notes as one text each ("; " between lines),
its failures as `kind=count` pairs, and its SLO checks as columns per figure. A number
that is not finite (a results.json bench would never write) is left empty; an offered rate
of inf (every request at once) is `all_at_once` true with `offered_rate` empty.
"""

from __future__ import annotations

import math
from typing import Any

from bench.export.rows import Row, identity
from bench.export.writers import Kind
from bench.results import Results
from bench.workload_points import PointResult, Quantiles

DISTRIBUTIONS = ("ttft", "tpot", "itl", "e2el", "lateness", "held")
QUANTILE_PARTS = ("mean", "p50", "p90", "p99", "p99_lo", "p99_hi")
SLO_FIGURES = ("ttft", "tpot", "e2el")
SLO_PARTS = ("verdict", "bound_s", "n", "over", "more_needed")
# PointResult's scalars: those in seconds and those per second take the speed factor.
_DURATIONS = ("duration_s", "arrival_span_s", "started_at_s")
_RATES = ("sent_rate", "scheduled_rate", "achieved_rate", "output_tok_s", "total_tok_s",
          "goodput_rate")  # fmt: skip
_COUNTS = ("requests", "completed", "warmups", "stopped_early", "unfinished", "input_tokens",
           "output_tokens", "backlog_mid", "backlog_end")  # fmt: skip

POINT_COLUMNS: tuple[str, ...] = (
    "run_id", "bench_commit", "image", "server_version", "workload", "workload_sha256",
    "kind", "point", "trial", "offered_rate", "all_at_once", "concurrency", "status",
    "reasons", "notes", "failures", *_COUNTS, *_DURATIONS, *_RATES,
    *(f"{d}_{part}" for d in DISTRIBUTIONS for part in QUANTILE_PARTS),
    *(f"slo_{f}_{part}" for f in SLO_FIGURES for part in SLO_PARTS),
)  # fmt: skip


_TEXT = ("run_id", "bench_commit", "image", "server_version", "workload", "workload_sha256",
         "kind", "status", "reasons", "notes", "failures",
         *(f"slo_{f}_verdict" for f in SLO_FIGURES))  # fmt: skip
_INTS = ("point", "trial", "concurrency", *_COUNTS,
         *(f"slo_{f}_{part}" for f in SLO_FIGURES for part in SLO_PARTS[2:]))  # fmt: skip
# Each column's type in Parquet, whatever a run's values (a column all empty keeps its type).
POINT_KINDS: dict[str, Kind] = {
    name: "str" if name in _TEXT else "int" if name in _INTS else "float" for name in POINT_COLUMNS
} | {"all_at_once": "bool"}


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _times(value: float | None, speed: float) -> float | None:
    """A duration at server time."""
    return _finite(None if value is None else value * speed)


def _per(value: float | None, speed: float) -> float | None:
    """A rate at server time."""
    return _finite(None if value is None else value / speed)


def _quantiles(name: str, q: Quantiles | None, speed: float) -> Row:
    lo, hi = q.p99_ci if q is not None and q.p99_ci is not None else (None, None)
    values = {
        "mean": None if q is None else q.mean, "p50": None if q is None else q.p50,
        "p90": None if q is None else q.p90, "p99": None if q is None else q.p99,
        "p99_lo": lo, "p99_hi": hi,
    }  # fmt: skip
    return {f"{name}_{part}": _times(values[part], speed) for part in QUANTILE_PARTS}


def _slo(p: PointResult, speed: float) -> Row:
    out: Row = {f"slo_{f}_{part}": None for f in SLO_FIGURES for part in SLO_PARTS}
    for check in p.slo:
        out |= {
            f"slo_{check.figure}_verdict": check.verdict,
            f"slo_{check.figure}_bound_s": _times(check.bound_s, speed),
            f"slo_{check.figure}_n": check.n,
            f"slo_{check.figure}_over": check.over,
            f"slo_{check.figure}_more_needed": check.more_needed,
        }
    return out


def _point(p: PointResult, speed: float) -> Row:
    rate = p.offered_rate
    row: Row = {
        "point": p.index, "trial": p.trial,
        "offered_rate": None if rate is None or math.isinf(rate) else _per(rate, speed),
        "all_at_once": None if rate is None else math.isinf(rate),
        "concurrency": p.concurrency, "status": p.status,
        "reasons": "; ".join(p.reasons), "notes": "; ".join(p.notes),
        "failures": ", ".join(f"{kind}={n}" for kind, n in sorted(p.failures_by_kind.items())),
    }  # fmt: skip
    row |= {name: getattr(p, name) for name in _COUNTS}
    row |= {name: _times(getattr(p, name), speed) for name in _DURATIONS}
    row |= {name: _per(getattr(p, name), speed) for name in _RATES}
    for name in DISTRIBUTIONS:
        row |= _quantiles(name, getattr(p, name), speed)
    return row | _slo(p, speed)


def point_rows(results: Results, env: Any = None) -> list[Row]:
    """One row per point and trial of results.workload, in the order they ran; none for a
    run of the card's matrix."""
    run = results.workload
    if run is None:
        return []
    speed = results.speed_factor
    ident = {
        **identity(results, env),
        "workload": run.workload.name,
        "workload_sha256": run.sha256,
        "kind": run.workload.arrivals.kind,
    }
    rows = [ident | _point(p, speed) for p in run.points]
    return [{k: row.get(k) for k in POINT_COLUMNS} for row in rows]
