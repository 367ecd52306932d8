"""A compare's last line: what the runs show, never a clean bill they cannot give.

The run's outcome (`outcome`): CHANGED when a cell changed (or the whole run, or the SLO
capacity); EQUIVALENT when every compared cell is shown within its margin (and the
capacity, where searched); else NOT RESOLVED. The line (`verdict`) says "no change" only
as "equivalent within ±m"; not resolved, it says how small a change the runs could have
missed and about how many runs a side would show ±m, at the noise they measured
(`bench.verdict.equivalence`).
"""

from __future__ import annotations

from collections.abc import Collection

from bench.verdict import capacity_delta, equivalence
from bench.verdict.cells import Key
from bench.verdict.compare import MDE_SHOWN_UP_TO_PCT, CellDelta, Comparison, FigureDelta


def compared(c: Comparison) -> list[CellDelta]:
    """The cells that were compared (each has an outcome)."""
    return [x for x in c.cells if x.outcome is not None]


def outcome(c: Comparison) -> equivalence.Outcome | None:
    cap = c.capacity
    if (
        any(x.flagged for x in c.cells)
        or (c.whole is not None and c.whole.changed)
        or (cap is not None and cap.changed)
    ):
        return "changed"
    outs = {x.outcome for x in compared(c)}
    if cap is not None:
        outs.add("equivalent" if cap.margin_pct is not None else "not resolved")
    if not outs:
        return None
    return "equivalent" if outs == {"equivalent"} else "not resolved"


def _margin_text(c: Comparison) -> str:
    if c.policy.figure_margins:
        return "within each figure's margin"
    return f"within ±{c.policy.margin_pct:g} %"


def _sides(c: Comparison) -> str:
    """'6 + 3 runs', or trials where a side is one server start."""
    counts = []
    for side in (c.a, c.b):
        n = max((len(v) for x in side.cells.values() for v in x.trials.values()), default=0)
        counts.append(n)
    one_start = any(s.kind == "run" and s.metadata.get("runs", "1") == "1" for s in (c.a, c.b))
    word = "trials, one server start a side" if one_start else "runs"
    return f"{counts[0]} + {counts[1]} {word}"


def _unresolved(c: Comparison, keys: Collection[Key] | None = None) -> list[FigureDelta]:
    return [
        f
        for x in compared(c)
        if x.outcome == "not resolved" and (keys is None or x.key in keys)
        for f in x.figures
        if f.delta_pct is not None and f.outcome == "not resolved"
    ]


def missable_pct(c: Comparison) -> float | None:
    """The largest change the runs could have missed: the MDE (80 % power) of the figures not
    resolved, each at the level its own test runs at, and that of a change of the whole run."""
    found = [f.mde_pct for f in _unresolved(c) if f.mde_pct is not None]
    if c.whole is not None and not c.whole.changed:
        found.append(c.whole.mde_pct)
    return max(found, default=None)


# What runs_needed answers when some figure needs more than equivalence.MAX_RUNS a side.
BEYOND_MAX_RUNS = equivalence.MAX_RUNS + 1


def runs_needed(c: Comparison, keys: Collection[Key] | None = None) -> int | None:
    """About how many runs a side would show every unresolved figure (of the cells KEYS,
    default all) within its margin: BEYOND_MAX_RUNS when one needs more than
    equivalence.MAX_RUNS; None when no unresolved figure has a noise measured to tell (not
    "too many": nothing is known of how many)."""
    sd_run = c.whole.sd_log if c.whole is not None else 0.0
    needs = []
    for f in _unresolved(c, keys):
        if f.sd_log is None:
            continue
        n = equivalence.runs_to_show(
            f.sd_log, sd_run, c.policy.margin(f.metric.name), c.policy.tost_alpha,
            run_level=c.whole is not None,
        )  # fmt: skip
        needs.append(BEYOND_MAX_RUNS if n is None else n)
    return max(needs, default=None)


def _not_resolved(c: Comparison) -> str:
    margin = _margin_text(c).removeprefix("within ")
    parts = ["not resolved"]
    missed = missable_pct(c)
    if missed is not None:
        if missed > MDE_SHOWN_UP_TO_PCT:
            parts.append(
                f"even a change of over {MDE_SHOWN_UP_TO_PCT:,.0f} % can go unseen with {_sides(c)}"
            )
        else:
            parts.append(f"changes under {missed:.0f} % can go unseen with {_sides(c)}")
    n = runs_needed(c)
    if missed is not None and n is not None:
        need = f"about {n:,}" if n < BEYOND_MAX_RUNS else f"more than {equivalence.MAX_RUNS:,}"
        parts.append(f"{margin} needs {need} a side")
    text = ": ".join(parts[:2]) + "".join(f"; {p}" for p in parts[2:])
    cells = compared(c)
    eq = sum(x.outcome == "equivalent" for x in cells)
    if eq:
        text += f" ({eq} of {len(cells)} cells equivalent {_margin_text(c)})"
    return text


def _before_figures(c: Comparison) -> list[str]:
    """What comes first: settings, answers, a change of the whole run, the capacity."""
    parts = []
    if not c.settings.comparable:
        names = ",".join(d.name for d in c.settings.blocking)
        parts.append(f"NOT COMPARABLE ({names} differ)")
    if (answered := c.answers.headline()) is not None:
        parts.append(answered)
    if c.answers.refused:
        return parts
    if c.whole is not None and c.whole.changed:
        slower = c.whole.delta_pct > 0
        parts.append(
            f"every cell {'slower' if slower else 'faster'} by "
            f"{abs(c.whole.delta_pct):.1f} % (a change of the whole run)"
        )
    if c.capacity is not None:
        parts.append(capacity_delta.headline(c.capacity))
    return parts


def _cells_part(c: Comparison) -> str:
    cells = compared(c)
    flagged = sum(x.flagged for x in c.cells)
    if c.raw_only:
        return "CANNOT TELL NOISE FROM CHANGE (one trial a side): raw Δ only"
    if flagged:
        text = f"{flagged} of {len(c.cells) - len(c.unmeasured)} cells changed"
        eq = sum(x.outcome == "equivalent" for x in cells)
        if eq:
            text += f", {eq} equivalent {_margin_text(c)}"
        if rest := len(cells) - flagged - eq:
            text += f", {rest} not resolved"
        return text
    if not cells:
        return "no cell compared"
    if all(x.outcome == "equivalent" for x in cells):
        return f"every cell equivalent {_margin_text(c)} ({_sides(c)})"
    return _not_resolved(c)


def verdict(c: Comparison) -> str:
    """The last line, in capitals."""
    parts = _before_figures(c)
    # Answers refused: the figures are not judged. A capacity search has no cells.
    if not c.answers.refused and (c.cells or c.capacity is None):
        parts.append(_cells_part(c))
        if c.cannot_compare:
            parts.append(f"cannot compare {len(c.cannot_compare)} cells")
        if c.unmeasured:
            parts.append(f"not measured by either side: {len(c.unmeasured)}")
    return "; ".join(parts).upper()
