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

Every trial is its own run (one server start, one signed bundle): trials inside one server
start share that start's noise and are not independent. Within a stage the sides alternate
(A B A, B, A B, A B B A ...) so that drift over hours falls on both. `make verdict-power`
measures this scheduler's false alarms, power and server time against the fixed design.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from bench import distributions, stats
from bench.verdict import stage_plan
from bench.verdict.cells import Key, RunFigures
from bench.verdict.compare import POWER, CellDelta, Comparison, FigureDelta, Policy, compare
from bench.verdict.run_source import merge_runs

Side = Literal["a", "b"]
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

    def lines(self) -> list[str]:
        per_side = {s: sum(1 for w in self.trials if w.side == s) for s in ("a", "b")}
        order = " ".join(
            w.side.upper() + ("" if w.cells is None else f"[{len(w.cells)}]") for w in self.trials
        )
        why = [] if self.chosen is None else self.chosen.lines()
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
    prefill is open but none of whose decode cells are, as prefill-only rows."""
    if cells is None:
        return ()
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
    """Schuirmann's TOST at EQUIVALENCE_ALPHA: is |Δ| < margin_pct with that confidence?"""
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


def run(
    measure: Measure,
    policy: Policy,
    *,
    stages: tuple[tuple[int, int], ...] | None = None,
    costs: stage_plan.Costs = stage_plan.STATED_COSTS,
    cells: int = stage_plan.STATED_CELLS,
    names: tuple[str, str] = ("A", "B"),
) -> SequentialOutcome:
    """Stage by stage until no cell is open or the plan ends. STAGES: a fixed plan; None:
    chosen by `stage_plan.choose`, first from COSTS and CELLS (stated until measured), then
    again after every stage from the costs the runs recorded and the cells the compare
    found, among the plans that begin with the stages already run."""
    runs: dict[Side, list[RunFigures]] = {"a": [], "b": []}
    trials: list[TrialRun] = []
    open_cells: frozenset[Key] | None = None  # None: every cell (the first stage)
    measurements: dict[Key, int] = {}
    last: Comparison | None = None
    first: Side = "a"
    chosen = None if stages is not None else stage_plan.choose(costs, cells, alpha=policy.alpha)
    plan = stages if stages is not None else chosen.stages  # type: ignore[union-attr]
    done: list[tuple[int, int]] = []
    full: list[RunFigures] = []  # the first stage's runs: whole sweeps
    while len(done) < len(plan):
        want_a, want_b = plan[len(done)]
        need_a = max(want_a - len(runs["a"]), 0)
        need_b = max(want_b - len(runs["b"]), 0)
        for side in _order(need_a, need_b, first):
            trial = len(runs[side]) + 1
            got = measure(side, trial, open_cells)
            runs[side].append(got)
            if not done:
                full.append(got)
            trials.append(TrialRun(side, trial, open_cells))
            for key, cell in got.cells.items():
                if cell.status == "valid" and (open_cells is None or key in open_cells):
                    measurements[key] = measurements.get(key, 0) + 1
            first = "b" if side == "a" else "a"  # the next stage starts with the other side
        done.append((want_a, want_b))
        a = merge_runs(runs["a"], names[0])
        b = merge_runs(runs["b"], names[1])
        last = compare(a, b, policy)
        if last.answers.refused:  # nothing more to measure: the figures are not judged
            break
        still = comparable(last) - settled(last, policy)
        if open_cells is not None:
            still &= open_cells
        open_cells = frozenset(still)
        if not open_cells:
            break
        if stages is None and len(done) < len(plan):
            chosen = stage_plan.choose(
                measured_costs(full, [*runs["a"], *runs["b"]], costs),
                max(len(comparable(last)), 1),
                tests=last.tests or None,
                alpha=policy.alpha,
                done=tuple(done),
            )
            plan = chosen.stages
    assert last is not None
    return SequentialOutcome(
        last, tuple(trials), len(done), measurements, plan, chosen,
        stopped_on_answers=last.answers.refused,
    )  # fmt: skip
