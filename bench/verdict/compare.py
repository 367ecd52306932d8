"""Compare runs: per cell and figure, Δ % of B against A and whether it is a real change.

Noise is run-to-run noise, measured from repeated trials only (separate bundles per side,
or `--trials` of one run); the spread of requests inside one window is never taken for it.

Per cell and figure, with trials on both sides (or a pooled noise estimate):
  - Δ % = (B / A − 1) × 100 on the geometric means, its 95 % interval and a p-value from
    Welch's t-test on the logarithms of the per-trial values. Assumptions: trials are
    independent, their log values roughly normal (noise is multiplicative), variances
    may differ between A and B.
  - Pooling: when the relative noise of a figure is similar across cells (no cell's
    variance differs from the rest by an F-test at 1 %, Bonferroni over cells), one sd
    per figure is pooled over all cells and both sides; its degrees of freedom make the
    test useful with 2–3 trials. Each cell's own variance is then shrunk towards the
    pooled one by empirical Bayes (Smyth's moderated t: prior degrees of freedom from how
    much the cells' variances differ beyond chance), so a cell noisier than the rest
    keeps part of its own noise. Otherwise each cell's own Welch test is used.
  - The false-discovery rate over all cells × figures is controlled at `alpha` by
    Benjamini–Hochberg: a figure is changed when BH rejects it (and |Δ| is at least the
    optional minimum effect, 0 by default).
  - MDE: the smallest change detected with 80 % power at the level a single changed
    figure must reach under BH among m tests (alpha / m), from the noise measured: a
    change under it can go unseen. With pooling it is never sized for a cell quieter than
    the cell's own runs show (`mde_noise`: the moderated sd holds on average over cells,
    not in a noisy or heavy-tailed one). A figure not changed is EQUIVALENT within its
    margin or NOT RESOLVED (`equivalence`), never "no change".
With one trial per side and no noise estimate, the compare cannot tell noise from change:
it shows the raw Δ only and flags nothing on figures.
A cell that is not_ready, invalid, interrupted or failed on either side (or measured on
one side only) cannot be compared; it is listed with its reason.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from bench import stats
from bench.verdict import answers as answers_mod
from bench.verdict import capacity_delta, noise_prior, runlevel
from bench.verdict import equivalence as eqv
from bench.verdict import settings as settings_mod
from bench.verdict.cells import (
    UNMEASURED,
    UNTRUSTED,
    Cell,
    Key,
    MetricSpec,
    RunFigures,
    accepting,
    label_size,
    metrics_of,
)
from bench.verdict.reproduce import delta_pct, pooled_noise

Mark = Literal["improved", "regressed", "unchanged", "raw", "n/a"]
CellMark = Literal[
    "improved",
    "regressed",
    "mixed",
    "unchanged",
    "status changed",
    "cannot compare",
    "not measured",
    "raw",
    "n/a",
]
POWER = 0.80
# What a compare spends in all under no change: the whole-run test (run-level model) at
# ALPHA / 2 and Benjamini-Hochberg over the figures at ALPHA / 2, or BH alone at ALPHA. The
# two halves fire in disjoint comparisons and add up, so the false-alarm rate sits near
# ALPHA: 4 % keeps the promise "at most 5 %" with margin (docs/verdicts.md, "How often a
# verdict is wrong").
ALPHA = 0.04


@dataclass(frozen=True)
class Policy:
    alpha: float = ALPHA  # false-discovery rate over all cells x figures
    min_effect_throughput_pct: float = 0.0
    min_effect_latency_pct: float = 0.0
    pool: bool = True
    # settings allowed to differ between A and B, and cell flags judged anyway (CELL_FLAGS)
    accept: frozenset[str] = frozenset()
    # Tell a factor shared by every cell of a run from each cell's own noise
    # (`bench.verdict.runlevel`) when there are 2 runs a side and 3 cells or more.
    run_level: bool = True
    # Equivalence (bench.verdict.equivalence): the band ±margin_pct a figure not changed
    # must be shown inside; (figure name, percent) pairs override it per figure.
    margin_pct: float = eqv.DEFAULT_MARGIN_PCT
    figure_margins: tuple[tuple[str, float], ...] = ()
    # Each one-sided test of equivalence at this level (None: alpha). A sequential compare
    # that looks K times sets alpha / K, so that its claim of equivalence holds at alpha.
    equivalence_alpha: float | None = None
    # Run-to-run noise measured before the compare (`noise_prior`: the history's repeated
    # runs of this host): pooled with the compare's own, unless its runs are noisier.
    noise_prior: noise_prior.NoisePrior | None = None

    def margin(self, metric: str) -> float:
        return dict(self.figure_margins).get(metric, self.margin_pct)

    @property
    def tost_alpha(self) -> float:
        return self.alpha if self.equivalence_alpha is None else self.equivalence_alpha

    def min_effect(self, metric: MetricSpec) -> float:
        if metric.kind == "throughput":
            return self.min_effect_throughput_pct
        return self.min_effect_latency_pct


@dataclass(frozen=True)
class FigureDelta:
    metric: MetricSpec
    a: float | None
    b: float | None
    delta_pct: float | None
    method: Literal["welch log", "pooled", "raw", "none"]
    ci_pct: tuple[float, float] | None = None  # 95 % interval of Δ %
    p_value: float | None = None
    mde_pct: float | None = None  # 80 % power at the BH level for one change among m
    sd_log: float | None = None  # relative noise of one trial used
    mark: Mark = "n/a"
    df: float | None = None  # degrees of freedom of the test (inf: normal)
    # With the run-level model: this cell's Δ % beyond the change of the whole run, which
    # the interval, p and MDE are about (delta_pct stays the change B shows against A).
    own_pct: float | None = None
    # The sd the MDE is computed at where it is the cell's own, larger than the moderated
    # `sd_log` the test uses (`mde_noise`); None: the MDE is at sd_log.
    mde_sd_log: float | None = None
    # Two one-sided tests of the change as measured against the figure's margin.
    # (the change's spread, the margin %, alpha): what `equivalence` is judged on, lazily
    # (power loops run thousands of compares and read only the changes).
    judged_on: tuple[eqv.LogSpread, float, float] | None = None

    @functools.cached_property
    def equivalence(self) -> eqv.Equivalence | None:
        if self.judged_on is None:
            return None
        return eqv.tost(*self.judged_on)

    @property
    def mde_note(self) -> str:
        """What the printed MDE says of its noise when it is the cell's own (`mde_noise`)."""
        if self.mde_sd_log is None or self.sd_log is None:
            return ""
        return (
            f" (this cell's own noise {self.mde_sd_log * 100:.1f} %, above the "
            f"{self.sd_log * 100:.1f} % its test uses)"
        )

    @property
    def outcome(self) -> eqv.Outcome:
        if self.mark in ("improved", "regressed"):
            return "changed"
        if self.equivalence is not None and self.equivalence.equivalent:
            return "equivalent"
        return "not resolved"


@dataclass(frozen=True)
class CellDelta:
    key: Key
    a: Cell | None
    b: Cell | None
    figures: tuple[FigureDelta, ...]
    mark: CellMark
    reason: str | None = None

    @property
    def flagged(self) -> bool:
        return self.mark in ("improved", "regressed", "mixed", "status changed")

    @property
    def outcome(self) -> eqv.Outcome | None:
        """Changed, equivalent (every figure judged is) or not resolved; None when the
        cell was not compared (cannot compare, not measured)."""
        if self.flagged:
            return "changed"
        if self.mark in ("cannot compare", "not measured"):
            return None
        judged = {f.outcome for f in self.figures if f.delta_pct is not None}
        return "equivalent" if judged == {"equivalent"} else "not resolved"


@dataclass(frozen=True)
class Comparison:
    a: RunFigures
    b: RunFigures
    policy: Policy
    cells: tuple[CellDelta, ...]
    metadata_diff: tuple[tuple[str, str, str], ...]
    settings: settings_mod.SettingsCheck = field(
        default_factory=lambda: settings_mod.SettingsCheck((), ())
    )
    noise: dict[str, stats.PooledNoise] = field(default_factory=dict)
    tests: int = 0  # m of Benjamini-Hochberg
    whole: WholeRun | None = None  # the run-level model's change everywhere
    # What the runs answered, judged before the figures (bench.verdict.answers).
    answers: answers_mod.AnswersCheck = field(
        default_factory=lambda: answers_mod.AnswersCheck(absent="not checked")
    )
    # Two `bench capacity` runs: the change in SLO capacity (bench.verdict.capacity_delta).
    capacity: capacity_delta.CapacityDelta | None = None
    # With Policy.noise_prior: whether it was used, and why not (`PriorUse`).
    prior: PriorUse | None = None

    @property
    def level_for_one(self) -> float:
        """The p one changed figure must reach (BH rank 1 among the figures' tests)."""
        share = self.policy.alpha / 2.0 if self.whole is not None else self.policy.alpha
        return share / max(self.tests, 1)

    @property
    def flagged(self) -> list[CellDelta]:
        return [c for c in self.cells if c.flagged]

    @property
    def cannot_compare(self) -> list[CellDelta]:
        return [c for c in self.cells if c.mark == "cannot compare"]

    @property
    def unmeasured(self) -> list[CellDelta]:
        """Cells neither side measured (over capacity or not run on both): not compared."""
        return [c for c in self.cells if c.mark == "not measured"]

    @property
    def raw_only(self) -> bool:
        """One trial a side and no noise estimate: noise cannot be told from change."""
        figs = [f for c in self.cells for f in c.figures if f.delta_pct is not None]
        return bool(figs) and all(f.method == "raw" for f in figs)

    def summaries(self) -> list[str]:
        lines = []
        for metric in (m for phase in ("decode", "prefill", "workload") for m in metrics_of(phase)):
            ds = [f for c in self.cells for f in c.figures if f.metric is metric]
            deltas = [f.delta_pct for f in ds if f.delta_pct is not None]
            if not deltas:
                continue
            count = {m: sum(f.mark == m for f in ds) for m in ("improved", "regressed")}
            for m in ("equivalent", "not resolved"):
                count[m] = sum(f.mark == "unchanged" and f.outcome == m for f in ds)
            mdes = sorted(f.mde_pct for f in ds if f.mde_pct is not None)
            mde = (
                f"; MDE median {mde_shown(statistics.median(mdes))}, worst {mde_shown(mdes[-1])}"
                if mdes
                else ""
            )
            lines.append(
                f"{metric.label}: {count['improved']} improved, {count['regressed']} regressed, "
                f"{count['equivalent']} equivalent, {count['not resolved']} not resolved "
                f"of {len(deltas)}; median Δ "
                f"{_signed(statistics.median(deltas))} % "
                f"(range {_signed(min(deltas))} to {_signed(max(deltas))}){mde}"
            )
        return lines

    def noise_lines(self) -> list[str]:
        out = [] if self.prior is None else self.prior.lines()
        for name, n in self.noise.items():
            how = "pooled over cells" if n.sound and self.policy.pool else "per cell (not pooled)"
            what = "run-to-run sd of one trial"
            if self.whole is not None:
                what = "a cell's own run-to-run sd beyond its run's level"
            source = f"{n.cells} cells, both sides"
            if self.prior is not None and self.prior.used and name in self.prior.prior.figures:
                source = "the history's alone" if n.cells == 0 else f"{source}, and the history's"
            out.append(
                f"- {name}: {what} {n.sd_log * 100:.2f} % "
                f"({n.df} degrees of freedom, {source}): {how}"
            )
        return out


@dataclass(frozen=True)
class PriorUse:
    """The noise prior a compare was given, and whether its runs let it be used."""

    prior: noise_prior.NoisePrior
    used: bool
    why_not: str | None = None  # the check that failed: this compare's runs are noisier

    def lines(self) -> list[str]:
        head = self.prior.line()
        if self.used:
            return [f"- {head} Pooled with this compare's own noise (its runs are no noisier)."]
        return [f"- {head} Not used: {self.why_not}; this compare's own noise only."]


@dataclass(frozen=True)
class WholeRun:
    """A change of every cell together: Welch's t on the runs' levels (`runlevel`), at
    half the FDR (the figures' own tests share the other half). Δ % is B's slowness
    against A's: + = B slower (its latencies longer, its rates lower)."""

    delta_pct: float
    ci_pct: tuple[float, float]
    p_value: float
    mde_pct: float  # 80 % power at alpha / 2, at `mde_df`'s degrees of freedom
    sd_log: float  # run-to-run sd of a run's level
    df: float
    runs: tuple[int, int]
    changed: bool
    # Its noise is the history's (`noise_prior`): 1 run a side, no spread of its own.
    from_prior: bool = False


def mde_df(n_a: int, n_b: int) -> float:
    """The degrees of freedom the whole-run MDE is computed at: Welch's test estimates its
    own from the two sides' variances, between min(n_a, n_b) - 1 and n_a + n_b - 2; the
    lower end (Hsu's) is the one at which 80 % power holds whatever their ratio. With the
    estimate instead, the corpus's splits reached 76-83 %
    (docs/measured/verdicts-records-2026-12-05.md)."""
    return float(max(min(n_a, n_b) - 1, 1))


def _whole(
    lv: runlevel.Levels, policy: Policy, prior: noise_prior.NoisePrior | None
) -> WholeRun | None:
    """The whole-run test on the levels: Welch's t on the compare's own (2 runs a side), or,
    with a PRIOR and no spread of its own (1 run a side with a level), the t on the prior's.
    A run level measured today is never pooled with the history's: a host whose run level
    varies more than it did would have its false alarms counted at the history's noise."""
    r = lv.test()
    from_prior = False
    if r is not None:
        sd = math.sqrt((r.sd_log_a**2 + r.sd_log_b**2) / 2.0)
        df = mde_df(len(lv.a), len(lv.b))
    else:
        if prior is None or not lv.a or not lv.b or level_spread(lv)[0] is not None:
            return None
        sd, df, from_prior = prior.run_sd_log, float(prior.run_df), True
        r = stats.welch_log(
            [math.exp(v) for v in lv.a.values()],
            [math.exp(v) for v in lv.b.values()],
            pooled_sd=sd,
            pooled_df=df,
        )
    n = (len(lv.a), len(lv.b))
    mde = stats.mde_pct(sd, n[0], n[1], alpha=policy.alpha / 2.0, power=POWER, df=df)
    changed = r.p_value <= policy.alpha / 2.0
    return WholeRun(
        r.delta_pct, (r.low_pct, r.high_pct), r.p_value, mde, sd, r.df, n, changed, from_prior
    )


def level_spread(lv: runlevel.Levels) -> tuple[float | None, int]:
    """(sd, df) of the runs' levels about their side's mean; (None, 0) under 2 on both."""
    ss, df = 0.0, 0
    for side in (lv.a, lv.b):
        if len(side) >= 2:
            m = math.fsum(side.values()) / len(side)
            ss += math.fsum((u - m) ** 2 for u in side.values())
            df += len(side) - 1
    return (math.sqrt(ss / df), df) if df else (None, 0)


def _complete(run: RunFigures) -> set[int]:
    """The runs of RUN (one side, runs merged) that measured the most valid cells."""
    count: dict[int, int] = {}
    for cell in run.cells.values():
        if cell.status == "valid":
            for r in set(cell.runs or range(cell.valid_trials)):
                count[r] = count.get(r, 0) + 1
    most = max(count.values(), default=0)
    return {r for r, n in count.items() if n == most}


def _level_less(cell: Cell, metric: str, with_level: set[int] | None) -> int:
    """How many of CELL's METRIC values come from runs with no level of their own."""
    if with_level is None:
        return 0
    return sum(1 for r in cell.run_ids(metric) if r not in with_level)


def _only_runs(run: RunFigures, keep: set[int]) -> RunFigures:
    """RUN with each cell's values from the runs KEEP only (cells left with none dropped)."""
    cells: dict[Key, Cell] = {}
    for key, cell in run.cells.items():
        trials: dict[str, tuple[float, ...]] = {}
        runs: tuple[int, ...] = ()
        for m, values in cell.trials.items():
            ids = cell.run_ids(m)
            kept = [(r, v) for r, v in zip(ids, values, strict=True) if r in keep]
            if kept:
                trials[m] = tuple(v for _, v in kept)
                runs = tuple(r for r, _ in kept)
        if trials:
            cells[key] = replace(cell, trials=trials, runs=runs)
    return replace(run, cells=cells)


def _changes_1v1(a: RunFigures, b: RunFigures, metric: str) -> list[float]:
    """log(B / A) of METRIC over the valid cells with one value a side."""
    out = []
    for key, ca in a.cells.items():
        cb = b.cells.get(key)
        if cb is None or ca.status != "valid" or cb.status != "valid":
            continue
        va, vb = ca.trials.get(metric, ()), cb.trials.get(metric, ())
        if len(va) == len(vb) == 1 and va[0] > 0 and vb[0] > 0:
            out.append(math.log(vb[0] / va[0]))
    return out


def _check_prior(
    prior: noise_prior.NoisePrior,
    lv: runlevel.Levels,
    noise: dict[str, stats.PooledNoise],
    tested: tuple[RunFigures, RunFigures],
) -> PriorUse:
    """Is this compare noisier than its prior? Each part the runs can measure (the run
    levels' spread, each figure's own noise) against the prior's, F-tests at CHECK_ALPHA
    shared by them (Bonferroni)."""
    found: list[tuple[str, float, float, float]] = []  # (what, own sd, prior sd, p)
    own_sd, own_df = level_spread(lv)
    if own_sd is not None:
        p = noise_prior.noisier(own_sd, own_df, prior.run_sd_log, prior.run_df)
        if p is not None:
            found.append(("a run's level", own_sd, prior.run_sd_log, p))
    for name, fig in prior.figures.items():
        own = noise.get(name)
        if own is not None and own.df > 0:
            sd, df = own.sd_log, float(own.df)
        else:
            spread = noise_prior.spread_of_changes(_changes_1v1(*tested, name))
            if spread is None:
                continue
            sd, df = spread
        p = noise_prior.noisier(sd, df, fig.sd_log, fig.df)
        if p is not None:
            found.append((name, sd, fig.sd_log, p))
    if not found:
        return PriorUse(prior, True)
    what, sd, was, p = min(found, key=lambda x: x[3])
    if p > noise_prior.CHECK_ALPHA / len(found):
        return PriorUse(prior, True)
    why = (
        f"this compare's runs are noisier than the history's ({what}: {sd * 100:.2f} % "
        f"against {was * 100:.2f} %, F-test p = {p:.2g})"
    )
    return PriorUse(prior, False, why)


def _with_prior(
    noise: dict[str, stats.PooledNoise], prior: noise_prior.NoisePrior
) -> dict[str, stats.PooledNoise]:
    """Each figure's pooled noise with the prior's pooled in."""
    out = dict(noise)
    for name, fig in prior.figures.items():
        own = noise.get(name)
        if own is None or own.df <= 0:
            out[name] = stats.PooledNoise(fig.sd_log, fig.df, True, 0)
            continue
        sd, df = noise_prior.pooled(fig.sd_log, fig.df, own.sd_log, own.df)
        out[name] = replace(own, sd_log=sd, df=int(df))
    return out


def _signed(value: float) -> str:
    return "0.0" if round(value, 1) == 0 else f"{value:+.1f}".replace("-", "−")


def _mark(metric: MetricSpec, delta: float, changed: bool) -> Mark:
    if not changed:
        return "unchanged"
    return "improved" if (delta > 0) == metric.higher_is_better else "regressed"


def _level_for_one(alpha: float, m: int) -> float:
    """The p a single true change must reach under BH among m tests (rank 1)."""
    return alpha / max(m, 1)


def figure_delta(
    metric: MetricSpec,
    a: Cell,
    b: Cell,
    policy: Policy,
    *,
    pooled: stats.PooledNoise | None = None,
    tests: int = 1,
    share: float = 1.0,
    level_less: tuple[int, int] = (0, 0),
    run_noise: tuple[float, float] | None = None,
) -> FigureDelta:
    """Δ, interval, p and MDE of one figure (the mark is set after BH in `compare`);
    `share` of the FDR is what the figures' tests spend (the rest: the whole-run test).

    LEVEL_LESS: how many of A's and B's values come from runs with no level of their own (a
    sequential compare's runs of a few open cells: they get their side's mean level), whose
    run's deviation from that mean is still in them; RUN_NOISE (sd, df of a run's level)
    adds that variance to the pooled test's: var(mean) gains run sd² for each such value."""
    ta, tb = a.trials.get(metric.name, ()), b.trials.get(metric.name, ())
    va, vb = a.value(metric.name), b.value(metric.name)
    d = delta_pct(vb, va)
    if d is None or not ta or not tb or min(ta) <= 0 or min(tb) <= 0:
        return FigureDelta(metric, va, vb, d, "none")
    level = _level_for_one(policy.alpha * share, tests)
    use_pool = pooled is not None and policy.pool and pooled.sound and pooled.df > 0
    if use_pool:
        assert pooled is not None
        ss, d = _own_ss(ta), len(ta) - 1
        ss_b, d_b = _own_ss(tb), len(tb) - 1
        sd, df = pooled.moderated(ss + ss_b, max(d, 0) + max(d_b, 0))
        sd, df = _with_levels_unknown(sd, df, (len(ta), len(tb)), level_less, run_noise)
        r = stats.welch_log(ta, tb, pooled_sd=sd, pooled_df=df)
        method: Literal["welch log", "pooled"] = "pooled"
        mde_sd = mde_noise(sd, ss + ss_b, max(d, 0) + max(d_b, 0))
    elif len(ta) >= 2 and len(tb) >= 2:
        r = stats.welch_log(ta, tb)
        sd = math.sqrt((r.sd_log_a**2 + r.sd_log_b**2) / 2.0)
        method = "welch log"
        mde_sd = sd
    else:
        return FigureDelta(metric, va, vb, d, "raw", mark="raw")
    mde = stats.mde_pct(mde_sd, len(ta), len(tb), alpha=level, power=POWER, df=r.df)
    return FigureDelta(
        metric,
        va,
        vb,
        r.delta_pct,
        method,
        (r.low_pct, r.high_pct),
        r.p_value,
        mde,
        sd,
        df=r.df,
        mde_sd_log=mde_sd if mde_sd > sd else None,
    )


def _with_levels_unknown(
    sd: float,
    df: float,
    n: tuple[int, int],
    level_less: tuple[int, int],
    run_noise: tuple[float, float] | None,
) -> tuple[float, float]:
    """(sd, df) of one trial that gives the difference of means its variance when the
    LEVEL_LESS values of each side also carry a run's level (sd, df = RUN_NOISE):
    se² = sd² (1/n_a + 1/n_b) + run sd² (m_a / n_a² + m_b / n_b²); df by Satterthwaite."""
    if run_noise is None or not any(level_less) or min(n) == 0:
        return sd, df
    run_sd, run_df = run_noise
    base = sd**2 * (1.0 / n[0] + 1.0 / n[1])
    extra = run_sd**2 * (level_less[0] / n[0] ** 2 + level_less[1] / n[1] ** 2)
    total = base + extra
    return math.sqrt(total / (1.0 / n[0] + 1.0 / n[1])), eqv.satterthwaite(
        [(base, df), (extra, run_df)]
    )


def mde_noise(moderated_sd: float, own_ss: float, own_df: int) -> float:
    """The sd of one trial a pooled figure's MDE is computed at: the larger of the moderated
    sd (the test's) and the cell's own, sqrt(own_ss / own_df) / c4(own_df) from its runs on
    both sides.

    Why. The moderated variance s² = (d0 s0² + SS) / (d0 + d) is the cell's variance from its
    runs and the prior (Smyth: 1 / s² is the posterior mean of 1 / σ²) when the cells'
    variances scatter around the pooled s0² with d0 prior degrees of freedom and each cell's
    noise is normal; the noncentral t at d0 + d degrees of freedom then gives 80 % power on
    average over the cells, not in each. The cell's own evidence weighs d / (d0 + d) (6 / 23
    with 4 + 4 runs on llama.cpp's corpus): a cell noisier than the others, or one run far
    out (heavy tails: one slow run moves a mean of 4 by a quarter of its distance), is sized
    as if it were as quiet as the rest. Its planted change is then missed whenever that run
    sits on the side that hides a slowdown: on llama.cpp's corpus, 81.8 % power over all
    figures but 73.9 % in decode 2K × 1, whose slowest run is 2.2-2.3 sd out
    (docs/measured/corpus-power-llamacpp-every-figure-2026-12-06.md).

    Derivation. With se = s_t sqrt(1/n_a + 1/n_b) (s_t the moderated sd the test uses), the
    test finds a true change D when D + e > c se (c its critical t), e the noise of the
    difference of the two means, about normal with sd σ sqrt(1/n_a + 1/n_b), σ the cell's
    own noise. Sized at D = ncp s sqrt(1/n_a + 1/n_b) (ncp the noncentral t's for 80 %),
    D is found when Z σ > c s_t - ncp s, Z standard normal. At s = s_t that is
    Z > (c - ncp) s_t / σ: 80 % when σ = s_t, less when the cell is noisier (σ > s_t). At
    s = σ >= s_t it is Z > c s_t / σ - ncp >= c - ncp: 80 % or more. σ is not known; its
    estimate from this cell alone is s_own / c4(d), s_own = sqrt(SS / d) the cell's own sd
    from its runs on both sides (d degrees of freedom) and c4 its bias (`c4`: s_own is
    short of σ on average, and the derivation needs σ, not σ²); it holds the outlying run
    whose share of a mean a slowdown must beat. So s = max(s_t, s_own / c4(d)): a cell no
    noisier than the moderated sd keeps its MDE; the test is unchanged (so are its false
    alarms); only the printed size grows, and it says so (`FigureDelta.mde_note`)."""
    if own_df <= 0 or own_ss <= 0:
        return moderated_sd
    return max(moderated_sd, math.sqrt(own_ss / own_df) / c4(own_df))


def c4(df: int) -> float:
    """E[s] / σ for a normal sample sd on df degrees of freedom: s / c4 is unbiased for σ
    (0.959 at 6, 0.975 at 10)."""
    return math.sqrt(2.0 / df) * math.exp(math.lgamma((df + 1) / 2.0) - math.lgamma(df / 2.0))


def _own_ss(values: Sequence[float]) -> float:
    """Sum of squared deviations of the log values (0 for one value)."""
    if len(values) < 2:
        return 0.0
    logs = [math.log(v) for v in values]
    m = stats.mean(logs)
    return math.fsum((x - m) ** 2 for x in logs)


def _cell_mark(a: Cell | None, b: Cell | None, figures: tuple[FigureDelta, ...]) -> CellMark:
    return _status_mark(a, b) or _figures_mark(figures)


def _status_mark(a: Cell | None, b: Cell | None) -> CellMark | None:
    """What the two statuses alone decide; None when both are alike and measured."""
    if a is None or b is None or a.status in UNTRUSTED or b.status in UNTRUSTED:
        return "cannot compare"
    if a.status in UNMEASURED and b.status in UNMEASURED:
        return "not measured"
    if a.status != b.status:
        return "status changed"
    return None


# The marks of a cell's figures, the first present wins (after "mixed").
_FIGURE_MARKS: tuple[CellMark, ...] = ("regressed", "improved", "unchanged", "raw")


def _figures_mark(figures: tuple[FigureDelta, ...]) -> CellMark:
    marks = {f.mark for f in figures}
    if "regressed" in marks and "improved" in marks:
        return "mixed"
    return next((m for m in _FIGURE_MARKS if m in marks), "n/a")


def _reason(a: Cell | None, b: Cell | None) -> str | None:
    if a is None or b is None:
        return "measured in B only" if a is None else "measured in A only"
    bad = [(side, c) for side, c in (("A", a), ("B", b)) if c.status in UNTRUSTED]
    if bad:
        return "; ".join(
            f"{c.status.replace('_', ' ')} in {side}: {c.detail or 'no reason'}" for side, c in bad
        )
    return None


# Table order: prefill rows, then decode cells, then workload points.
_PHASE_ORDER = {"prefill": 0, "decode": 1, "workload": 2}


def compare(a: RunFigures, b: RunFigures, policy: Policy) -> Comparison:
    a, b = accepting(a, policy.accept), accepting(b, policy.accept)
    keys = sorted(
        set(a.cells) | set(b.cells),
        key=lambda k: (_PHASE_ORDER[k[0]], label_size(k[1]), k[2]),
    )
    found = runlevel.items(a, b)
    whole: WholeRun | None = None
    tested_a, tested_b = a, b  # what the figures' own tests read
    noise: dict[str, stats.PooledNoise] | None = None
    use: PriorUse | None = None
    if policy.run_level and runlevel.applies(found):
        lv = runlevel.levels(a, b, found)
        prior = policy.noise_prior
        if prior is not None and lv.a and lv.b:
            resid = runlevel.residuals(a, b, found)
            own = pooled_noise(list(resid))
            # checked on the runs that measured the whole matrix: a sequential compare's
            # later runs measure the cells its first looks left open, chosen for a change
            # larger than their noise would give (and a run of a few cells keeps its level)
            full = (_only_runs(resid[0], _complete(a)), _only_runs(resid[1], _complete(b)))
            use = _check_prior(prior, lv, pooled_noise(list(full)), full)
            whole = _whole(lv, policy, prior if use.used else None)
            if use.used and whole is not None:
                tested_a, tested_b = resid
                noise = _with_prior(own, prior)
        if whole is None:
            whole = _whole(lv, policy, None)
            if whole is not None:
                tested_a, tested_b = runlevel.residuals(a, b, found)
    if policy.noise_prior is not None and use is None:
        why = (
            f"fewer than {runlevel.MIN_CELLS} cells valid on both sides with a run's level: "
            "the run-level model it is for does not apply"
        )
        use = PriorUse(policy.noise_prior, False, why)
    share = 0.5 if whole is not None else 1.0
    # the runs with a level of their own, each side (None: every run counts as having one)
    lv_runs: tuple[set[int] | None, set[int] | None] = (None, None)
    if whole is not None:
        lv_runs = (set(lv.a), set(lv.b))
    if noise is None:
        noise = pooled_noise([tested_a, tested_b])
    comparable = [
        k
        for k in keys
        if (ca := a.cell(k)) is not None
        and (cb := b.cell(k)) is not None
        and ca.status == cb.status == "valid"
    ]
    m = sum(
        1
        for k in comparable
        for metric in metrics_of(k[0])
        if a.cells[k].trials.get(metric.name) and b.cells[k].trials.get(metric.name)
    )
    figures_by_key: dict[Key, list[FigureDelta]] = {
        k: [
            _own(
                figure_delta(
                    metric,
                    tested_a.cells[k],
                    tested_b.cells[k],
                    policy,
                    pooled=noise.get(metric.name),
                    tests=m,
                    share=share,
                    level_less=(
                        _level_less(tested_a.cells[k], metric.name, lv_runs[0]),
                        _level_less(tested_b.cells[k], metric.name, lv_runs[1]),
                    ),
                    run_noise=None if whole is None else (whole.sd_log, whole.df),
                ),
                a.cells[k],
                b.cells[k],
                whole,
            )
            for metric in metrics_of(k[0])
        ]
        for k in comparable
    }
    tested = [
        (k, i, f.p_value)
        for k, figs in figures_by_key.items()
        for i, f in enumerate(figs)
        if f.p_value is not None
    ]
    rejected = stats.benjamini_hochberg([p for _, _, p in tested], policy.alpha * share)
    for (k, i, _), rej in zip(tested, rejected, strict=True):
        f = figures_by_key[k][i]
        f = replace(f, mark=_figure_mark(f, rej, whole, policy))
        figures_by_key[k][i] = _judged_equivalence(f, a.cells[k], b.cells[k], whole, policy)
    cells = []
    for key in keys:
        ca, cb = a.cell(key), b.cell(key)
        figures = tuple(figures_by_key.get(key, ()))
        cells.append(CellDelta(key, ca, cb, figures, _cell_mark(ca, cb, figures), _reason(ca, cb)))
    check = settings_mod.check(
        a.settings, b.settings, policy.accept, names=settings_mod.COMPARE_NAMES
    )
    answers = answers_mod.check(
        a.fingerprints, b.fingerprints, accepted=settings_mod.ANSWERS in policy.accept
    )
    return Comparison(
        a, b, policy, tuple(cells), metadata_diff(a, b), check, noise, m, whole, answers,
        capacity_delta.judge(a, b, policy.alpha, policy.margin_pct), use,
    )  # fmt: skip


def _own(f: FigureDelta, a: Cell, b: Cell, whole: WholeRun | None) -> FigureDelta:
    """F as tested on values without their run levels: its Δ becomes the cell's own part
    and Δ the change B shows against A on the values as measured."""
    if whole is None or f.delta_pct is None:
        return f
    va, vb = a.value(f.metric.name), b.value(f.metric.name)
    return replace(f, a=va, b=vb, delta_pct=delta_pct(vb, va), own_pct=f.delta_pct)


def _judged_equivalence(
    f: FigureDelta, a: Cell, b: Cell, whole: WholeRun | None, policy: Policy
) -> FigureDelta:
    """F with its two one-sided tests against its margin (`equivalence`), on the change as
    measured: its own noise and, with the run-level model, the run levels'."""
    if f.delta_pct is None or f.sd_log is None or f.df is None or f.mark == "raw":
        return f
    n = eqv.trials(a, b, f.metric.name)
    if min(n) == 0:
        return f
    runs = None if whole is None else (whole.sd_log, whole.df, whole.runs)
    s = eqv.spread(f.delta_pct, f.sd_log, f.df, n, runs)
    return replace(f, judged_on=(s, policy.margin(f.metric.name), policy.tost_alpha))


def _figure_mark(f: FigureDelta, rejected: bool, whole: WholeRun | None, policy: Policy) -> Mark:
    """Changed: its own test rejected by BH, or (run-level model) the whole run changed.
    The direction: of its own part when only that changed, else of Δ as measured."""
    assert f.delta_pct is not None
    big = abs(f.delta_pct) >= policy.min_effect(f.metric)
    everywhere = whole is not None and whole.changed
    if rejected and not everywhere and f.own_pct is not None:
        return _mark(f.metric, f.own_pct, big)
    return _mark(f.metric, f.delta_pct, (rejected or everywhere) and big)


def metadata_diff(a: RunFigures, b: RunFigures) -> tuple[tuple[str, str, str], ...]:
    out = []
    for name in sorted(set(a.metadata) | set(b.metadata)):
        va, vb = a.metadata.get(name, "—"), b.metadata.get(name, "—")
        if va != vb:
            out.append((name, va, vb))
    return tuple(out)


MDE_SHOWN_UP_TO_PCT = 1000.0


def mde_shown(pct: float) -> str:
    """An MDE as printed: "12.3 %"; past MDE_SHOWN_UP_TO_PCT "over 1,000 %" (a factor of 11:
    the runs cannot tell anything about that figure, and digits past it would only pretend)."""
    if not pct <= MDE_SHOWN_UP_TO_PCT:
        return f"over {MDE_SHOWN_UP_TO_PCT:,.0f} %"
    return f"{pct:.1f} %"
