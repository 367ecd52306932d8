"""Run-to-run noise measured before a compare: a prior from the history's repeated runs.

A compare measures its own noise: it needs 2 runs a side before it can tell a run's level
from a change (`runlevel`), so no design that relies on it alone decides with fewer than
4 server starts. A host whose builds were each run more than once (the history's series:
one host, one launch profile, one settings hash) has measured that noise already. This
module estimates it from those runs, the same two parts a compare estimates:

- a run's level (the factor every cell of one server start shares): sd of the runs' levels
  about their build's mean, `run_df` = runs - builds degrees of freedom;
- each figure's own noise beyond its run's level: sd of a cell's values (its run's level
  divided out) about the cell's mean over its build's runs, pooled over cells and builds.

Runs of one build (one engine commit, image and settings on one host and launch profile)
are repeats of the same thing: what differs between them is noise, day-to-day drift
included, so the prior is no smaller than a compare's noise measured within one day.

A compare given a prior (`Policy.noise_prior`) pools each variance with its own, weighed by
degrees of freedom (the prior's df added to the compare's): with 1 run a side it tests on
the prior alone. It first checks that its runs are not noisier than the prior says
(`check`): its own figure noise (from 2 runs a side: the cells' trials; from 1: the spread
of the cells' changes, the outlying ones left out: a few changed cells do not move it) and its
run levels' spread (2 runs a side or more) against the prior's by an F-test at
CHECK_ALPHA; a compare noisier than its history uses its own noise only, and says why.
What no check can see with 1 run a side is a run level that varies more than the history
says: `make decide-power` measures what that costs (a host whose run level varies 3 times
as much as its history's).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from bench import distributions, stats
from bench.verdict.cells import BY_NAME, Key, RunFigures, metrics_of
from bench.verdict.runlevel import MIN_CELLS

CHECK_ALPHA = 0.01
# A prior from fewer degrees of freedom for a run's level than this is not one: it would
# only widen the intervals it is meant to narrow.
MIN_RUN_DF = 2
# The median absolute deviation times this is a normal sample's sd.
MAD_SCALE = 1.482602218505602
OUTLYING_MADS = 3.5


@dataclass(frozen=True)
class FigureNoise:
    sd_log: float  # a cell's own run-to-run sd of one run, its run's level divided out
    df: int


@dataclass(frozen=True)
class NoisePrior:
    run_sd_log: float  # sd of a run's level (log scale)
    run_df: int
    figures: Mapping[str, FigureNoise]
    runs: int
    builds: int
    source: str  # where the runs came from, said with the verdict

    def line(self) -> str:
        own = ", ".join(
            f"{name} {f.sd_log * 100:.2f} % ({f.df} df)" for name, f in sorted(self.figures.items())
        )
        return (
            f"Noise measured before this compare ({self.source}): {self.runs} runs of "
            f"{self.builds} build(s); a run's level varies by {self.run_sd_log * 100:.2f} % "
            f"({self.run_df} df); a cell's own noise: {own}."
        )


def _sign(metric: str) -> float:
    return -1.0 if BY_NAME[metric].higher_is_better else 1.0


def _run_values(run: RunFigures) -> dict[tuple[Key, str], float]:
    """Each valid figure of RUN: the mean of its trials' logs, oriented (+ slower)."""
    out: dict[tuple[Key, str], float] = {}
    for key, cell in run.cells.items():
        if cell.status != "valid":
            continue
        for m in metrics_of(key[0]):
            values = cell.trials.get(m.name, ())
            if values and all(math.isfinite(v) and v > 0 for v in values):
                out[(key, m.name)] = (
                    _sign(m.name) * math.fsum(math.log(v) for v in values) / len(values)
                )
    return out


@dataclass
class _Sums:
    ss: float = 0.0
    df: int = 0


def _build(runs: Sequence[RunFigures], level: _Sums, own: dict[str, _Sums]) -> bool:
    """Add one build's runs to the sums; False when they share too few figures."""
    values = [_run_values(r) for r in runs]
    shared = set(values[0]).intersection(*values[1:])
    if len({key for key, _ in shared}) < MIN_CELLS:
        return False
    k = len(values)
    items = sorted(shared)
    centre = {i: math.fsum(v[i] for v in values) / k for i in items}
    levels = [statistics.median(v[i] - centre[i] for i in items) for v in values]
    mean_level = math.fsum(levels) / k
    level.ss += math.fsum((u - mean_level) ** 2 for u in levels)
    level.df += k - 1
    for item in items:
        resid = [v[item] - centre[item] - u for v, u in zip(values, levels, strict=True)]
        m = math.fsum(resid) / k
        sums = own.setdefault(item[1], _Sums())
        sums.ss += math.fsum((e - m) ** 2 for e in resid)
        sums.df += k - 1
    return True


def estimate(builds: Sequence[Sequence[RunFigures]], source: str) -> NoisePrior | None:
    """The prior from BUILDS (each: the runs of one build, 2 or more), or None when they
    hold fewer than MIN_RUN_DF degrees of freedom for a run's level."""
    level, own = _Sums(), dict[str, _Sums]()
    used = runs = 0
    for group in builds:
        if len(group) >= 2 and _build(group, level, own):
            used += 1
            runs += len(group)
    if level.df < MIN_RUN_DF:
        return None
    figures = {
        name: FigureNoise(math.sqrt(s.ss / s.df), s.df)
        for name, s in own.items()
        if s.df > 0 and s.ss > 0
    }
    return NoisePrior(math.sqrt(level.ss / level.df), level.df, figures, runs, used, source)


def pooled(
    prior_sd: float, prior_df: float, own_sd: float | None, own_df: float
) -> tuple[float, float]:
    """(sd, df) of the prior's variance and the compare's own, weighed by their df."""
    if own_sd is None or own_df <= 0:
        return prior_sd, prior_df
    return stats.pool_sd(prior_sd, prior_df, own_df * own_sd**2, own_df)


def noisier(own_sd: float, own_df: float, prior_sd: float, prior_df: float) -> float | None:
    """The F-test's p that the compare's own variance exceeds the prior's; None when there
    is nothing to test."""
    if own_df <= 0 or prior_df <= 0 or prior_sd <= 0 or not math.isfinite(own_sd):
        return None
    return distributions.f_sf((own_sd / prior_sd) ** 2, own_df, prior_df)


def spread_of_changes(changes: Sequence[float]) -> tuple[float, float] | None:
    """(sd of one run, df) from the changes log(B / A) of one figure over the cells of 1 run
    a side, run levels divided out: each change holds two runs' own noise, so one run's sd
    is their sd / sqrt 2. Cells more than OUTLYING_MADS median absolute deviations (scaled
    to an sd) from the median are left out first: a cell that changed is no measure of
    noise (a normal sample loses 0.05 % of its values so). None under MIN_CELLS cells."""
    if len(changes) < MIN_CELLS:
        return None
    centre = statistics.median(changes)
    scale = MAD_SCALE * statistics.median(abs(c - centre) for c in changes)
    kept = [c for c in changes if abs(c - centre) <= OUTLYING_MADS * scale]
    if len(kept) < MIN_CELLS:
        return None
    return statistics.stdev(kept) / math.sqrt(2.0), float(len(kept) - 1)
