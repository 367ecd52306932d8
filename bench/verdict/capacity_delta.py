"""The difference in SLO capacity from A to B, with its interval (`bench capacity` runs).

Each side's searches give one capacity each (the highest point shown to meet the SLO, at
server speed; a search that found none gives none). With two or more a side, Welch's test
on their logarithms gives B/A as Δ % with a (1 - alpha) interval, the same test compare
applies to a cell's trials; the capacity CHANGED when the interval excludes 0. With one a
side, or a side whose searches all ended at one point (no spread), the Δ is shown raw: no
interval, never "changed". Not changed, it is EQUIVALENT within ±margin when the (1 - 2
alpha) interval lies inside the band (two one-sided tests, as compare's figures), else not
resolved. Two sides searched against different
SLOs, or by different axes (rate, concurrency), are not compared.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from bench import stats
from bench.verdict.cells import RunFigures


@dataclass(frozen=True)
class CapacityDelta:
    what: str  # "rate at ttft_p99<=2s,tpot_p99<=0.08s"
    unit: str  # "requests/s" or "streams"
    a: tuple[float, ...]
    b: tuple[float, ...]
    delta_pct: float | None = None
    ci_pct: tuple[float, float] | None = None
    p_value: float | None = None
    changed: bool = False
    note: str | None = None
    margin_pct: float | None = None  # set when the capacity is shown equivalent within it


def _geo(xs: tuple[float, ...]) -> float:
    return math.exp(math.fsum(math.log(x) for x in xs) / len(xs))


def judge(
    a: RunFigures, b: RunFigures, alpha: float, margin_pct: float = 5.0
) -> CapacityDelta | None:
    """None unless both sides are capacity searches."""
    if not a.capacity_of or not b.capacity_of:
        return None
    unit = "streams" if a.capacity_of.startswith("concurrency") else "requests/s"
    base = CapacityDelta(a.capacity_of, unit, a.capacity, b.capacity)
    if a.capacity_of != b.capacity_of:
        why = f"not compared: A searched {a.capacity_of}, B {b.capacity_of}"
        return replace(base, note=why)
    if not a.capacity or not b.capacity:
        side = "A" if not a.capacity else "B"
        return replace(base, note=f"not compared: no search of {side} found a point within the SLO")
    delta = stats.pct_of_log(math.log(_geo(b.capacity)) - math.log(_geo(a.capacity)))
    if len(a.capacity) < 2 or len(b.capacity) < 2:
        why = "one search on a side: no interval; repeat the search (--repeats, or more bundles)"
        return replace(base, delta_pct=delta, note=why)
    if len(set(a.capacity)) == 1 or len(set(b.capacity)) == 1:
        # Searches end on a grid (the bracketing's doublings, then bisection): a side whose
        # searches all ended on one point shows no spread, and a test would read any
        # difference as certain. Its noise is unknown: shown raw, as with one search.
        why = (
            "a side's searches all ended at one point: their spread, and so an interval, is "
            "unknown; more repeats or a finer --tolerance"
        )
        return replace(base, delta_pct=delta, note=why)
    r = stats.welch_log(a.capacity, b.capacity, level=1.0 - alpha)
    changed = r.low_pct > 0 or r.high_pct < 0
    tost = stats.welch_log(a.capacity, b.capacity, level=1.0 - 2.0 * alpha)
    inside = -margin_pct < tost.low_pct and tost.high_pct < margin_pct and not changed
    return replace(
        base, delta_pct=r.delta_pct, ci_pct=(r.low_pct, r.high_pct), p_value=r.p_value,
        changed=changed, margin_pct=margin_pct if inside else None,
    )  # fmt: skip


def lines(d: CapacityDelta, alpha: float) -> list[str]:
    """The section compare prints."""

    def side(xs: tuple[float, ...]) -> str:
        if not xs:
            return "none found"
        each = ", ".join(f"{x:,.3g}" for x in xs)
        return f"{_geo(xs):,.3g} {d.unit} (geometric mean of {len(xs)}: {each})"

    out = ["### SLO capacity", "", f"Searched: {d.what}.", f"- A: {side(d.a)}", f"- B: {side(d.b)}"]
    if d.delta_pct is not None:
        text = f"- B against A: {d.delta_pct:+.1f} %"
        if d.ci_pct is not None:
            text += f", {100 * (1 - alpha):g} % interval [{d.ci_pct[0]:+.1f}, {d.ci_pct[1]:+.1f}] %"
            text += f", p = {d.p_value:.2g}" if d.p_value is not None else ""
            text += ": CHANGED" if d.changed else _unchanged(d)
        out.append(text.replace("-", "−").replace("− B", "- B", 1))
    if d.note:
        out.append(f"- {d.note}")
    return out


def _unchanged(d: CapacityDelta) -> str:
    if d.margin_pct is not None:
        return f": equivalent within ±{d.margin_pct:g} %"
    return ": not resolved (neither a change nor within the margin)"


def headline(d: CapacityDelta) -> str:
    """The verdict line's part."""
    if d.changed and d.delta_pct is not None:
        return (
            f"SLO capacity {'higher' if d.delta_pct > 0 else 'lower'} by {abs(d.delta_pct):.1f} %"
        )
    if d.margin_pct is not None:
        return f"SLO capacity equivalent within ±{d.margin_pct:g} %"
    return "SLO capacity not resolved"
