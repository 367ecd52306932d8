"""Reproduce: a run against a published card, cell by cell, with a verdict per cell.

The one implementation of "did this run reproduce the card?" (`bench reproduce`,
`make reproduce-twin`, `bench local`, the orchestrator's verdict all call `reproduce`).

Δ % = (ours − card) / card × 100, ours at server speed (a twin's figures are divided /
multiplied by its speed factor first). The tolerance band is ±5 % for throughput and
±10 % for latencies by default.
  - one trial: a figure passes when its Δ lies inside the band;
  - repeated trials: the 95 % t interval of our mean, as Δ %, decides: inside the band
    = pass, straddling an edge = inconclusive, entirely outside = fail.
Over-capacity sets must match: a cell over capacity on one side only fails. A cell that
is not_ready, invalid, interrupted or failed on our side never passes: it is listed with
its reason and fails the verdict. A cell whose other trials had no figures (invalid,
interrupted) among valid ones is judged on its valid trials, and says how many of how many
("2 of 3 trials valid", `Cell.trials_note`) in its row, in a list above the tables and in
the summary. Cells of the card this run did not measure make the verdict PARTIAL (its own
exit code). Settings that differ from the card's make it NOT COMPARABLE unless accepted by
name.

Answers (bench.answers): a card carries no answer fingerprint, so against a card alone the
verdict records this run's (its prompts and their digest) for a later reproduce to compare.
With reference bundles (`--reference`), the run's answers are judged against theirs exactly
as `bench compare` judges B against A (bench.verdict.answers, the within-side rule among the
reference's runs): a run that answers differently is NOT REPRODUCED whatever its figures,
unless `--accept answers`, which judges the figures anyway and says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from bench import distributions, escape, stats
from bench.errors import Exit
from bench.verdict import answers as answers_mod
from bench.verdict import settings as settings_mod
from bench.verdict.cells import (
    UNMEASURED,
    UNTRUSTED,
    Cell,
    Key,
    MetricSpec,
    RunFigures,
    accepting,
    metrics_of,
)

CellVerdict = Literal[
    "pass",
    "fail",
    "inconclusive",
    "both over capacity",
    "over capacity here only",
    "over capacity on card only",
    "failed here",
    "not ready here",
    "GPU throttled here",
    "invalid here",
    "interrupted here",
    "not measured here",
    "not run on card",
    "not run on either side",
]
PASSING: frozenset[str] = frozenset({"pass"})
# Cells with no figures on either side (over capacity or not run, on the card and here):
# shown, never counted among the compared cells nor as reproduced.
NEITHER: frozenset[str] = frozenset({"both over capacity", "not run on either side"})
NEUTRAL: frozenset[str] = frozenset({"not measured here", "not run on card"}) | NEITHER
NOT_VALID_HERE: frozenset[str] = frozenset(
    {"failed here", "not ready here", "GPU throttled here", "invalid here", "interrupted here"}
)
Overall = Literal["REPRODUCED", "NOT REPRODUCED", "PARTIAL", "INCONCLUSIVE", "NOT COMPARABLE"]


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
    ci_pct: tuple[float, float] | None = None  # 95 % interval of Δ % with ≥ 2 trials

    @property
    def outcome(self) -> Literal["pass", "fail", "inconclusive"] | None:
        if self.delta_pct is None:
            return None
        tol = self.tolerance_pct
        if self.ci_pct is None:
            return "pass" if abs(self.delta_pct) <= tol else "fail"
        low, high = self.ci_pct
        if -tol <= low and high <= tol:
            return "pass"
        if high < -tol or low > tol:
            return "fail"
        return "inconclusive"

    @property
    def ok(self) -> bool | None:
        o = self.outcome
        return None if o is None else o == "pass"


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
    settings: settings_mod.SettingsCheck = field(
        default_factory=lambda: settings_mod.SettingsCheck((), ())
    )
    noise: dict[str, stats.PooledNoise] = field(default_factory=dict)
    # The run's answers against the reference bundles' (None: no reference given).
    answers: answers_mod.AnswersCheck | None = None

    def answers_lines(self) -> list[str]:
        """What the run answered: against the reference, else recorded against the card."""
        if self.answers is not None:
            return [
                "Answers against the reference (A: the reference, B: this run):",
                *self.answers.lines(),
            ]
        own = [f for f in self.ours.fingerprints if f is not None]
        carried = any(f is not None for f in self.card.fingerprints)
        where = (
            "the card's answers are not compared without --reference"
            if carried
            else ("the card carries no answers")
        )
        if not own:
            return [f"Answers: {where}; this run has no fingerprint (--no-fingerprint, or "
                    "made before results schema 3)."]  # fmt: skip
        return [
            f"Answers: {where}; this run's fingerprint: {len(f.answers)} prompts "
            f"({sum(a.status == 'answered' for a in f.answers)} answered), prompt set "
            f"{escape.terminal(f.version)}, hash {f.digest[:16]}"
            + ("" if carried else " (pass --reference BUNDLE to compare a later run's)")
            + "."
            for f in own
        ]

    @property
    def answers_refused(self) -> bool:
        return self.answers is not None and self.answers.refused

    def noise_lines(self) -> list[str]:
        """How the intervals were made: per figure, the pooled run-to-run noise or why not."""
        out = []
        for name, n in self.noise.items():
            how = (
                "pooled over cells (no cell's variance differs by an F-test at 1 %)"
                if n.sound
                else "NOT pooled (cells' variances differ), each cell's own t interval"
            )
            out.append(
                f"- {name}: run-to-run sd {n.sd_log * 100:.2f} % of one trial, "
                f"{n.df} degrees of freedom from {n.cells} cells; {how}"
            )
        return out

    @property
    def judged(self) -> list[CellCheck]:
        return [c for c in self.cells if c.verdict not in NEUTRAL]

    @property
    def failed(self) -> list[CellCheck]:
        return [c for c in self.judged if c.verdict not in PASSING | {"inconclusive"}]

    @property
    def not_valid(self) -> list[CellCheck]:
        return [c for c in self.cells if c.verdict in NOT_VALID_HERE]

    @property
    def fewer_trials(self) -> list[CellCheck]:
        """Cells judged on their valid trials only: some of our trials had no figures."""
        return [
            c
            for c in self.cells
            if c.verdict not in NOT_VALID_HERE
            and (mine := self.ours.cell(c.key)) is not None
            and mine.trials_note is not None
        ]

    def fewer_trials_lines(self) -> list[str]:
        found = self.fewer_trials
        if not found:
            return []
        out = [
            f"Judged on their valid trials only ({len(found)} cells; their other trials had no "
            "figures):"
        ]
        out += [f"- {c.key[0]} {c.key[1]} x {c.key[2]}: {c.verdict} ({c.note})" for c in found]
        return out

    @property
    def inconclusive(self) -> list[CellCheck]:
        return [c for c in self.cells if c.verdict == "inconclusive"]

    @property
    def unmeasured(self) -> list[CellCheck]:
        """Cells neither the card nor this run measured (both over capacity, or not run)."""
        return [c for c in self.cells if c.verdict in NEITHER]

    @property
    def missing(self) -> list[CellCheck]:
        return [c for c in self.cells if c.verdict == "not measured here"]

    @property
    def overall(self) -> Overall:
        if not self.settings.comparable:
            return "NOT COMPARABLE"
        if self.answers_refused or self.failed or not self.judged:
            return "NOT REPRODUCED"
        if self.missing:
            return "PARTIAL"
        if self.inconclusive:
            return "INCONCLUSIVE"
        return "REPRODUCED"

    @property
    def reproduced(self) -> bool:
        return self.overall == "REPRODUCED"

    @property
    def exit_code(self) -> Exit:
        return {
            "REPRODUCED": Exit.OK,
            "NOT REPRODUCED": Exit.NOT_REPRODUCED,
            "PARTIAL": Exit.PARTIAL,
            "INCONCLUSIVE": Exit.INCONCLUSIVE,
            "NOT COMPARABLE": Exit.NOT_COMPARABLE,
        }[self.overall]

    def summary(self) -> str:
        total = sum(1 for c in self.cells if c.key in self.card.cells)
        passed = sum(1 for c in self.judged if c.verdict in PASSING)
        line = (
            f"{self.overall}: {passed} of {len(self.judged)} compared "
            f"cells within ±{self.tolerances.throughput_pct:g} % (throughput) / "
            f"±{self.tolerances.latency_pct:g} % (latency)"
        )
        if self.not_valid:
            line += f"; {len(self.not_valid)} not valid here (not ready, invalid, interrupted)"
        if self.inconclusive:
            line += f"; {len(self.inconclusive)} inconclusive (interval straddles the band)"
        if self.fewer_trials:
            line += f"; {len(self.fewer_trials)} judged on their valid trials only"
        if self.unmeasured:
            line += f"; not measured by either side: {len(self.unmeasured)}"
        if self.missing:
            line += f"; PARTIAL: {len(self.missing)} of the card's {total} cells not measured here"
        if not self.settings.comparable:
            line += "; settings differ: " + ", ".join(d.name for d in self.settings.blocking)
        if self.answers_refused:
            line += (
                "; this run answers differently from the reference: its speed is not "
                "comparable (--accept answers judges the figures anyway)"
            )
        elif self.answers is not None and self.answers.different:
            line += "; this run answers differently from the reference (accepted)"
        return line


def delta_pct(ours: float | None, reference: float | None) -> float | None:
    if ours is None or reference is None or reference == 0:
        return None
    return (ours - reference) / reference * 100.0


def _interval(
    values: tuple[float, ...], reference: float | None, pooled: stats.PooledNoise | None
) -> tuple[float, float] | None:
    """95 % interval of our mean as Δ % against the card: on log values with the noise
    pooled over cells when that is sound (more degrees of freedom; the cell's own variance
    shrunk towards the pooled one, as in compare), else this cell's own t interval."""
    if len(values) < 2 or reference is None or reference <= 0 or min(values) <= 0:
        return None
    if pooled is not None and pooled.sound and pooled.df > len(values) - 1:
        logs = [math.log(v) for v in values]
        m = stats.mean(logs)
        own = math.fsum((x - m) ** 2 for x in logs)
        sd, df = pooled.moderated(own, len(values) - 1)  # this cell's noise, shrunk
        half = distributions.t_quantile(0.975, df) * sd / math.sqrt(len(values))
        ref = math.log(reference)
        return stats.pct_of_log(m - half - ref), stats.pct_of_log(m + half - ref)
    ci = stats.mean_ci(values)
    if not (math.isfinite(ci.low) and math.isfinite(ci.high)):
        return None
    return ((ci.low / reference - 1) * 100.0, (ci.high / reference - 1) * 100.0)


def pooled_noise(runs: Sequence[RunFigures]) -> dict[str, stats.PooledNoise]:
    """Per figure, one trial's relative noise pooled over the valid cells of all runs
    (compare pools both sides; reproduce, its one run)."""
    out: dict[str, stats.PooledNoise] = {}
    for phase in ("prefill", "decode"):
        for metric in metrics_of(phase):
            groups = [
                c.trials.get(metric.name, ())
                for run in runs
                for c in run.cells.values()
                if c.status == "valid" and c.phase == phase
            ]
            found = stats.pooled_noise(groups)
            if found is not None:
                out[metric.name] = found
    return out


def pooled_by_metric(run: RunFigures) -> dict[str, stats.PooledNoise]:
    """Per figure, the run-to-run noise of one trial pooled over the run's valid cells."""
    return pooled_noise([run])


def _figures(
    ours: Cell | None, card: Cell, tol: Tolerances, noise: dict[str, stats.PooledNoise]
) -> tuple[FigureCheck, ...]:
    out = []
    for metric in metrics_of(card.phase):
        mine = ours.value(metric.name) if ours else None
        theirs = card.value(metric.name)
        if theirs is None and mine is None:
            continue
        pooled = noise.get(metric.name)
        ci = _interval(ours.trials.get(metric.name, ()), theirs, pooled) if ours else None
        out.append(FigureCheck(metric, mine, theirs, delta_pct(mine, theirs), tol.of(metric), ci))
    return tuple(out)


def _verdict(ours: Cell | None, card: Cell, checks: tuple[FigureCheck, ...]) -> CellVerdict:
    status = _status_verdict(ours, card)
    if status is not None:
        return status
    compared = [c for c in checks if c.card is not None]
    outcomes = {c.outcome for c in compared}
    if not compared or "fail" in outcomes or None in outcomes:
        return "fail"
    return "inconclusive" if "inconclusive" in outcomes else "pass"


# Our cell's status when it has no trustworthy numbers.
_HERE: dict[str, CellVerdict] = {
    "not_ready": "not ready here",
    "gpu_throttled": "GPU throttled here",
    "invalid": "invalid here",
    "interrupted": "interrupted here",
}


def _status_verdict(ours: Cell | None, card: Cell) -> CellVerdict | None:
    """What the two statuses alone decide; None when both are valid (the figures decide)."""
    if ours is None:
        return "not measured here"
    if ours.status in UNTRUSTED:
        return _HERE.get(ours.status, "failed here")
    if card.status in UNMEASURED and ours.status in UNMEASURED:
        both = card.status == ours.status == "over_capacity"
        return "both over capacity" if both else "not run on either side"
    return _one_side_verdict(ours.status, card.status)


def _one_side_verdict(ours: str, card: str) -> CellVerdict | None:
    """The status rules left once ours is trusted and not both sides are unmeasured."""
    if card == "over_capacity":
        return "over capacity on card only"
    if ours == "over_capacity":
        return "over capacity here only"
    if card != "valid":
        return "not run on card"
    return None if ours == "valid" else "failed here"


def reproduce(
    ours: RunFigures,
    card: RunFigures,
    tolerances: Tolerances,
    accept: frozenset[str] = frozenset(),
    reference: RunFigures | None = None,
) -> Reproduction:
    """OURS against CARD; with REFERENCE (one or more bundles merged), OURS's answers are
    judged against the reference's too (module docstring)."""
    ours = accepting(ours, accept)
    checks = []
    noise = pooled_by_metric(ours)
    for key, published in card.cells.items():
        mine = ours.cell(key)
        figures = _figures(mine, published, tolerances, noise)
        verdict = _verdict(mine, published, figures)
        note = (
            mine.detail
            if mine and (verdict in NOT_VALID_HERE or verdict == "over capacity here only")
            else (mine.trials_note if mine else None)  # judged on its valid trials only
        )
        checks.append(CellCheck(key, verdict, figures, note))
    order = {c: i for i, c in enumerate(card.contexts)}
    checks.sort(key=lambda c: (c.key[0] != "prefill", order.get(c.key[1], 0), c.key[2]))
    skip = settings_mod.TWIN_SIMULATED if ours.twin else frozenset()
    settings = settings_mod.check(ours.settings, card.settings, accept, skip=skip)
    answers = None
    if reference is not None:
        answers = answers_mod.check(
            reference.fingerprints, ours.fingerprints, accepted=settings_mod.ANSWERS in accept
        )
    return Reproduction(ours, card, tolerances, tuple(checks), settings, noise, answers)
