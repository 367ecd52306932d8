"""The difference in SLO capacity from A to B, with its interval (`bench capacity` runs).

Each side's searches give one capacity each, at server speed. Which one: each search's point
estimate (bench.workload.search.point_estimate: where the points' measured percentile crosses
its bound) when every search on both sides has one; else, for both sides alike, each search's
bound (the highest point shown to meet the SLO; a search that found none gives none), and the
section says why. The estimate is the better quantity to compare: on the twin it lies within
5 % of the true capacity where the bound, a lower bound by design, sits a grid step below it,
and it is not rounded to the search's grid (docs/measured/capacity-power-*.md measure both).

With two or more a side, Welch's test on their logarithms gives B/A as Δ % with a (1 - alpha)
interval, the same test compare applies to a cell's trials; the capacity CHANGED when the
interval excludes 0. With one a side, or a side whose values are all equal (searches ending
on one grid point), the Δ is shown raw: no interval, never "changed". Not changed, it is
EQUIVALENT within ±margin when the (1 - 2 alpha) interval lies inside the band (two one-sided
tests, as compare's figures), else not resolved. Two sides searched against different SLOs,
or by different axes (rate, concurrency), are not compared.
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
    basis: str = "bounds"  # what a and b are: "point estimates" or "bounds"


def _geo(xs: tuple[float, ...]) -> float:
    return math.exp(math.fsum(math.log(x) for x in xs) / len(xs))


def judge(
    a: RunFigures, b: RunFigures, alpha: float, margin_pct: float = 5.0
) -> CapacityDelta | None:
    """None unless both sides are capacity searches."""
    if not a.capacity_of or not b.capacity_of:
        return None
    unit = "streams" if a.capacity_of.startswith("concurrency") else "requests/s"
    without = [n for n, r in (("A", a), ("B", b)) if not _estimated(r)]
    if without:
        xa, xb, basis = a.capacity, b.capacity, "bounds"
    else:
        xa, xb, basis = a.capacity_estimate, b.capacity_estimate, "point estimates"
    base = CapacityDelta(a.capacity_of, unit, xa, xb, basis=basis)
    if a.capacity_of != b.capacity_of:
        why = f"not compared: A searched {a.capacity_of}, B {b.capacity_of}"
        return replace(base, note=why)
    if not xa or not xb:
        side = "A" if not xa else "B"
        return replace(base, note=f"not compared: no search of {side} found a point within the SLO")
    note = None if not without else _on_bounds(without, a, b)
    base = replace(base, note=note)
    delta = stats.pct_of_log(math.log(_geo(xb)) - math.log(_geo(xa)))
    if len(xa) < 2 or len(xb) < 2:
        why = "one search on a side: no interval; repeat the search (--repeats, or more bundles)"
        return replace(base, delta_pct=delta, note=_joined(note, why))
    if len(set(xa)) == 1 or len(set(xb)) == 1:
        # Searches end on a grid (the bracketing's doublings, then bisection): a side whose
        # searches all ended at one point shows no spread, and a test would read any
        # difference as certain. Its noise is unknown: shown raw, as with one search.
        why = (
            "a side's searches all ended at one value: their spread, and so an interval, is "
            "unknown; more repeats or a finer --tolerance"
        )
        return replace(base, delta_pct=delta, note=_joined(note, why))
    r = stats.welch_log(xa, xb, level=1.0 - alpha)
    changed = r.low_pct > 0 or r.high_pct < 0
    tost = stats.welch_log(xa, xb, level=1.0 - 2.0 * alpha)
    inside = -margin_pct < tost.low_pct and tost.high_pct < margin_pct and not changed
    return replace(
        base, delta_pct=r.delta_pct, ci_pct=(r.low_pct, r.high_pct), p_value=r.p_value,
        changed=changed, margin_pct=margin_pct if inside else None,
    )  # fmt: skip


def _estimated(r: RunFigures) -> bool:
    """Every search of R has a point estimate (none of a run saved before it was kept)."""
    return r.capacity_searches > 0 and len(r.capacity_estimate) == r.capacity_searches


def _on_bounds(without: list[str], a: RunFigures, b: RunFigures) -> str:
    def why(r: RunFigures) -> str:
        if r.capacity_searches == 0:
            return "saved before the point estimate was kept"
        n = r.capacity_searches
        return f"{n - len(r.capacity_estimate)} of {n} searches gave none"

    said = "; ".join(f"{n}: {why(a if n == 'A' else b)}" for n in without)
    return f"compared on the bounds, not the point estimates ({said})"


def _joined(first: str | None, then: str) -> str:
    return then if first is None else f"{first}; {then}"


def lines(d: CapacityDelta, alpha: float) -> list[str]:
    """The section compare prints."""

    def side(xs: tuple[float, ...]) -> str:
        if not xs:
            return "none found"
        each = ", ".join(f"{x:,.3g}" for x in xs)
        return f"{_geo(xs):,.3g} {d.unit} (geometric mean of {len(xs)}: {each})"

    each = (
        "each search's point estimate (where its points' measured percentile crosses the bound)"
        if d.basis == "point estimates"
        else "each search's bound (the highest point shown to meet the SLO)"
    )
    out = [
        "### SLO capacity",
        "",
        f"Searched: {d.what}; compared: {each}.",
        f"- A: {side(d.a)}",
        f"- B: {side(d.b)}",
    ]
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
