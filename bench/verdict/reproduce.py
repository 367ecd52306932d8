"""Reproduce: a run against a published card, cell by cell, with a verdict per cell.

Δ % = (ours − card) / card × 100, ours at server speed (a twin's figures are divided /
multiplied by its speed factor first). A figure passes when |Δ %| is within the
tolerance of its kind (throughput ±5 %, latency ±10 % by default). Over-capacity sets
must match: a cell over capacity on one side only fails. Cells of the card this run did
not plan are listed as not measured and do not decide the verdict; the summary says how
much of the card was covered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bench.verdict.cells import Cell, Key, MetricSpec, RunFigures, metrics_of

CellVerdict = Literal[
    "pass",
    "fail",
    "both over capacity",
    "over capacity here only",
    "over capacity on card only",
    "failed here",
    "not measured here",
    "not run on card",
]
PASSING: frozenset[str] = frozenset({"pass", "both over capacity"})
NEUTRAL: frozenset[str] = frozenset({"not measured here", "not run on card"})


@dataclass(frozen=True)
class Tolerances:
    throughput_pct: float = 5.0
    latency_pct: float = 10.0

    def of(self, metric: MetricSpec) -> float:
        return self.throughput_pct if metric.kind == "throughput" else self.latency_pct


@dataclass(frozen=True)
class FigureCheck:
    metric: MetricSpec
    ours: float | None
    card: float | None
    delta_pct: float | None
    tolerance_pct: float

    @property
    def ok(self) -> bool | None:
        if self.delta_pct is None:
            return None
        return abs(self.delta_pct) <= self.tolerance_pct


@dataclass(frozen=True)
class CellCheck:
    key: Key
    verdict: CellVerdict
    figures: tuple[FigureCheck, ...]
    note: str | None = None


@dataclass(frozen=True)
class Reproduction:
    ours: RunFigures
    card: RunFigures
    tolerances: Tolerances
    cells: tuple[CellCheck, ...]

    @property
    def judged(self) -> list[CellCheck]:
        return [c for c in self.cells if c.verdict not in NEUTRAL]

    @property
    def failed(self) -> list[CellCheck]:
        return [c for c in self.judged if c.verdict not in PASSING]

    @property
    def reproduced(self) -> bool:
        return bool(self.judged) and not self.failed

    def summary(self) -> str:
        total = sum(1 for c in self.cells if c.key in self.card.cells)
        word = "REPRODUCED" if self.reproduced else "NOT REPRODUCED"
        missing = sum(1 for c in self.cells if c.verdict == "not measured here")
        line = (
            f"{word}: {len(self.judged) - len(self.failed)} of {len(self.judged)} compared "
            f"cells within ±{self.tolerances.throughput_pct:g} % (throughput) / "
            f"±{self.tolerances.latency_pct:g} % (latency)"
        )
        if missing:
            line += f"; {missing} of the card's {total} cells not measured here"
        return line


def delta_pct(ours: float | None, reference: float | None) -> float | None:
    if ours is None or reference is None or reference == 0:
        return None
    return (ours - reference) / reference * 100.0


def _figures(ours: Cell | None, card: Cell, tol: Tolerances) -> tuple[FigureCheck, ...]:
    out = []
    for metric in metrics_of(card.phase):
        mine = ours.value(metric.name) if ours else None
        theirs = card.value(metric.name)
        if theirs is None and mine is None:
            continue
        out.append(FigureCheck(metric, mine, theirs, delta_pct(mine, theirs), tol.of(metric)))
    return tuple(out)


def _verdict(ours: Cell | None, card: Cell, checks: tuple[FigureCheck, ...]) -> CellVerdict:
    if card.status == "over_capacity":
        if ours is None:
            return "not measured here"
        return (
            "both over capacity" if ours.status == "over_capacity" else "over capacity on card only"
        )
    if ours is None:
        return "not measured here"
    if ours.status == "over_capacity":
        return "over capacity here only"
    if card.status != "valid":
        return "not run on card"
    if ours.status != "valid":
        return "failed here"
    compared = [c for c in checks if c.card is not None]
    if any(c.ok is not True for c in compared) or not compared:
        return "fail"
    return "pass"


def reproduce(ours: RunFigures, card: RunFigures, tolerances: Tolerances) -> Reproduction:
    checks = []
    for key, published in card.cells.items():
        mine = ours.cell(key)
        figures = _figures(mine, published, tolerances)
        verdict = _verdict(mine, published, figures)
        note = (
            mine.detail if mine and verdict in ("failed here", "over capacity here only") else None
        )
        checks.append(CellCheck(key, verdict, figures, note))
    order = {c: i for i, c in enumerate(card.contexts)}
    checks.sort(key=lambda c: (c.key[0] != "prefill", order.get(c.key[1], 0), c.key[2]))
    return Reproduction(ours, card, tolerances, tuple(checks))
