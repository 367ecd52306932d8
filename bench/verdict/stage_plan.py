"""The sequential compare's stages, chosen with the cost of a server start in view.

Every run of a sequential compare is its own server start; a later stage's run sweeps only
the cells still open. So a stage costs its runs x (one start + the open share of a sweep),
and it runs at all only while some cell is open. A small first stage saves sweeps, but
leaves some cell of a large matrix open almost surely, so the next stage's starts follow;
a larger first stage settles more matrices at once, which pays when starts are dear.

`choose` takes the costs (a start's server seconds and a full sweep's, measured by the
runs, recorded, or stated) and the size of the matrix, and returns the plan of the least
expected server time, starts included, among the candidates below that keep the design's
error rates: power at least POWER against a change of the fixed design's MDE in one cell,
and a cell's false-alarm rate at most that of the fixed design's test (the level one
changed figure must reach under Benjamini-Hochberg). Every plan ends at LAST (5 + 5): the
model's power was optimistic for shorter plans on the twin (below, and docs/verdicts.md),
so the cost chooses the first stage and the looks before the last.

The model (one cell, one figure, log values, in units of the noise sd): runs are normal
with a known sd (the product's pooled, moderated sd has many degrees of freedom); at each
stage's cumulative (a, b) runs the cell settles when |Δ| + z(1 - EQUIVALENCE_ALPHA) x se
< the fixed design's MDE (sequential.equivalent), and the verdict, at the last stage the
cell took part in, flags it when |Δ| > z(1 - level / 2) x se. False alarms: a plan is a
candidate only when no stage before its last can both settle a cell and flag it
(`settles_without_alarm`), so an unchanged cell is flagged at most as often as by the
final test alone, the level; power and the share of cells left open after each stage are
Monte Carlo over MODEL_DRAWS seeded draws of a cell's runs (the same draws for every plan),
so the choice is deterministic. Cells are taken as independent. The time minimised is
the mean of a compare in which nothing changed and one in which a cell changed (which
keeps every stage running), CHANGE_PRIOR; `StagePlan.lines` prints both. `make verdict-power`
and tests/verdict/test_stage_plan.py check the chosen plans on the twin in virtual time.
"""

from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass
from functools import cache

from bench import distributions
from bench.verdict import budget
from bench.verdict.compare import ALPHA, POWER

Stage = tuple[int, int]  # cumulative runs of A and of B once the stage is done
FIRST: tuple[Stage, ...] = ((2, 1), (2, 2), (3, 2), (3, 3))
LATER: tuple[Stage, ...] = ((2, 2), (3, 2), (3, 3), (4, 3), (4, 4), (5, 4), (5, 5))
# Every plan ends at 5 + 5 runs: the model's power is optimistic for shorter plans. On the
# twin (300 comparisons, power at the fixed design's printed MDE, December 2026): 2+1, 2+2,
# 3+3, 5+5 reached 86.3 % (82 % modelled), but 2+1, 2+2, 3+2, 4+4 78.7 % (82 % modelled)
# and 2+2, 3+2, 4+3 70.3 % (82 % modelled).
LAST: Stage = (5, 5)
FIXED_TRIALS = 3  # the fixed design: 3 + 3 runs
EQUIVALENCE_ALPHA = 0.10  # each one-sided test that settles a cell
MODEL_DRAWS = 20_000
MAX_RUNS = FIXED_TRIALS * 4
# The share of compares that find a change, stated: a compare is run because something may
# have changed, and a changed cell keeps every stage running.
CHANGE_PRIOR = 0.5
# The model's power with its noise known; the product estimates it, which costs a little:
# a plan must reach POWER + this in the model (the 2+1, 2+2, 3+3, 5+5 plan: 82 % modelled,
# 84-86 % measured on the twin by make verdict-power).
POWER_MARGIN = 0.02  # a fixed design at the plan's power: at most this many a side


@dataclass(frozen=True)
class Costs:
    """Server seconds of one server start and of one full sweep of the matrix."""

    start_s: float
    sweep_s: float
    source: str  # where they came from, printed with the plan

    def __post_init__(self) -> None:
        for name in ("start_s", "sweep_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0.0 <= value <= 1e9):
                raise ValueError(f"{name} {value!r}: a cost lies between 0 and 1e9 s")


# Before the first stage has measured anything: a start of the product's server as the
# compare's budget states it, a sweep of the published card's matrix (40 cells) on the
# twin's published profile, `make fingerprint-cost` (docs/verdicts.md).
STATED_CELLS = 40
STATED_COSTS = Costs(
    budget.START_ESTIMATE_S,
    1435.0,
    "stated estimates until runs record them: a start 600 s, the published card's sweep",
)


@dataclass(frozen=True)
class StagePlan:
    stages: tuple[Stage, ...]
    costs: Costs
    cells: int
    unchanged_s: float  # expected server time, starts included, when no cell changed
    expected_starts: float  # when no cell changed
    changed_s: float  # expected server time, starts included, when one cell changed

    power: float  # modelled, at the fixed design's MDE in one cell
    level: float  # an unchanged cell's false-alarm rate is at most this (known noise)
    fixed_trials: int  # runs a side of the fixed design with at least this power
    fixed_s: float  # that fixed design's server time, starts included

    @property
    def expected_s(self) -> float:
        """What the plan minimises: a compare as likely to find a change as not."""
        return (1.0 - CHANGE_PRIOR) * self.unchanged_s + CHANGE_PRIOR * self.changed_s

    def label(self) -> str:
        return ", ".join(f"{a}+{b}" for a, b in self.stages)

    def lines(self) -> list[str]:
        c = self.costs
        n = self.fixed_trials
        last = sum(self.stages[-1])
        return [
            f"Stages {self.label()}, chosen for a server start of {c.start_s:.0f} s and a "
            f"sweep of {c.sweep_s:.0f} s ({c.source}), {self.cells} cells: expected server "
            f"time {_hours(self.expected_s)}, starts included ({_hours(self.unchanged_s)} "
            f"with {self.expected_starts:.1f} server starts when nothing changed, "
            f"{_hours(self.changed_s)} with {last} when a cell changed); the fixed design at "
            f"the same power ({self.power:.0%} at its MDE, {n} + {n} runs): "
            f"{_hours(self.fixed_s)} with {2 * n} server starts.",
        ]


def _hours(seconds: float) -> str:
    return f"{seconds / 3600.0:.2f} h" if seconds >= 360.0 else f"{seconds / 60.0:.1f} min"


def candidates() -> list[tuple[Stage, ...]]:
    """A first stage, then any increasing choice of the later ones (each adds runs), ending
    at LAST."""
    out = []
    for first in FIRST:
        later = [s for s in LATER if s[0] >= first[0] and s[1] >= first[1] and s != first]
        for r in range(len(later) + 1):
            for chosen in itertools.combinations(later, r):
                if (first, *chosen)[-1] == LAST:
                    out.append((first, *chosen))
    return out


@dataclass(frozen=True)
class _Rates:
    open_after: tuple[float, ...]  # P(an unchanged cell still open after each stage)
    power: float


def _se(stage: Stage) -> float:
    return math.sqrt(1.0 / stage[0] + 1.0 / stage[1])


def margin(level: float) -> float:
    """The fixed design's MDE in noise sds (log scale): 3 + 3 runs, 80 % power."""
    z = distributions.norm_ppf(1.0 - level / 2.0) + distributions.norm_ppf(POWER)
    return z * _se((FIXED_TRIALS, FIXED_TRIALS))


@cache
def _masks(level: float, draws: int) -> dict[tuple[Stage, bool], tuple[int, int]]:
    """Per stage and (unchanged, changed by the fixed design's MDE): bit i set when draw i
    settles there, and when the verdict there flags it (as a regression, for the change)."""
    m = margin(level)
    q_eq = distributions.norm_ppf(1.0 - EQUIVALENCE_ALPHA)
    q_rej = distributions.norm_ppf(1.0 - level / 2.0)
    rng = random.Random(2027)
    stages = sorted(set(FIRST) | set(LATER))
    most_a = max(a for a, _ in stages)
    most_b = max(b for _, b in stages)
    out = {(s, changed): [0, 0] for s in stages for changed in (False, True)}
    for i in range(draws):
        xs = [rng.gauss(0.0, 1.0) for _ in range(most_a)]
        ys = [rng.gauss(0.0, 1.0) for _ in range(most_b)]
        for a, b in stages:
            se = _se((a, b))
            for changed in (False, True):
                delta = math.fsum(ys[:b]) / b - math.fsum(xs[:a]) / a + (m if changed else 0.0)
                bits = out[((a, b), changed)]
                if abs(delta) + q_eq * se < m:
                    bits[0] |= 1 << i
                if (delta if changed else abs(delta)) > q_rej * se:
                    bits[1] |= 1 << i
    return {k: (v[0], v[1]) for k, v in out.items()}


@cache
def _rates(stages: tuple[Stage, ...], level: float, draws: int) -> _Rates:
    masks = _masks(level, draws)
    every = (1 << draws) - 1
    still = [every, every]  # not settled yet: unchanged, changed
    opened: list[float] = []
    hits = 0
    for j, stage in enumerate(stages):
        last = j == len(stages) - 1
        settle, flag = masks[(stage, True)]
        stop = still[1] if last else still[1] & settle
        hits += (stop & flag).bit_count()
        still[1] &= ~settle
        still[0] &= ~masks[(stage, False)][0]
        if not last:
            opened.append(still[0].bit_count() / draws)
    return _Rates(tuple(opened), hits / draws)


def settles_without_alarm(stage: Stage, level: float) -> bool:
    """No value of Δ both settles the cell at STAGE and is flagged there: an unchanged cell
    that stops early is never a false alarm, so the plan's false-alarm rate is at most the
    final test's, the level (known noise). Holds at 2+1 ... 3+3 for any matrix."""
    q_eq = distributions.norm_ppf(1.0 - EQUIVALENCE_ALPHA)
    q_rej = distributions.norm_ppf(1.0 - level / 2.0)
    return (q_eq + q_rej) * _se(stage) >= margin(level)


def fixed_power(n: int, level: float) -> float:
    """Power of the fixed design with n + n runs against its 3 + 3 MDE (normal model)."""
    z = distributions.norm_ppf(1.0 - level / 2.0) - margin(level) / _se((n, n))
    return 1.0 - 0.5 * math.erfc(-z / math.sqrt(2.0))


def evaluate(
    stages: tuple[Stage, ...], costs: Costs, cells: int, level: float, draws: int = MODEL_DRAWS
) -> StagePlan:
    r = _rates(stages, level, draws)
    unchanged = starts = changed = 0.0
    before: Stage = (0, 0)
    for j, stage in enumerate(stages):
        runs = stage[0] + stage[1] - before[0] - before[1]
        p_cell = 1.0 if j == 0 else r.open_after[j - 1]
        p_any = 1.0 - (1.0 - p_cell) ** cells
        unchanged += runs * (p_any * costs.start_s + p_cell * costs.sweep_s)
        starts += runs * p_any
        # one changed cell stays open (it is not settled), the others as when unchanged
        share = 1.0 if j == 0 else (1.0 + (cells - 1) * p_cell) / cells
        changed += runs * (costs.start_s + share * costs.sweep_s)
        before = stage
    n = FIXED_TRIALS
    while n < MAX_RUNS and fixed_power(n, level) < r.power:
        n += 1
    return StagePlan(
        stages, costs, cells, unchanged, starts, changed, r.power, level, n,
        2 * n * (costs.start_s + costs.sweep_s),
    )  # fmt: skip


def choose(
    costs: Costs,
    cells: int,
    *,
    tests: int | None = None,
    alpha: float = ALPHA,
    done: tuple[Stage, ...] = (),
    draws: int = MODEL_DRAWS,
) -> StagePlan:
    """The plan of least expected server time that keeps the design's error rates, among
    those that begin with the stages DONE. TESTS: the figures tested (Benjamini-Hochberg's
    m; default 4 a cell), the level one changed figure must reach being alpha / 2 / TESTS."""
    if cells < 1:
        raise ValueError(f"cells {cells}: a compare has at least one cell")
    level = alpha / 2.0 / (tests if tests is not None else 4 * cells)
    keep = [
        p
        for s in candidates()
        if s[: len(done)] == done and all(settles_without_alarm(x, level) for x in s[:-1])
        for p in [evaluate(s, costs, cells, level, draws)]
        if p.power >= POWER + POWER_MARGIN
    ]
    if not keep:
        raise ValueError(f"no plan begins with {done} and keeps the design's error rates")
    return min(keep, key=lambda p: (p.expected_s, len(p.stages)))
