"""Compare runs: per cell and figure, Δ % of B against A and whether it is a real change.

A figure is marked changed only when both hold:
  1. it is unlikely to be noise:
     - with ≥ 2 trials on both sides, Welch's t-test on the per-trial values gives
       p < alpha (0.05), i.e. the 95 % confidence interval of the difference excludes 0;
     - otherwise |Δ %| exceeds the noise floor 1.96 × sqrt(rse_A² + rse_B²) × 100, where
       rse is each side's relative standard error: from its trials when it has ≥ 2, else
       from the run's own spread (see `cells` for the definition);
  2. it is large enough to matter: |Δ %| ≥ the minimum effect of its kind (3 % for
     throughput, 5 % for latencies by default). Dozens of cells × figures are tested at
     once, so significance alone would flag a few cells of identical runs by chance; the
     minimum effect keeps those false alarms out without hiding a change worth a report.
Direction: higher tok/s is better, lower latency is better. A cell whose status differs
(over capacity or failed on one side only) is marked as such and counts as changed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Literal

from bench import stats
from bench.verdict.cells import Cell, Key, MetricSpec, RunFigures, metrics_of
from bench.verdict.reproduce import delta_pct

Mark = Literal["improved", "regressed", "unchanged", "n/a"]
CellMark = Literal["improved", "regressed", "mixed", "unchanged", "status changed", "n/a"]


@dataclass(frozen=True)
class Policy:
    alpha: float = 0.05
    min_effect_throughput_pct: float = 3.0
    min_effect_latency_pct: float = 5.0

    def min_effect(self, metric: MetricSpec) -> float:
        if metric.kind == "throughput":
            return self.min_effect_throughput_pct
        return self.min_effect_latency_pct


@dataclass(frozen=True)
class FigureDelta:
    metric: MetricSpec
    a: float | None
    b: float | None
    delta_pct: float | None
    method: Literal["welch", "noise floor", "none"]
    ci_pct: tuple[float, float] | None = None  # 95 % CI of Δ %, Welch only
    p_value: float | None = None
    floor_pct: float | None = None
    mark: Mark = "n/a"


@dataclass(frozen=True)
class CellDelta:
    key: Key
    a: Cell | None
    b: Cell | None
    figures: tuple[FigureDelta, ...]
    mark: CellMark

    @property
    def flagged(self) -> bool:
        return self.mark not in ("unchanged", "n/a")


@dataclass(frozen=True)
class Comparison:
    a: RunFigures
    b: RunFigures
    policy: Policy
    cells: tuple[CellDelta, ...]
    metadata_diff: tuple[tuple[str, str, str], ...]

    @property
    def flagged(self) -> list[CellDelta]:
        return [c for c in self.cells if c.flagged]

    def summaries(self) -> list[str]:
        lines = []
        for metric in (m for phase in ("decode", "prefill") for m in metrics_of(phase)):
            ds = [f for c in self.cells for f in c.figures if f.metric is metric]
            deltas = [f.delta_pct for f in ds if f.delta_pct is not None]
            if not deltas:
                continue
            count = {
                m: sum(f.mark == m for f in ds) for m in ("improved", "regressed", "unchanged")
            }
            lines.append(
                f"{metric.label}: {count['improved']} improved, {count['regressed']} regressed, "
                f"{count['unchanged']} unchanged of {len(deltas)}; median Δ "
                f"{_signed(statistics.median(deltas))} % "
                f"(range {_signed(min(deltas))} to {_signed(max(deltas))})"
            )
        return lines


def _signed(value: float) -> str:
    return "0.0" if round(value, 1) == 0 else f"{value:+.1f}".replace("-", "−")


def _rse(cell: Cell, metric: str) -> float | None:
    values = cell.trials.get(metric, ())
    if len(values) >= 2:
        m = stats.mean(values)
        return math.sqrt(stats.sample_variance(values) / len(values)) / m if m else None
    return cell.rse.get(metric)


def _mark(metric: MetricSpec, delta: float, changed: bool) -> Mark:
    if not changed:
        return "unchanged"
    return "improved" if (delta > 0) == metric.higher_is_better else "regressed"


def figure_delta(metric: MetricSpec, a: Cell, b: Cell, policy: Policy) -> FigureDelta:
    ta, tb = a.trials.get(metric.name, ()), b.trials.get(metric.name, ())
    va, vb = a.value(metric.name), b.value(metric.name)
    d = delta_pct(vb, va)
    if d is None or va is None:
        return FigureDelta(metric, va, vb, d, "none")
    big = abs(d) >= policy.min_effect(metric)
    if len(ta) >= 2 and len(tb) >= 2:
        w = stats.welch(ta, tb, level=1.0 - policy.alpha)
        ci = (w.low / va * 100.0, w.high / va * 100.0)
        changed = w.p_value < policy.alpha and big
        return FigureDelta(
            metric, va, vb, d, "welch", ci, w.p_value, mark=_mark(metric, d, changed)
        )
    ra, rb = _rse(a, metric.name), _rse(b, metric.name)
    floor = 1.96 * math.hypot(ra or 0.0, rb or 0.0) * 100.0
    changed = abs(d) > floor and big
    return FigureDelta(
        metric, va, vb, d, "noise floor", floor_pct=floor, mark=_mark(metric, d, changed)
    )


def _cell_mark(a: Cell | None, b: Cell | None, figures: tuple[FigureDelta, ...]) -> CellMark:
    if a is None or b is None:
        return "n/a"
    if a.status != b.status:
        return "status changed"
    marks = {f.mark for f in figures}
    if "regressed" in marks and "improved" in marks:
        return "mixed"
    for m in ("regressed", "improved", "unchanged"):
        if m in marks:
            return m
    return "n/a"


def compare(a: RunFigures, b: RunFigures, policy: Policy) -> Comparison:
    keys = sorted(
        set(a.cells) | set(b.cells),
        key=lambda k: (k[0] != "prefill", _size(k[1]), k[2]),
    )
    cells = []
    for key in keys:
        ca, cb = a.cell(key), b.cell(key)
        figures: tuple[FigureDelta, ...] = ()
        if ca is not None and cb is not None and ca.status == cb.status == "valid":
            figures = tuple(figure_delta(m, ca, cb, policy) for m in metrics_of(key[0]))
        cells.append(CellDelta(key, ca, cb, figures, _cell_mark(ca, cb, figures)))
    return Comparison(a, b, policy, tuple(cells), metadata_diff(a, b))


def _size(label: str) -> float:
    scale = {"K": 1024.0, "M": 1048576.0}.get(label[-1:], 1.0)
    try:
        return float(label[:-1]) * scale
    except ValueError:
        return math.inf


def metadata_diff(a: RunFigures, b: RunFigures) -> tuple[tuple[str, str, str], ...]:
    out = []
    for name in sorted(set(a.metadata) | set(b.metadata)):
        va, vb = a.metadata.get(name, "—"), b.metadata.get(name, "—")
        if va != vb:
            out.append((name, va, vb))
    return tuple(out)
