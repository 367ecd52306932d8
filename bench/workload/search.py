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

That capacity is a bound (below the rate where the population's percentile reaches its
bound). Beside it, `point_estimate` reads a point estimate off the same points: where
their measured percentiles cross their bounds (the notes above `Reading`).
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


# --- the point estimate ---------------------------------------------------------------------
#
# The search's `met` is a bound: the highest rate *shown* (at 99 % confidence) to meet, below
# the rate where the population's percentile reaches its bound by design. Beside it, each
# search gives a point estimate from the very same points: for each SLO term, the rate at
# which the points' measured percentile crosses the term's bound, read off the points
# smoothed to rise with the rate (isotonic regression, pool-adjacent-violators) and
# interpolated linearly in log rate and log value between the two points that bracket the
# bound; the estimate is the lowest of the terms' crossings. A point that was overloaded or
# failed has no usable percentile: it caps the crossing (readings above it are left out).


KEPT_PERCENTILES = (50, 90, 99)  # what a point keeps of each figure (Quantiles)


@dataclass(frozen=True)
class Reading:
    """One point's measured figure for one SLO term: `value` against `limit` (the term's
    bound in seconds, log-interpolated; or, where the point keeps no such percentile, the
    share of requests over the bound against 1 - q, interpolated linearly)."""

    rate: float
    value: float
    limit: float
    log_value: bool = True


@dataclass(frozen=True)
class Crossing:
    """Where one term's smoothed readings cross its limit; `rate` None when they do not
    (then `why` says so)."""

    rate: float | None
    why: str | None = None
    # Within its limit up to this rate (the highest read) and not crossed: the term binds
    # above it, if anywhere.
    under_to: float | None = None


@dataclass(frozen=True)
class PointEstimate:
    """A search's point estimate: the lowest crossing over the SLO's terms, the term that
    gave it, or None and why."""

    rate: float | None
    term: str | None = None
    why: str | None = None


def isotonic(values: list[float]) -> list[float]:
    """The non-decreasing sequence nearest `values` in least squares, equal weights (pool
    adjacent violators: a value below the block before it is pooled with it into their
    mean, repeatedly)."""
    blocks: list[tuple[float, int]] = []  # (mean, size)
    for v in values:
        blocks.append((v, 1))
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            (m1, n1), (m2, n2) = blocks[-2], blocks[-1]
            blocks[-2:] = [((m1 * n1 + m2 * n2) / (n1 + n2), n1 + n2)]
    return [m for m, n in blocks for _ in range(n)]


def crossing(readings: list[Reading], cap: float | None = None) -> Crossing:
    """The rate where one term's readings, smoothed (isotonic in rate), cross its limit:
    interpolated between the last smoothed reading within the limit and the first over it,
    linearly in log rate and in log value (or in the value for a share). Readings at or
    above `cap` (the lowest overloaded or failed point) are left out."""
    kept = sorted((r for r in readings if cap is None or r.rate < cap), key=lambda r: r.rate)
    if not kept:
        return Crossing(None, "no point below the lowest overloaded or failed one")
    limit, log_value = kept[0].limit, kept[0].log_value
    fitted = isotonic([r.value for r in kept])
    over = next((i for i, v in enumerate(fitted) if v > limit), None)
    if over is None:
        top = kept[-1].rate
        why = f"within its bound at every point read, up to {top:g}"
        if cap is not None:
            why += f" ({cap:g} was overloaded or failed)"
        return Crossing(None, why, under_to=top)
    if over == 0:
        return Crossing(None, f"over its bound at every point read, from {kept[0].rate:g}")
    (x0, v0), (x1, v1) = (kept[over - 1].rate, fitted[over - 1]), (kept[over].rate, fitted[over])
    if log_value and v0 > 0:
        share = (math.log(limit) - math.log(v0)) / (math.log(v1) - math.log(v0))
    else:
        share = (limit - v0) / (v1 - v0)
    return Crossing(math.exp(math.log(x0) + share * (math.log(x1) - math.log(x0))))


def point_estimate(readings: dict[str, list[Reading]], cap: float | None = None) -> PointEstimate:
    """The lowest of the terms' crossings (the notes above). A term within its bound at
    every point read binds above them: it is passed over when the lowest crossing lies at
    or below its highest reading. Else, or when a term is over its bound at every point
    read (it crosses below them), there is no estimate."""
    if not readings:
        return PointEstimate(None, why="no point with readings of the SLO's terms")
    each = {term: crossing(rs, cap) for term, rs in readings.items()}
    crossed = {t: c.rate for t, c in each.items() if c.rate is not None}
    if not crossed:
        t, c = min(sorted(each.items()), key=lambda tc: tc[1].under_to is not None)
        return PointEstimate(None, why=f"{t} {c.why}")
    term = min(crossed, key=lambda t: crossed[t])
    rate = crossed[term]
    for t, c in sorted(each.items()):
        if c.rate is None and (c.under_to is None or c.under_to < rate):
            return PointEstimate(None, why=f"{t} {c.why}")
    return PointEstimate(rate, term)
