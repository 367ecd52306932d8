"""A sequential compare: trials go to the cells whose answer is still open.

The fixed design measures every cell 3 times a side. The sequential one measures every
cell in a first stage (2 + 1 runs, say), then after each stage settles the cells already
shown to have changed by less than the fixed design's minimum detectable effect (MDE) for
them, and gives the next stage's trials to the others only, up to the last stage's runs a
side. The stages are chosen with the cost of a server start in view (`stage_plan`: the
least expected server time, starts included, that keeps the design's error rates), from
stated costs before the first stage and from the costs the runs recorded after it:

- settled: for every figure of the cell, |Δ| < the MDE the fixed design (3 + 3 trials,
  80 % power at the Benjamini-Hochberg level of one change among all tests) has for that
  figure with the noise measured so far, by Schuirmann's two one-sided tests at 10 % each
  (the 80 % interval of Δ, from the cell's own moderated noise, lies inside ± that MDE).
  Settling is a stopping rule, not a verdict: its only error is to stop a changed cell
  early, which costs power, and `make verdict-power` measures the power that is left;
- a cell that is not valid on both sides is not re-measured (it is listed, never settled);
- the verdict is decided once, at the end, by `compare` on all trials taken (one BH over
  all cells and figures), so the interim looks add no false alarms;
- answers come first: after a stage where B answers differently (beyond each side's own
  differences, `bench.verdict.answers`) and that is not accepted, no more runs are spent:
  its figures would not be judged.

Aimed at a decision (`goal="decide"`, `--order decide`), the looks are DECIDE_STAGES and a
cell stops being measured once it is decided, in one of the three outcomes of a compare
(`bench.verdict.equivalence`):

- EQUIVALENT within its margin by the compare's own two one-sided tests, at the look's
  level (`look_alpha`): half of alpha for the last look, the other half shared by the
  looks before it (Bonferroni over the looks: a claim of equivalence holds at alpha
  however many looks were taken, and the last look, where most cells of a noisy server
  are decided, keeps the larger share);
- CHANGED with a figure's own p at most EARLY_CHANGE_P (0.001), or the whole run's
  (Haybittle and Peto's boundary: so strict that the looks before the last add almost
  nothing to the final test's false alarms, which stays at alpha's level);
- the budget: the last look's runs a side. After a look at which no open cell is flagged
  and the open cells need more than FUTILE_FACTOR times the budget to show their margin
  (`headline.runs_needed`, 80 % power), the compare stops there, NOT RESOLVED, and says
  what it would take. The factor: that estimate, from 2 or 3 runs a side, scatters widely
  (on the twin's default noise, stopping at the budget itself ended half of the compares
  of nothing changed NOT RESOLVED that 3 + 3 runs resolve); a server whose runs differ by
  tens of percent needs hundreds.

Every trial is its own run (one server start, one signed bundle): trials inside one server
start share that start's noise and are not independent. Within a stage the sides alternate
(A B A, B, A B, A B B A ...) so that drift over hours falls on both. `make verdict-power`
measures this scheduler's false alarms, power and server time against the fixed design.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from bench import distributions, stats
from bench.verdict import equivalence, headline, stage_plan
from bench.verdict.cells import Key, RunFigures
from bench.verdict.compare import POWER, CellDelta, Comparison, FigureDelta, Policy, compare
from bench.verdict.run_source import merge_runs

Side = Literal["a", "b"]
Goal = Literal["settle", "decide"]
# The looks of a compare aimed at a decision (cumulative runs a side); the last is the budget.
# They start at 2 + 2: the run-level model (`runlevel`), without which a cell's noise is
# estimated from runs that share their levels, needs 2 runs a side.
DECIDE_STAGES: tuple[tuple[int, int], ...] = ((2, 2), (3, 3), (5, 5))
# With the noise measured before the compare (`Policy.noise_prior`), the first look is at
# 1 + 1: the prior stands in for the noise 1 run a side cannot measure.
PRIOR_STAGES: tuple[tuple[int, int], ...] = ((1, 1), *DECIDE_STAGES)
EARLY_CHANGE_P = 0.001
FUTILE_FACTOR = 4


def look_alpha(alpha: float, look: int, looks: int) -> float:
    """Each one-sided test of equivalence at look LOOK (from 1) of LOOKS: alpha / 2 at the
    last, alpha / 2 shared evenly by the others (alpha itself when there is one look)."""
    if looks == 1:
        return alpha
    return alpha / 2.0 if look == looks else alpha / 2.0 / (looks - 1)


# The stages before they were chosen with the costs in view (`stage_plan`); still a fixed
# plan one can pass as `stages`.
STAGES: tuple[tuple[int, int], ...] = ((2, 1), (2, 2), (3, 3), (5, 5))
FIXED_TRIALS = stage_plan.FIXED_TRIALS  # the design whose MDE a settled cell is held to
EQUIVALENCE_ALPHA = stage_plan.EQUIVALENCE_ALPHA  # each one-sided test of TOST (see above)

# measure(side, trial number of that side from 1, cells to measure or None for all) -> one run
Measure = Callable[[Side, int, frozenset[Key] | None], RunFigures]


@dataclass(frozen=True)
class TrialRun:
    """One run of one side (its trial number) and the cells it measured, in the order run."""

    side: Side
    trial: int
    cells: frozenset[Key] | None  # None: the whole matrix


@dataclass(frozen=True)
class SequentialOutcome:
    comparison: Comparison
    trials: tuple[TrialRun, ...]  # in the order they ran
    stages: int  # stages run
    measurements: dict[Key, int]  # cell measurements taken, both sides
    plan: tuple[tuple[int, int], ...] = STAGES  # the stages, as last planned
    chosen: stage_plan.StagePlan | None = None  # how they were chosen (None: given)
    # B answered differently after a stage: its figures are not judged, so no more runs.
    stopped_on_answers: bool = False
    goal: Goal = "settle"
    # goal "decide": the look (from 1) at which each decided cell stopped, and its outcome
    closed: dict[Key, tuple[int, str]] = field(default_factory=dict)
    # goal "decide": stopped before the last look, the budget out of reach: the runs a side
    # the open cells would need (0: more than equivalence.MAX_RUNS); None: not stopped so
    budget_need: int | None = None

    def _decide_lines(self) -> list[str]:
        looks = len(self.plan)
        alpha = self.comparison.policy.alpha
        levels = [look_alpha(alpha, k, looks) for k in range(1, looks + 1)]
        changed = sum(1 for _, how in self.closed.values() if how == "changed")
        equivalent = len(self.closed) - changed
        open_n = len(comparable(self.comparison)) - len(self.closed)
        out = [
            f"Aimed at a decision: looks at {', '.join(f'{a}+{b}' for a, b in self.plan)} runs; "
            f"a cell stops when equivalent within its margin (each one-sided test at "
            f"{', '.join(f'{x:.3g}' for x in levels)} by look, {alpha:g} in all) or changed "
            f"at p <= {EARLY_CHANGE_P:g}; {equivalent} cell(s) stopped equivalent, {changed} "
            f"changed, {open_n} still open."
        ]
        if self.budget_need is not None:
            need = (
                f"about {self.budget_need:,}"
                if self.budget_need
                else f"more than {equivalence.MAX_RUNS:,}"
            )
            out.append(
                f"Stopped after look {self.stages}: the open cells need {need} runs a side to "
                f"show their margin, more than {FUTILE_FACTOR} times the budget of "
                f"{max(self.plan[-1])}; more runs of this design would not decide them."
            )
        return out

    def lines(self) -> list[str]:
        per_side = {s: sum(1 for w in self.trials if w.side == s) for s in ("a", "b")}
        order = " ".join(
            w.side.upper() + ("" if w.cells is None else f"[{len(w.cells)}]") for w in self.trials
        )
        why = [] if self.chosen is None else self.chosen.lines()
        if self.goal == "decide":
            why = self._decide_lines()
        return [
            *why,
            f"Sequential design, stages {', '.join(f'{a}+{b}' for a, b in self.plan)}: "
            f"{self.stages} stage(s) run, {per_side['a']} runs of A, {per_side['b']} of B "
            f"({order}; [n] = the open cells only), {sum(self.measurements.values())} cell "
            f"measurements (the fixed design: {2 * FIXED_TRIALS * len(self.measurements)}).",
            *(
                [
                    f"Stopped after stage {self.stages}: B answers differently, so its speed "
                    "is not judged and no more runs were spent on it (--accept answers "
                    "measures on)."
                ]
                if self.stopped_on_answers
                else []
            ),
        ]


def run_args(cells: frozenset[Key] | None) -> tuple[str, ...]:
    """`bench run` arguments that measure exactly these cells (after the sweep's own: the
    last occurrence of a flag wins): the open decode cells by label, and the rows whose
    prefill is open but none of whose decode cells are, as prefill-only rows; a workload
    run's open points by label (`--points`)."""
    if cells is None:
        return ()
    points = sorted(k for k in cells if k[0] == "workload")
    if points:  # a workload run's points, by label (`Arrivals.labels`)
        return ("--points", *(f"closed:{c}" if name == "closed" else name for _, name, c in points))
    decode = sorted((k for k in cells if k[0] == "decode"), key=lambda k: (k[1], k[2]))
    rows = {k[1] for k in decode}
    prefill = sorted(k[1] for k in cells if k[0] == "prefill" and k[1] not in rows)
    out = ["--prefill-only-contexts", *prefill]
    if decode:
        out += ["--cells", *(f"{k[1]}:{k[2]}" for k in decode)]
    else:
        out.append("--contexts")  # no decode row at all
    return tuple(out)


def fixed_mde_pct(f: FigureDelta, comparison: Comparison, policy: Policy) -> float | None:
    """The MDE of the fixed design for this figure: from the figure's noise pooled over all
    cells when pooling is sound (else this cell's), with normal quantiles. It is the
    design's margin, the same for every cell of a figure; how well this cell's own noise
    is known yet is what the equivalence test pays for."""
    pooled = comparison.noise.get(f.metric.name)
    sd = pooled.sd_log if pooled is not None and pooled.sound else f.sd_log
    if sd is None:
        return None
    level = comparison.level_for_one
    return stats.mde_pct(sd, FIXED_TRIALS, FIXED_TRIALS, alpha=level, power=POWER)


def equivalent(f: FigureDelta, cell: CellDelta, margin_pct: float) -> bool:
    """Schuirmann's TOST at EQUIVALENCE_ALPHA: is |Δ| < margin_pct with that confidence?
    The band is symmetric on the log scale, ±log(1 + m), unlike `equivalence.tost`'s
    (log(1 - m), log(1 + m)): m here is an MDE, a log-scale distance that may pass 100 %."""
    if f.delta_pct is None or f.sd_log is None or f.df is None or cell.a is None or cell.b is None:
        return False
    n_a = len(cell.a.trials.get(f.metric.name, ()))
    n_b = len(cell.b.trials.get(f.metric.name, ()))
    if n_a == 0 or n_b == 0:
        return False
    se = f.sd_log * math.sqrt(1.0 / n_a + 1.0 / n_b)
    p = 1.0 - EQUIVALENCE_ALPHA
    q = distributions.norm_ppf(p) if math.isinf(f.df) else distributions.t_quantile(p, f.df)
    return abs(math.log1p(f.delta_pct / 100.0)) + q * se < math.log1p(margin_pct / 100.0)


def settled(comparison: Comparison, policy: Policy) -> set[Key]:
    """Cells whose every figure is shown to have changed by less than its fixed-design MDE."""
    out = set()
    for cell in comparison.cells:
        if cell.mark == "cannot compare" or not cell.figures:
            continue
        margins = [fixed_mde_pct(f, comparison, policy) for f in cell.figures]
        if all(
            m is not None and equivalent(f, cell, m)
            for f, m in zip(cell.figures, margins, strict=True)
        ):
            out.add(cell.key)
    return out


def decided(comparison: Comparison) -> dict[Key, str]:
    """The cells a compare aimed at a decision stops measuring (see the module's text):
    "equivalent" by the compare's own tests (at its equivalence alpha, the look's), or
    "changed" at p <= EARLY_CHANGE_P, the whole run's or a changed figure's own."""
    whole = comparison.whole
    # A look whose run level is the history's (1 run a side) closes no cell on a change
    # everywhere: a host whose run level varies more today than it did would read as one.
    # Those cells are measured again, and their runs' own levels judge them. A cell's own
    # change (against the other cells of its run) does not involve the run level.
    everywhere = (
        whole is not None
        and not whole.from_prior
        and whole.changed
        and whole.p_value <= EARLY_CHANGE_P
    )
    out: dict[Key, str] = {}
    for cell in comparison.cells:
        if cell.outcome is None:
            continue
        if everywhere or any(
            f.outcome == "changed" and f.p_value is not None and f.p_value <= EARLY_CHANGE_P
            for f in cell.figures
        ):
            out[cell.key] = "changed"
        elif cell.outcome == "equivalent":
            out[cell.key] = "equivalent"
    return out


def as_stopped(comparison: Comparison, stopped: dict[Key, CellDelta]) -> Comparison:
    """COMPARISON with each cell that stopped as EQUIVALENT at an earlier look shown as it
    was judged there, unless the last look found it changed. Its runs are the same; what
    moves at later looks is the noise pooled over the cells still open, which were left
    open for looking noisier (and their runs of a few cells, which keep their run's noise).
    Its claim holds at alpha: each look's test at its share (`look_alpha`)."""
    if not stopped:
        return comparison
    cells = tuple(
        stopped[c.key] if c.key in stopped and c.outcome != "changed" else c
        for c in comparison.cells
    )
    return replace(comparison, cells=cells)


def beyond_budget(comparison: Comparison, open_cells: frozenset[Key], budget: int) -> int | None:
    """None while some open cell could still be decided near BUDGET runs a side (it is
    flagged, or it needs at most FUTILE_FACTOR x BUDGET to show its margin); else the runs
    a side they need (0: more than equivalence.MAX_RUNS). A look with no noise to judge by
    (1 run a side whose history was set aside: raw Δ only; or no open figure with a noise
    measured) says nothing of what more runs need (`runs_needed` None): the next look is
    taken."""
    cells = [c for c in comparison.cells if c.key in open_cells]
    if not cells or any(c.flagged for c in cells):
        return None
    need = headline.runs_needed(comparison, open_cells)
    if need is None or need <= FUTILE_FACTOR * budget:  # None: no noise to tell by
        return None
    return 0 if need >= headline.BEYOND_MAX_RUNS else need


def comparable(comparison: Comparison) -> set[Key]:
    """Cells valid on both sides: the only ones more trials can decide."""
    return {
        c.key
        for c in comparison.cells
        if c.a is not None and c.b is not None and c.a.status == "valid" and c.b.status == "valid"
    }


def _order(need_a: int, need_b: int, first: Side) -> list[Side]:
    """Alternate the sides, starting with `first`, until each has its trials."""
    out: list[Side] = []
    turn = first
    while need_a or need_b:
        if turn == "a" and need_a:
            out.append("a")
            need_a -= 1
        elif turn == "b" and need_b:
            out.append("b")
            need_b -= 1
        turn = "b" if turn == "a" else "a"
    return out


def measured_costs(
    first: list[RunFigures], every: list[RunFigures], stated: stage_plan.Costs
) -> stage_plan.Costs:
    """The costs the runs recorded: a full sweep from the first stage's runs (they sweep
    the whole matrix), a start from every run; STATED for what none recorded."""
    sweeps = [t for r in first for t in r.server_s]
    starts = [t for r in every for t in r.start_s]
    if not sweeps and not starts:
        return stated
    sweep = math.fsum(sweeps) / len(sweeps) if sweeps else stated.sweep_s
    start = math.fsum(starts) / len(starts) if starts else stated.start_s
    said = [
        "the sweep the first stage measured" if sweeps else f"a stated sweep ({stated.source})",
        "the starts the runs recorded" if starts else f"a stated start ({stated.source})",
    ]
    return stage_plan.Costs(start, sweep, "; ".join(said))


@dataclass
class _Book:
    """What a sequential compare has measured so far."""

    runs: dict[Side, list[RunFigures]] = field(default_factory=lambda: {"a": [], "b": []})
    trials: list[TrialRun] = field(default_factory=list)
    measurements: dict[Key, int] = field(default_factory=dict)
    full: list[RunFigures] = field(default_factory=list)  # the first stage's: whole sweeps
    first: Side = "a"

    def stage(self, measure: Measure, want: tuple[int, int], cells: frozenset[Key] | None) -> None:
        need_a = max(want[0] - len(self.runs["a"]), 0)
        need_b = max(want[1] - len(self.runs["b"]), 0)
        for side in _order(need_a, need_b, self.first):
            trial = len(self.runs[side]) + 1
            got = measure(side, trial, cells)
            self.runs[side].append(got)
            if cells is None:
                self.full.append(got)
            self.trials.append(TrialRun(side, trial, cells))
            for key, cell in got.cells.items():
                if cell.status == "valid" and (cells is None or key in cells):
                    self.measurements[key] = self.measurements.get(key, 0) + 1
            self.first = "b" if side == "a" else "a"  # the next stage starts with the other


def run(
    measure: Measure,
    policy: Policy,
    *,
    stages: tuple[tuple[int, int], ...] | None = None,
    costs: stage_plan.Costs = stage_plan.STATED_COSTS,
    cells: int = stage_plan.STATED_CELLS,
    names: tuple[str, str] = ("A", "B"),
    goal: Goal = "settle",
) -> SequentialOutcome:
    """Stage by stage until no cell is open or the plan ends. STAGES: a fixed plan; None:
    chosen by `stage_plan.choose`, first from COSTS and CELLS (stated until measured), then
    again after every stage from the costs the runs recorded and the cells the compare
    found, among the plans that begin with the stages already run. GOAL "decide": the
    looks are STAGES or DECIDE_STAGES, and cells stop as `decided` says (module text)."""
    book = _Book()
    open_cells: frozenset[Key] | None = None  # None: every cell (the first stage)
    last: Comparison | None = None
    closed: dict[Key, tuple[int, str]] = {}
    stopped: dict[Key, CellDelta] = {}  # each cell stopped as equivalent, as judged then
    budget_need: int | None = None
    alpha = policy.tost_alpha
    if goal == "decide":
        stages = stages or (PRIOR_STAGES if policy.noise_prior is not None else DECIDE_STAGES)
    chosen = None if stages is not None else stage_plan.choose(costs, cells, alpha=policy.alpha)
    plan = stages if stages is not None else chosen.stages  # type: ignore[union-attr]
    done: list[tuple[int, int]] = []
    while len(done) < len(plan):
        book.stage(measure, plan[len(done)], open_cells)
        done.append(plan[len(done)])
        a = merge_runs(book.runs["a"], names[0])
        b = merge_runs(book.runs["b"], names[1])
        if goal == "decide":
            level = look_alpha(alpha, len(done), len(plan))
            policy = replace(policy, equivalence_alpha=level)
        last = compare(a, b, policy)
        if last.answers.refused:  # nothing more to measure: the figures are not judged
            break
        if goal == "decide":
            now = {k: v for k, v in decided(last).items() if open_cells is None or k in open_cells}
            closed.update({k: (len(done), how) for k, how in now.items() if k not in closed})
            for c in last.cells:
                if now.get(c.key) == "equivalent" and c.key not in stopped:
                    stopped[c.key] = c
            still = comparable(last) - set(closed)
        else:
            still = comparable(last) - settled(last, policy)
        open_cells = frozenset(still if open_cells is None else still & open_cells)
        if not open_cells or len(done) == len(plan):
            break
        if goal == "decide":
            budget_need = beyond_budget(last, open_cells, max(plan[-1]))
            if budget_need is not None:
                break
        elif stages is None:
            chosen = stage_plan.choose(
                measured_costs(book.full, [*book.runs["a"], *book.runs["b"]], costs),
                max(len(comparable(last)), 1),
                tests=last.tests or None,
                alpha=policy.alpha,
                done=tuple(done),
            )
            plan = chosen.stages
    assert last is not None
    last = as_stopped(last, stopped)
    return SequentialOutcome(
        last, tuple(book.trials), len(done), book.measurements, plan, chosen,
        stopped_on_answers=last.answers.refused, goal=goal, closed=closed,
        budget_need=budget_need,
    )  # fmt: skip
