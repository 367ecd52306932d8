"""What a verdict would take: the runs a side that reach a 5 % and a 10 % MDE at the noise a
compare measured, and the server time they cost, server starts included.

- One cell: per figure, from its noise pooled over cells (with the run-level model, the
  noise left once each run's level is divided out), at the level one changed figure must
  reach under Benjamini-Hochberg (`Comparison.level_for_one`), normal quantiles (the pooled
  noise has many degrees of freedom).
- Every cell together (the run-level model only): from the sd of a run's level, at alpha / 2,
  the noncentral t at the degrees of freedom the verdict's own MDE uses (`compare.mde_df`,
  n - 1): the runs themselves are the sample.
- Server time of n runs a side: 2n x (a run's sweep, the mean over the compared runs, in
  server time + one server start). A start is the mean the bundles recorded
  (environment.json server_start.ready_after_s); without one, START_ESTIMATE_S, said so.
"""

from __future__ import annotations

import math

from bench import distributions, stats
from bench.verdict.cells import METRICS
from bench.verdict.compare import POWER, Comparison, mde_df

TARGETS_PCT = (5.0, 10.0)
MAX_RUNS = 100_000
# One start of the product's server (a 397B model's weights loaded onto 4 GPUs, CUDA graphs
# captured) when no bundle recorded its own: a stated estimate, not a measurement.
START_ESTIMATE_S = 600.0


def runs_for(sd_log: float, target_pct: float, level: float, *, runs_df: bool) -> int | None:
    """The fewest runs a side whose MDE is at most target_pct (None: more than MAX_RUNS)."""
    if sd_log <= 0:
        return 2

    def mde(n: int) -> float:
        df = mde_df(n, n) if runs_df else math.inf
        return stats.mde_pct(sd_log, n, n, alpha=level, power=POWER, df=df)

    if mde(MAX_RUNS) > target_pct:
        return None
    # mde(1) > target (or 1: no test), mde(MAX_RUNS) <= target
    return max(distributions.first_true(lambda n: mde(n) <= target_pct, 1, MAX_RUNS), 2)


def _costs(c: Comparison) -> tuple[float | None, float, str]:
    """(sweep server seconds of one run, one start's seconds, where the start came from)."""
    sweeps = [*c.a.server_s, *c.b.server_s]
    starts = [*c.a.start_s, *c.b.start_s]
    sweep = math.fsum(sweeps) / len(sweeps) if sweeps else None
    if starts:
        start = math.fsum(starts) / len(starts)
        return sweep, start, f"a server start {start:.0f} s, the mean the runs recorded"
    return (
        sweep,
        START_ESTIMATE_S,
        (f"a server start estimated at {START_ESTIMATE_S:.0f} s (no run recorded its own)"),
    )


def _runs(n: int | None, sweep: float | None, start: float) -> str:
    if n is None:
        return f"more than {MAX_RUNS:,} runs a side"
    if sweep is None:
        return f"{n} runs a side ({2 * n} server starts)"
    hours = 2 * n * (sweep + start) / 3600.0
    return f"{n} runs a side ({hours:,.1f} h of server time, {2 * n} server starts included)"


def lines(c: Comparison) -> list[str]:
    """The block compare prints; empty when it measured no noise."""
    sweep, start, whence = _costs(c)
    out = []
    for metric in METRICS:
        noise = c.noise.get(metric.name)
        if noise is None:
            continue
        level = c.level_for_one
        parts = [
            f"{t:g} %: {_runs(runs_for(noise.sd_log, t, level, runs_df=False), sweep, start)}"
            for t in TARGETS_PCT
        ]
        out.append(f"- {metric.label}, a change in one cell: {'; '.join(parts)}")
    if c.whole is not None:
        w = c.whole
        parts = [
            f"{t:g} %: "
            f"{_runs(runs_for(w.sd_log, t, c.policy.alpha / 2.0, runs_df=True), sweep, start)}"
            for t in TARGETS_PCT
        ]
        out.append(
            f"- every cell together (a run's level varies by {w.sd_log * 100:.1f} % from run "
            f"to run): {'; '.join(parts)}"
        )
    if not out:
        return []
    sweep_text = (
        f"a run's sweep {sweep:.0f} s of server time"
        if sweep is not None
        else "no run recorded its sweep's length"
    )
    head = (
        f"Runs a side for an MDE of 5 % and of 10 % at the noise measured here (80 % power; "
        f"{sweep_text}, {whence}):"
    )
    return [head, *out]
