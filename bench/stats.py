"""Every statistic of bench in one module, with no third-party dependency.

Order statistics: percentiles interpolate linearly between order statistics (numpy's
default), so a median of an even sample is the mean of the middle two, as the card's
medians are.

The distribution functions these need (Student's t, the normal quantile, the F tail,
trigamma) are in `bench.distributions`.

Verdict statistics (see docs/verdicts.md for the assumptions):
  - `welch_log`: Welch's unequal-variance t-test on the logarithms of per-trial values,
    i.e. on the ratio B/A; assumes independent trials whose log values are roughly
    normal (multiplicative run-to-run noise), not equal variances.
  - `benjamini_hochberg`: the step-up procedure controlling the false-discovery rate over
    all cells x figures of a matrix (valid under independence or positive dependence).
  - `mde_pct`: the smallest true change a two-sided test at level alpha detects with the
    given power, from the relative noise sd and the trials per side.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench.distributions import (
    binom_cdf,
    f_sf,
    nct_ncp_for_power,
    norm_ppf,
    t_cdf,
    t_quantile,
    trigamma,
)
from bench.results import Distribution, Estimate

# Two-sided 95 % Student t critical values by degrees of freedom (1..30); 1.96 beyond.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


# exp() of a log ratio beyond this overflows a float. No two real figures are that far apart,
# but a hostile bundle's can be (1e-300 tok/s against 1e300): said as a huge %, not a crash.
_LOG_RATIO_LIMIT = 700.0


def pct_of_log(d: float) -> float:
    """A log ratio as a relative difference in %: (exp(d) - 1) x 100, d bounded."""
    return math.expm1(max(-_LOG_RATIO_LIMIT, min(_LOG_RATIO_LIMIT, d))) * 100.0


def percentile(values: Sequence[float], q: float) -> float:
    """q in [0, 100]; `values` need not be sorted; empty -> ValueError."""
    if not values:
        raise ValueError("percentile of an empty sample")
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def median(values: Sequence[float]) -> float:
    return percentile(values, 50.0)


def distribution(values: Sequence[float]) -> Distribution | None:
    if not values:
        return None
    s = sorted(values)
    return Distribution(
        n=len(s),
        mean=math.fsum(s) / len(s),
        p50=percentile(s, 50),
        p90=percentile(s, 90),
        p99=percentile(s, 99),
        min=s[0],
        max=s[-1],
    )


def estimate(values: Sequence[float]) -> Estimate:
    """Mean and the half-width of its 95 % confidence interval (Student t)."""
    n = len(values)
    if n == 0:
        raise ValueError("estimate of an empty sample")
    mean = math.fsum(values) / n
    if n < 2:
        return Estimate(mean=mean, ci95=None, n=n)
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.96
    return Estimate(mean=mean, ci95=t * math.sqrt(var / n), n=n)


def mean(xs: Sequence[float]) -> float:
    return math.fsum(xs) / len(xs)


def sample_variance(xs: Sequence[float]) -> float:
    m = mean(xs)
    return math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1)


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float


def mean_ci(xs: Sequence[float], level: float = 0.95) -> Interval:
    """Two-sided t interval of the mean; needs at least two values."""
    if len(xs) < 2:
        raise ValueError("a confidence interval needs at least two values")
    m = mean(xs)
    half = t_quantile(0.5 + level / 2.0, len(xs) - 1) * math.sqrt(sample_variance(xs) / len(xs))
    return Interval(m, m - half, m + half)


@dataclass(frozen=True)
class Welch:
    """Welch's unequal-variance t-test of mean(b) - mean(a)."""

    diff: float
    se: float
    df: float
    t: float
    p_value: float
    low: float
    high: float


def welch(a: Sequence[float], b: Sequence[float], level: float = 0.95) -> Welch:
    if len(a) < 2 or len(b) < 2:
        raise ValueError("Welch's test needs at least two values on each side")
    va, vb = sample_variance(a) / len(a), sample_variance(b) / len(b)
    diff = mean(b) - mean(a)
    se = math.sqrt(va + vb)
    if se == 0.0:
        # Identical repeats on both sides: the difference is exact.
        return Welch(
            diff,
            0.0,
            math.inf,
            math.copysign(math.inf, diff) if diff else 0.0,
            0.0 if diff else 1.0,
            diff,
            diff,
        )
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    t = diff / se
    p = 2.0 * (1.0 - t_cdf(abs(t), df))
    half = t_quantile(0.5 + level / 2.0, df) * se
    return Welch(diff, se, df, t, p, diff - half, diff + half)


@dataclass(frozen=True)
class Ratio:
    """B against A on the log scale: Δ % = (exp(diff) - 1) x 100 with its interval."""

    delta_pct: float
    low_pct: float
    high_pct: float
    p_value: float
    df: float
    sd_log_a: float
    sd_log_b: float


def welch_log(
    a: Sequence[float],
    b: Sequence[float],
    level: float = 0.95,
    pooled_sd: float | None = None,
    pooled_df: float = math.inf,
) -> Ratio:
    """Welch's t on log values: the relative change of B against A, its interval and p.

    With `pooled_sd` (a relative sd of one trial pooled over cells, `pooled_df` degrees of
    freedom), both sides use it instead of their own sample sd: a t-test on the pooled
    variance that still works with one trial a side.
    """
    la = [math.log(x) for x in a]
    lb = [math.log(x) for x in b]
    diff = mean(lb) - mean(la)
    if pooled_sd is not None:
        se = pooled_sd * math.sqrt(1.0 / len(la) + 1.0 / len(lb))
        sa = sb = pooled_sd
        df = pooled_df
    else:
        if len(la) < 2 or len(lb) < 2:
            raise ValueError("Welch's test needs at least two values on each side")
        va, vb = sample_variance(la), sample_variance(lb)
        sa, sb = math.sqrt(va), math.sqrt(vb)
        ea, eb = va / len(la), vb / len(lb)
        se = math.sqrt(ea + eb)
        df = (
            (ea + eb) ** 2 / (ea**2 / (len(la) - 1) + eb**2 / (len(lb) - 1)) if se > 0 else math.inf
        )
    if se == 0.0:
        p = 0.0 if diff else 1.0
        pct = pct_of_log(diff)
        return Ratio(pct, pct, pct, p, df, sa, sb)
    t = diff / se
    if math.isinf(df):
        z = abs(t)
        p = math.erfc(z / math.sqrt(2.0))
        half = norm_ppf(0.5 + level / 2.0) * se
    else:
        p = 2.0 * (1.0 - t_cdf(abs(t), df))
        half = t_quantile(0.5 + level / 2.0, df) * se
    return Ratio(
        pct_of_log(diff),
        pct_of_log(diff - half),
        pct_of_log(diff + half),
        p,
        df,
        sa,
        sb,
    )


def benjamini_hochberg(p_values: Sequence[float], q: float = 0.05) -> list[bool]:
    """Which hypotheses the Benjamini-Hochberg step-up procedure rejects at FDR q."""
    m = len(p_values)
    if m == 0:
        return []
    order = sorted(range(m), key=lambda i: p_values[i])
    cutoff = -1
    for rank, i in enumerate(order, start=1):
        if p_values[i] <= q * rank / m:
            cutoff = rank
    rejected = [False] * m
    for rank, i in enumerate(order, start=1):
        if rank <= cutoff:
            rejected[i] = True
    return rejected


def mde_pct(
    sd_log: float,
    n_a: int,
    n_b: int,
    *,
    alpha: float = 0.05,
    power: float = 0.80,
    df: float = math.inf,
) -> float:
    """Minimum detectable |Δ %| of a two-sided test at `alpha` with `power`, for a relative
    (log) sd of one trial of `sd_log` and n_a, n_b trials a side. With `df` finite, the
    shift is the noncentral t's: the true change, in standard errors, that a t-test with
    those degrees of freedom rejects with probability `power` (the usual t_(1-alpha/2) +
    t_power is short of it at few degrees of freedom: 4.16 against 4.26 at df 3)."""
    if math.isinf(df):
        z = norm_ppf(1.0 - alpha / 2.0) + norm_ppf(power)
    else:
        z = nct_ncp_for_power(alpha, power, df)
    return pct_of_log(z * sd_log * math.sqrt(1.0 / n_a + 1.0 / n_b))


def pooled_sd_log(groups: Sequence[Sequence[float]]) -> tuple[float, int] | None:
    """The relative sd of one trial pooled over groups (cells) of repeated values:
    sqrt(sum of squared log deviations / sum of (n - 1)), with its degrees of freedom."""
    ss = 0.0
    df = 0
    for g in groups:
        if len(g) < 2 or min(g) <= 0:
            continue
        logs = [math.log(x) for x in g]
        m = mean(logs)
        ss += math.fsum((x - m) ** 2 for x in logs)
        df += len(logs) - 1
    if df == 0:
        return None
    return math.sqrt(ss / df), df


@dataclass(frozen=True)
class PooledNoise:
    """A relative sd of one trial pooled over cells, and whether pooling is sound: no
    cell's variance differs from the others' by an F-test at 1 % (Bonferroni over cells)."""

    sd_log: float
    df: int
    sound: bool
    cells: int
    # Prior degrees of freedom of the cells' variances around the pooled one (empirical
    # Bayes, Smyth 2004): inf = the cells' variances are as alike as chance allows.
    prior_df: float = math.inf

    def moderated(self, ss: float, d: int) -> tuple[float, float]:
        """(sd, df) of one cell: its own sum of squared log deviations `ss` over `d`
        degrees of freedom shrunk towards the pooled variance with `prior_df` weight. A
        cell noisier than the rest keeps part of its own noise; with prior_df = inf this
        is the pooled sd with the pooled df."""
        if math.isinf(self.prior_df) or d <= 0:
            return self.sd_log, float(self.df)
        return pool_sd(self.sd_log, self.prior_df, ss, d)


def pool_sd(sd: float, df: float, ss: float, d: float) -> tuple[float, float]:
    """(sd, df) of a variance sd² known on df degrees of freedom and a sum of squared
    deviations ss on d more, weighed by their degrees of freedom: (df sd² + ss) / (df + d)."""
    return math.sqrt((df * sd**2 + ss) / (df + d)), df + d


def prior_df(groups: Sequence[Sequence[float]]) -> float:
    """Smyth's moment estimate of the prior degrees of freedom d0 of the groups' log sample
    variances: Var(log s²) = trigamma(d/2) + trigamma(d0/2); inf when the variances vary no
    more than d degrees of freedom alone explain. Groups of the most common size only."""
    sizes = [len(g) for g in groups if len(g) >= 2 and min(g) > 0]
    if len(sizes) < 3:
        return math.inf
    n = max(set(sizes), key=sizes.count)
    logs = []
    for g in groups:
        if len(g) != n or min(g) <= 0:
            continue
        v = sample_variance([math.log(x) for x in g])
        if v > 0:
            logs.append(math.log(v))
    if len(logs) < 3:
        return math.inf
    m = mean(logs)
    excess = math.fsum((x - m) ** 2 for x in logs) / (len(logs) - 1) - trigamma((n - 1) / 2.0)
    if excess <= 0:
        return math.inf
    lo, hi = 1e-3, 1e6
    if trigamma(hi / 2.0) > excess:
        return math.inf
    for _ in range(200):
        mid = math.sqrt(lo * hi)
        if trigamma(mid / 2.0) > excess:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def pooled_noise(groups: Sequence[Sequence[float]], alpha: float = 0.01) -> PooledNoise | None:
    found = pooled_sd_log(groups)
    if found is None:
        return None
    sd, df = found
    usable = [g for g in groups if len(g) >= 2 and min(g) > 0]
    sound = True
    if sd > 0 and len(usable) > 1:
        for g in usable:
            logs = [math.log(x) for x in g]
            d1 = len(logs) - 1
            rest = df - d1
            if rest <= 0:
                continue
            ss_g = sample_variance(logs) * d1
            var_rest = (sd * sd * df - ss_g) / rest
            if var_rest <= 0:
                sound = False
                break
            ratio = (ss_g / d1) / var_rest
            p = 2.0 * min(f_sf(ratio, d1, rest), 1.0 - f_sf(ratio, d1, rest))
            if p < alpha / len(usable):
                sound = False
                break
    return PooledNoise(sd, df, sound, len(usable), prior_df(groups))


def quantile_interval(
    values: Sequence[float], q: float, level: float = 0.95
) -> tuple[float, float] | None:
    """A distribution-free `level` interval for the q-quantile (q in (0, 1)) of the population
    `values` were drawn from: order statistics X(l) <= X(u) with equal binomial tails,
    P(l <= B < u) >= level for B ~ Binomial(n, q). None when n is too small for one (a p99
    needs about 370 values at 95 %): the point estimate stands alone then, said so."""
    n = len(values)
    if n < 2 or not 0.0 < q < 1.0:
        return None
    tail = (1.0 - level) / 2.0
    # l: the largest rank with P(B <= l - 1) <= tail;
    # u: the smallest with P(B <= u - 1) >= 1 - tail.
    lo = _rank_with_cdf(n, q, tail, below=True)
    hi = _rank_with_cdf(n, q, 1.0 - tail, below=False)
    if lo is None or hi is None or lo < 1 or hi > n:
        return None
    s = sorted(values)
    return s[lo - 1], s[hi - 1]


def _rank_with_cdf(n: int, q: float, target: float, *, below: bool) -> int | None:
    """Bisection on r in 0..n+1 over the monotone F(r - 1) = P(B <= r - 1)."""
    lo, hi = 0, n + 1
    if below:  # largest r with F(r-1) <= target
        if binom_cdf(-1, n, q) > target:
            return None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if binom_cdf(mid - 1, n, q) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo
    while lo < hi:  # smallest r with F(r-1) >= target
        mid = (lo + hi) // 2
        if binom_cdf(mid - 1, n, q) >= target:
            hi = mid
        else:
            lo = mid + 1
    return lo
