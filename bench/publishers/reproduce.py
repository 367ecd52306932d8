"""Our measured requests judged against a publisher's card, with the publisher's definitions.

Pure: no I/O, no clock. `judge(card, trials, tolerance_pct=...)` takes one card (one published
point) and one or more trials (separate runs of that point, each its request records, its
duration and its GPU count) and says, figure by figure, whether we reproduced it.

The rules.
  Figures. Each published figure with a `computed_as` is computed per trial by
  `bench.publishers.metrics.compute`, the publisher's own definition. Ours is the mean over
  trials; with two trials or more, a 95 % t-interval of that mean (t quantile:
  `bench.distributions.t_quantile`). The band is published x (1 +/- tolerance), both sides
  (a figure faster or slower than published is alike off). REPRODUCED: our value (one trial)
  or our whole interval (2+ trials) inside the band, edges included; NOT REPRODUCED: wholly
  outside it; NOT RESOLVED: the interval crosses an edge of the band. A figure without
  `computed_as`, or one that a trial cannot compute (`compute` gives None), is NOT CHECKED,
  with why, and counts towards no verdict.
  Tail percentiles. A p99 of vLLM's or InferenceX's latencies (`TAIL_KEYS`) is one draw
  of a run's slowest requests (the 2nd slowest of 200): with no published spread a band
  around it is a band around one draw, so it is shown and NOT CHECKED unless
  `all_figures`. MLPerf's p99s are its result's own figures, over a run of at least its
  minimum duration, and are judged.
  Constraints (MLPerf). In every trial each constraint is judged by LoadGen's early stopping
  (`bench.workload.slo.verdict`): n = completed requests, over = those whose TTFT / TPOT
  (`metrics.mlperf_ttfts_ms` / `mlperf_tpots_ms`) exceeds the limit, p = the constraint's
  percentile / 100, c = its confidence (slo's default when the card gives none). Missed in
  any trial: NOT REPRODUCED; else undecided in any: NOT RESOLVED, with `more_needed`; else
  REPRODUCED. A trial LoadGen would refuse (a completed request without a first token, or
  of fewer than two tokens for TPOT) is an invalid run: NOT REPRODUCED. When the card sets
  `workload.min_duration_s`, every trial must last at least that long; a shorter one leaves
  the point NOT RESOLVED (run it longer).
  Trials. A trial our client did not keep to the card's schedule (`left_out`, said by the
  caller: bench.publishers.run_trials.NOT_MEASURED) is not judged; with none left the
  point is NOT RESOLVED, nothing judged.
  Overall. NOT REPRODUCED if any figure or constraint is; else NOT RESOLVED if any is; else
  REPRODUCED, provided at least one figure or constraint was checked (none: NOT RESOLVED).
  A publisher that gives one sample a point gives no spread: the interval is ours alone, and
  the result says so. Accuracy is never claimed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from bench.distributions import t_quantile
from bench.errors import Exit
from bench.publishers import metrics
from bench.publishers.metrics import TimedRequest
from bench.publishers.model import (
    ComputedAs,
    PublishedConstraint,
    PublishedFigure,
    PublisherCard,
)
from bench.workload import slo

Outcome = Literal["REPRODUCED", "NOT REPRODUCED", "NOT RESOLVED"]
RowOutcome = Literal["REPRODUCED", "NOT REPRODUCED", "NOT RESOLVED", "NOT CHECKED"]
CONFIDENCE_LEVEL = 0.95  # of our interval of the mean over trials
# Shown, not judged, unless all_figures (module docstring).
TAIL_KEYS = frozenset(
    k for k in get_args(ComputedAs) if "_p99_" in k and not k.startswith("mlperf_")
)

_EXIT: dict[Outcome, Exit] = {
    "REPRODUCED": Exit.OK,
    "NOT REPRODUCED": Exit.NOT_REPRODUCED,
    "NOT RESOLVED": Exit.INCONCLUSIVE,
}


@dataclass(frozen=True, slots=True)
class Trial:
    """One run of the card's point: its request records, the benchmark duration in seconds
    (what `metrics.compute` divides by) and the GPU count the per-GPU figures are over."""

    records: tuple[TimedRequest, ...]
    duration_s: float
    gpus: int | None

    def __post_init__(self) -> None:
        object.__setattr__(self, "records", tuple(self.records))
        for r in self.records:
            if not isinstance(r, TimedRequest):
                raise ValueError(f"trial: {type(r).__name__} is not a TimedRequest")
        d = self.duration_s
        if isinstance(d, bool) or not isinstance(d, int | float) or not math.isfinite(d) or d <= 0:
            raise ValueError(f"trial: duration {d!r} s is not a finite number > 0")
        g = self.gpus
        if g is not None and (isinstance(g, bool) or not isinstance(g, int) or g < 1):
            raise ValueError(f"trial: GPU count {g!r} is not an integer >= 1")


@dataclass(frozen=True, slots=True)
class FigureRow:
    """One published figure against ours. The band and `interval` are None when the figure
    was not checked (`note` says why), and so is `ours` unless it was computed but not
    judged (a tail percentile); `interval` is None with one trial."""

    name: str
    unit: str
    published: float
    ours: float | None
    interval: tuple[float, float] | None
    band_low: float | None
    band_high: float | None
    outcome: RowOutcome
    note: str


@dataclass(frozen=True, slots=True)
class ConstraintTrial:
    """One constraint judged on one trial by LoadGen's early stopping (None: not judged,
    LoadGen would refuse the trial)."""

    n: int
    over: int | None
    verdict: str | None
    more_needed: int | None


@dataclass(frozen=True, slots=True)
class ConstraintRow:
    """A validity rule of the card (an MLPerf p99 bound, or the minimum duration) over every
    trial."""

    name: str
    outcome: Outcome
    note: str
    trials: tuple[ConstraintTrial, ...]
    more_needed: int | None  # the most further requests any undecided trial needs


@dataclass(frozen=True, slots=True)
class PublisherReproduction:
    card: PublisherCard
    tolerance_pct: float
    trials: int
    figures: tuple[FigureRow, ...]
    constraints: tuple[ConstraintRow, ...]
    outcome: Outcome
    reason: str  # why, in one line
    remarks: tuple[str, ...]  # one sample published, accuracy not claimed, ...

    @property
    def checked_figures(self) -> tuple[FigureRow, ...]:
        return tuple(r for r in self.figures if r.outcome != "NOT CHECKED")

    def headline(self) -> str:
        parts = [_plural(len(self.checked_figures), "figure")]
        if self.constraints:
            parts.append(_plural(len(self.constraints), "constraint"))
        parts.append(_plural(self.trials, "trial"))
        return f"{self.outcome} within ±{self.tolerance_pct:g} % ({', '.join(parts)})"

    def lines(self) -> list[str]:
        out = [self.headline(), f"  {self.reason}"]
        out.append(f"card: {self.card.publisher} {self.card.point_id} ({self.card.source})")
        head = ("figure", "unit", "published", "ours", "95 % interval", "band", "outcome")
        table: list[tuple[str, ...]] = [head]
        for r in self.figures:
            table.append(
                (
                    r.name,
                    r.unit,
                    _num(r.published),
                    "-" if r.ours is None else _num(r.ours),
                    "-" if r.interval is None else f"{_num(r.interval[0])}..{_num(r.interval[1])}",
                    "-"
                    if r.band_low is None or r.band_high is None
                    else f"{_num(r.band_low)}..{_num(r.band_high)}",
                    r.outcome,
                )
            )
        widths = [max(len(row[i]) for row in table) for i in range(len(head))]
        for row in table:
            out.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
        for r in self.figures:
            if r.note:
                out.append(f"  {r.name}: {r.note}")
        for c in self.constraints:
            out.append(f"constraint {c.name}: {c.outcome}: {c.note}")
        out.extend(self.remarks)
        return out

    def exit_code(self) -> Exit:
        return _EXIT[self.outcome]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _num(v: float) -> str:
    return f"{v:.6g}"


def _check_tolerance(tolerance_pct: float) -> float:
    t = tolerance_pct
    if isinstance(t, bool) or not isinstance(t, int | float):
        raise ValueError(f"tolerance {t!r} is not a number")
    if not (math.isfinite(t) and 0.0 < t < 100.0):
        raise ValueError(f"tolerance {t!r} % is not a finite number between 0 and 100")
    return float(t)


def mean_interval(values: Sequence[float]) -> tuple[float, tuple[float, float] | None]:
    """The mean of VALUES and, with two or more, its 95 % t-interval (None with one)."""
    k = len(values)
    if k == 0:
        raise ValueError("mean of no values")
    mean = math.fsum(v / k for v in values)
    if k == 1:
        return mean, None
    var = math.fsum((v - mean) ** 2 for v in values) / (k - 1)
    half = t_quantile(1.0 - (1.0 - CONFIDENCE_LEVEL) / 2.0, k - 1) * math.sqrt(var / k)
    return mean, (mean - half, mean + half)


def _not_computed_why(figure: PublishedFigure, trial: Trial, index: int, k: int) -> str:
    where = f"trial {index} of {k}" if k > 1 else "our trial"
    key = figure.computed_as or ""
    if not trial.records:
        why = "it has no request records"
    elif "per_gpu" in key and trial.gpus is None:
        why = "it has no GPU count for a per-GPU figure"
    elif not any(r.ok for r in trial.records):
        why = "it has no successful request"
    else:
        why = (
            "it has none of the requests the publisher's definition needs "
            "(a token, two tokens for TPOT, a chunk gap for ITL) or the value overflows"
        )
    return f"{key} cannot be computed from {where}: {why}"


def _figure_row(
    figure: PublishedFigure, trials: Sequence[Trial], tol: float, all_figures: bool
) -> FigureRow:
    def unchecked(note: str, ours: float | None = None) -> FigureRow:
        return FigureRow(
            figure.name, figure.unit, figure.value, ours, None, None, None, "NOT CHECKED", note
        )

    key = figure.computed_as
    if key is None:
        return unchecked("no computed_as: we have no way to compute the publisher's figure")
    values: list[float] = []
    for i, trial in enumerate(trials, 1):
        v = metrics.compute(key, trial.records, duration_s=trial.duration_s, gpus=trial.gpus)
        if v is None:
            return unchecked(_not_computed_why(figure, trial, i, len(trials)))
        values.append(v)
    ours, interval = mean_interval(values)
    if not math.isfinite(ours) or (interval is not None and not all(map(math.isfinite, interval))):
        return unchecked(f"{key}: our values over the trials overflow a float")
    if key in TAIL_KEYS and not all_figures:
        off = 100.0 * (ours - figure.value) / figure.value if figure.value else None
        off_text = "" if off is None else f"ours {off:+.2f} % off published; "
        return unchecked(
            f"{off_text}shown, not judged: a tail percentile of one published run, "
            "a band around one draw of its slowest requests (--all-figures judges it)",
            ours,
        )
    low = figure.value * (1.0 - tol / 100.0)
    high = figure.value * (1.0 + tol / 100.0)
    lo, hi = interval if interval is not None else (ours, ours)
    off = 100.0 * (ours - figure.value) / figure.value if figure.value else None
    off_text = "" if off is None else f"ours {off:+.2f} % off published; "
    if low <= lo and hi <= high:
        outcome: RowOutcome = "REPRODUCED"
        what = "inside the band"
    elif hi < low or lo > high:
        outcome = "NOT REPRODUCED"
        what = "wholly outside the band"
    else:
        outcome = "NOT RESOLVED"
        what = "crosses an edge of the band: more trials may tell"
    note = f"{off_text}{'value' if interval is None else 'interval'} {what} (computed as {key})"
    return FigureRow(
        figure.name, figure.unit, figure.value, ours, interval, low, high, outcome, note
    )


def _per_request_ms(figure: Literal["ttft", "tpot"], trial: Trial) -> list[float] | None:
    if figure == "ttft":
        return metrics.mlperf_ttfts_ms(trial.records)
    return metrics.mlperf_tpots_ms(trial.records)


def _constraint_row(c: PublishedConstraint, trials: Sequence[Trial]) -> ConstraintRow:
    p = c.percentile / 100.0
    conf = slo.CONFIDENCE if c.confidence is None else c.confidence
    name = f"p{c.percentile:g} {c.figure.upper()} <= {c.limit_ms:g} ms"
    judged: list[ConstraintTrial] = []
    notes: list[str] = []
    invalid = False
    for i, trial in enumerate(trials, 1):
        values = _per_request_ms(c.figure, trial)
        completed = sum(r.ok for r in trial.records)
        if values is None:
            invalid = True
            judged.append(ConstraintTrial(completed, None, None, None))
            need = "a first token" if c.figure == "ttft" else "a first token and two tokens"
            notes.append(
                f"trial {i}: a completed request lacks {need}; LoadGen would refuse the run"
            )
            continue
        n = len(values)
        over = sum(v > c.limit_ms for v in values)
        v = slo.verdict(n, over, p, conf)
        more = slo.more_needed(n, over, p, conf)
        judged.append(ConstraintTrial(n, over, v, more))
        notes.append(f"trial {i}: {over} of {n} over, {v}{_more_text(v, more)}")
    verdicts = [t.verdict for t in judged]
    undecided = [t for t in judged if t.verdict == "undecided"]
    most: int | None = None
    if undecided:
        needs = [t.more_needed for t in undecided]
        most = None if None in needs else max(n for n in needs if n is not None)
    if invalid or "missed" in verdicts:
        outcome: Outcome = "NOT REPRODUCED"
    elif undecided:
        outcome = "NOT RESOLVED"
    else:
        outcome = "REPRODUCED"
    rule = f"early stopping at {conf:g} confidence"
    return ConstraintRow(name, outcome, f"{rule}; " + "; ".join(notes), tuple(judged), most)


def _more_text(verdict: str, more: int | None) -> str:
    if verdict == "met":
        return ""
    count = f"more than {slo.MAX_MORE}" if more is None else str(more)
    return f" ({count} more requests, all under the limit, would make it met)"


def _duration_row(min_s: float, trials: Sequence[Trial]) -> ConstraintRow:
    short = [(i, t.duration_s) for i, t in enumerate(trials, 1) if t.duration_s < min_s]
    name = f"duration >= {min_s:g} s"
    if not short:
        return ConstraintRow(name, "REPRODUCED", "every trial lasted long enough", (), None)
    said = ", ".join(f"trial {i} lasted {d:g} s" for i, d in short)
    return ConstraintRow(
        name, "NOT RESOLVED", f"{said}: shorter than the card's minimum, run it longer", (), None
    )


def _remarks(card: PublisherCard, k: int) -> tuple[str, ...]:
    out: list[str] = []
    if card.samples_published == 1:
        out.append(
            "The publisher gives one sample of this point: no spread is published, so the "
            "interval is ours alone (the spread of our trials), not the publisher's."
        )
    else:
        out.append(
            f"The publisher gives {card.samples_published} samples of this point but no "
            "spread: the interval is ours alone."
        )
    if k == 1:
        out.append("One trial: no interval; our single value is judged (run 2+ trials).")
    if card.constraints:
        out.append(
            "Accuracy is not claimed: only the performance figures and constraints are "
            "judged, not the publisher's accuracy run."
        )
    out.extend(f"Not reproduced: {why}" for why in card.not_reproducible)
    return tuple(out)


def judge(
    card: PublisherCard,
    trials: Sequence[Trial],
    *,
    tolerance_pct: float,
    all_figures: bool = False,
    left_out: Sequence[str] = (),
) -> PublisherReproduction:
    """CARD's figures and constraints against our TRIALS (module docstring); `all_figures`
    judges the tail percentiles too; `left_out` says, one line each, the run's trials that
    were no measurement of the point (our client fell behind: not judged). ValueError, one
    line, for a tolerance that is not a finite number in (0, 100) or no trials at all."""
    tol = _check_tolerance(tolerance_pct)
    if not trials and left_out:
        return _unmeasured(card, tol, left_out)
    if not trials:
        raise ValueError("reproduce needs at least one trial")
    for t in trials:
        if not isinstance(t, Trial):
            raise ValueError(f"{type(t).__name__} is not a Trial")
    k = len(trials)
    figures = tuple(_figure_row(f, trials, tol, all_figures) for f in card.figures)
    constraints = [_constraint_row(c, trials) for c in card.constraints]
    if card.workload.min_duration_s is not None:
        constraints.append(_duration_row(card.workload.min_duration_s, trials))
    judged: list[tuple[str, Outcome]] = [
        (f"figure {r.name}", r.outcome) for r in figures if r.outcome != "NOT CHECKED"
    ]
    judged += [(f"constraint {c.name}", c.outcome) for c in constraints]
    outcome, reason = _overall(judged)
    remarks = (*(f"Left out, not judged: {why}" for why in left_out), *_remarks(card, k))
    return PublisherReproduction(
        card, tol, k, figures, tuple(constraints), outcome, reason, remarks
    )


def _unmeasured(card: PublisherCard, tol: float, left_out: Sequence[str]) -> PublisherReproduction:
    """No trial measured the card's point (each left out, said): NOT RESOLVED, nothing judged."""
    note = "no trial measured the card's point: not judged"
    figures = tuple(
        FigureRow(f.name, f.unit, f.value, None, None, None, None, "NOT CHECKED", note)
        for f in card.figures
    )
    reason = (
        f"NOT RESOLVED: none of the run's {len(left_out)} trial(s) measured the card's point "
        "(our client fell behind its schedule, or the run stopped): run it again on a machine "
        "that keeps up"
    )
    remarks = tuple(f"Left out, not judged: {why}" for why in left_out)
    return PublisherReproduction(card, tol, 0, figures, (), "NOT RESOLVED", reason, remarks)


def _overall(judged: Sequence[tuple[str, Outcome]]) -> tuple[Outcome, str]:
    if not judged:
        return "NOT RESOLVED", "nothing checked: no figure could be computed from our records"
    worst: tuple[Outcome, ...] = ("NOT REPRODUCED", "NOT RESOLVED")
    for verdict in worst:
        names = [n for n, o in judged if o == verdict]
        if names:
            return verdict, f"{verdict}: {', '.join(names)}"
    return "REPRODUCED", "every figure and constraint checked is reproduced"
