"""The SLO-capacity search: the highest offered rate (or concurrency) whose point meets
every SLO bound, found by bracketing then bisection (docs/workloads.md, "SLO capacity").

A point's verdict: `met` when it is valid and every bound is met by MLPerf's early-stopping
rule (bench.workload.slo); `missed` when a bound is missed, or the point is overloaded or
failed; `undecided` otherwise (too few requests to tell, a late client). The capacity is
the highest rate *shown* to meet: an undecided point counts as not meeting.

    bracketing   from the start, x `factor` after a met point, / `factor` after another,
                 until one met point lies below one that is not (or a limit is reached:
                 "every point met" at the highest, "none met" at the lowest)
    bisection    the geometric middle of the bracket (rates; the integer middle for
                 concurrencies), until high / low <= 1 + tolerance (concurrencies: adjacent)

Each search step is one point, measured as any other; `max_points` bounds a search. With
noise a met point may lie above a missed one: the bracket keeps the highest met point below
the lowest missed one, and the search says so in its note.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from bench.workload_points import PointResult

Verdict = Literal["met", "missed", "undecided"]


def point_verdict(p: PointResult) -> Verdict:
    """The point against its SLO checks (it must have some)."""
    if p.status in ("overloaded", "failed"):
        return "missed"
    if p.status != "valid" or not p.slo:
        return "undecided"
    verdicts = {c.verdict for c in p.slo}
    if "missed" in verdicts:
        return "missed"
    return "met" if verdicts == {"met"} else "undecided"


@dataclass
class CapacitySearchState:
    """One search's state; `next_point` is None when it is done."""

    start: float
    lowest: float
    highest: float
    integer: bool = False  # concurrencies
    factor: float = 2.0
    tolerance: float = 0.05
    max_points: int = 12
    tried: list[tuple[float, Verdict]] = field(default_factory=list)

    @property
    def missed(self) -> float | None:
        """The lowest point tried that did not meet."""
        return min((x for x, v in self.tried if v != "met"), default=None)

    @property
    def met(self) -> float | None:
        """The highest met point below every point that did not meet."""
        ceiling = self.missed
        return max(
            (x for x, v in self.tried if v == "met" and (ceiling is None or x < ceiling)),
            default=None,
        )

    def record(self, point: float, verdict: Verdict) -> None:
        self.tried.append((point, verdict))

    def next_point(self) -> float | None:
        if len(self.tried) >= self.max_points:
            return None
        return self._candidate()

    def _candidate(self) -> float | None:
        """The point the rules ask for next, whatever max_points says."""
        if not self.tried:
            return self._fit(self.start)
        met, missed = self.met, self.missed
        if met is None or missed is None:
            return self._bracket(met, missed)
        if self.integer:
            return None if missed - met <= 1 else float((int(met) + int(missed)) // 2)
        return None if missed / met <= 1 + self.tolerance else math.sqrt(met * missed)

    def _bracket(self, met: float | None, missed: float | None) -> float | None:
        """Down from a point that did not meet, up from one that did; None at a limit."""
        if met is None:
            assert missed is not None
            low = self._fit(missed / self.factor)
            return None if missed <= self.lowest or low >= missed else low
        high = self._fit(met * self.factor)
        return None if met >= self.highest or high <= met else high

    def _fit(self, x: float) -> float:
        x = min(max(x, self.lowest), self.highest)
        return float(round(x)) if self.integer else x

    def note(self) -> str | None:
        """What a reader must know of how this search ended, if anything."""
        met, missed = self.met, self.missed
        if met is None:
            lowest = min((x for x, _ in self.tried), default=self.start)
            return f"no point met the SLO: the lowest tried, {lowest:g}, did not"
        if missed is None:
            return f"every point met the SLO: the highest tried, {met:g}, is a lower bound"
        above = [x for x, v in self.tried if v == "met" and x > missed]
        if above:
            return (
                f"not monotone: {', '.join(f'{x:g}' for x in sorted(above))} met above "
                f"{missed:g}, which did not; the bracket is below {missed:g}"
            )
        if len(self.tried) >= self.max_points and self._candidate() is not None:
            return f"stopped after {self.max_points} points with the bracket still wider than asked"
        return None
