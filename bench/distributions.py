"""The distribution functions of bench's statistics (`bench.stats`), with no third-party
dependency.

Student's t: the CDF goes through the regularized incomplete beta function, evaluated with
the continued fraction of Numerical Recipes §6.4 (modified Lentz); the quantile inverts
the CDF by bisection. Accuracy is ~1e-10; the tests pin values from SciPy. The noncentral
t's two-sided power integrates the normal tail over the chi-square of the variance estimate
(Simpson's rule on log chi-square, where the integrand is smooth for every df); the
noncentrality reaching a power inverts it by bisection. The normal quantile is Acklam's
rational approximation; the F distribution's upper tail goes through
the incomplete beta too; trigamma is what the empirical-Bayes prior of `bench.stats`
needs.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable

_EPS = 1e-15
_TINY = 1e-300


def _beta_fraction(a: float, b: float, x: float) -> float:
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > _TINY else _TINY)
    h = d
    for m in range(1, 1000):
        m2 = 2 * m
        for num in (
            m * (b - m) * x / ((qam + m2) * (a + m2)),
            -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)),
        ):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > _TINY else _TINY)
            c = 1.0 + num / c
            c = c if abs(c) > _TINY else _TINY
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            return h
    raise ArithmeticError(f"incomplete beta did not converge for a={a}, b={b}, x={x}")


def betainc(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if not (a > 0 and b > 0 and 0.0 <= x <= 1.0):
        raise ValueError(f"betainc needs a, b > 0 and 0 <= x <= 1, got {a}, {b}, {x}")
    if x in (0.0, 1.0):
        return x
    log_front = (
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    if df <= 0:
        raise ValueError(f"degrees of freedom must be positive, got {df}")
    tail = 0.5 * betainc(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t >= 0 else tail


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The t value below which a fraction p of the distribution lies."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile needs 0 < p < 1, got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def norm_ppf(p: float) -> float:
    """Standard normal quantile (Acklam's rational approximation, |error| < 1.2e-9)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"quantile needs 0 < p < 1, got {p}")
    a = (
        -3.969683028665376e01,
        2.209460984245205e02,
        -2.759285104469687e02,
        1.383577518672690e02,
        -3.066479806614716e01,
        2.506628277459239e00,
    )
    b = (
        -5.447609879822406e01,
        1.615858368580409e02,
        -1.556989798598866e02,
        6.680131188771972e01,
        -1.328068155288572e01,
    )
    c = (
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e00,
        -2.549732539343734e00,
        4.374664141464968e00,
        2.938163982698783e00,
    )
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00,
         3.754408661907416e00)  # fmt: skip
    low = 0.02425
    if p < low:
        q = math.sqrt(-2.0 * math.log(p))
        num = ((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]
        return num / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0)
    if p > 1.0 - low:
        return -norm_ppf(1.0 - p)
    q = p - 0.5
    r = q * q
    num = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q
    return num / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0)


def f_sf(x: float, d1: float, d2: float) -> float:
    """Upper tail P(F > x) of the F distribution with (d1, d2) degrees of freedom."""
    if x <= 0:
        return 1.0
    return betainc(d2 / 2.0, d1 / 2.0, d2 / (d2 + d1 * x))


def trigamma(x: float) -> float:
    """d²/dx² log Γ(x) for x > 0 (recurrence to x >= 6, then the asymptotic series)."""
    out = 0.0
    while x < 6.0:
        out += 1.0 / (x * x)
        x += 1.0
    ix = 1.0 / x
    ix2 = ix * ix
    series = (
        ix
        + ix2 / 2.0
        + ix * ix2 * (1.0 / 6.0 - ix2 * (1.0 / 30.0 - ix2 * (1.0 / 42.0 - ix2 / 30.0)))
    )
    return out + series


_CUT = 32.0  # the log density's drop from its peak where the integration stops


@functools.lru_cache(maxsize=256)
def _chi_nodes(df: float) -> tuple[tuple[float, float], ...]:
    """(sqrt(V / df), weight) over V ~ chi-square(df): Simpson nodes on y = ln V, whose
    density exp(df / 2 y - e^y / 2) / (2^(df/2) Gamma(df / 2)) is smooth for every df,
    between the two points where it has fallen by e^-_CUT from its peak at ln df."""
    norm = (df / 2.0) * math.log(2.0) + math.lgamma(df / 2.0)

    def log_density(y: float) -> float:
        return (df / 2.0) * y - math.exp(y) / 2.0 - norm

    peak = math.log(df)
    floor = log_density(peak) - _CUT

    def edge(step: float) -> float:
        near, far = peak, peak + step
        while log_density(far) > floor:
            near, far = far, far + 2.0 * (far - near)
        for _ in range(60):
            mid = (near + far) / 2.0
            near, far = (mid, far) if log_density(mid) > floor else (near, mid)
        return far

    spread = math.sqrt(2.0 / df)
    lo, hi = edge(-spread), edge(spread)
    nodes = 512 if df < 2 else 256 if df < 8 else 128  # few df: a long, linear left tail
    h = (hi - lo) / nodes
    out = []
    for i in range(nodes + 1):
        y = lo + i * h
        w = (1 if i in (0, nodes) else 4 if i % 2 else 2) * h / 3.0
        weight = w * math.exp(log_density(y))
        if weight > 1e-15:  # the rest adds nothing a power needs
            out.append((math.exp((y - peak) / 2.0), weight))
    return tuple(out)


def _phi(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def nct_power(ncp: float, crit: float, df: float) -> float:
    """P(|T| > crit) for T noncentral t with df degrees of freedom and noncentrality ncp:
    T = (Z + ncp) / sqrt(V / df), so P(T > c) = E[Phi(ncp - c sqrt(V / df))]."""
    if math.isinf(df):
        return _phi(ncp - crit) + _phi(-ncp - crit)
    r = 1.0 / math.sqrt(2.0)
    erfc = math.erfc
    return 0.5 * sum(
        w * (erfc((crit * s - ncp) * r) + erfc((crit * s + ncp) * r)) for s, w in _chi_nodes(df)
    )


@functools.lru_cache(maxsize=4096)
def nct_ncp_for_power(alpha: float, power: float, df: float) -> float:
    """The noncentrality at which a two-sided t-test at `alpha` (df degrees of freedom)
    rejects with probability `power`: the true shift, in standard errors, detected that
    often (normal quantiles when df is infinite)."""
    if not (0.0 < alpha < 1.0 and 0.0 < power < 1.0):
        raise ValueError(f"needs 0 < alpha, power < 1, got {alpha}, {power}")
    crit = norm_ppf(1.0 - alpha / 2.0) if math.isinf(df) else t_quantile(1.0 - alpha / 2.0, df)
    # Illinois (regula falsi) on power(ncp) - power, from a bracket: at ncp 0 the power is
    # alpha, below any power asked for.
    lo, f_lo = 0.0, alpha - power
    hi = crit + norm_ppf(max(power, 0.5)) + 0.5
    f_hi = nct_power(hi, crit, df) - power
    while f_hi < 0:
        lo, f_lo = hi, f_hi
        hi *= 2.0
        f_hi = nct_power(hi, crit, df) - power
    side = 0
    for _ in range(100):
        mid = (lo * f_hi - hi * f_lo) / (f_hi - f_lo)
        f_mid = nct_power(mid, crit, df) - power
        if abs(f_mid) < 1e-9 or hi - lo < 1e-9 * max(1.0, hi):
            return mid
        if (f_mid < 0) == (f_lo < 0):
            lo, f_lo = mid, f_mid
            if side == -1:
                f_hi /= 2.0
            side = -1
        else:
            hi, f_hi = mid, f_mid
            if side == 1:
                f_lo /= 2.0
            side = 1
    return (lo + hi) / 2.0


def binom_cdf(k: int, n: int, p: float) -> float:
    """P(X <= k) for X ~ Binomial(n, p), summed exactly in log space over the shorter tail
    (MLPerf's early stopping and the order-statistic intervals of `bench.stats` need it
    for n up to a million, k anywhere in 0..n)."""
    if n < 0 or not 0.0 <= p <= 1.0:
        raise ValueError(f"binom_cdf needs n >= 0 and 0 <= p <= 1, got n={n}, p={p}")
    if k < 0:
        return 0.0
    if k >= n:
        return 1.0
    if p in (0.0, 1.0):
        return 1.0 if p == 0.0 else 0.0
    lp, lq = math.log(p), math.log1p(-p)
    log_n = math.lgamma(n + 1)

    def term(i: int) -> float:
        return math.exp(log_n - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * lp + (n - i) * lq)

    # Terms beyond 40 standard deviations from the mean are below e^-800: each tail is summed
    # over the part of it inside that window only (O(sqrt n) terms, not O(n)).
    mean, sd = n * p, math.sqrt(n * p * (1.0 - p))
    lo, hi = max(0, math.floor(mean - 40 * sd - 1)), min(n, math.ceil(mean + 40 * sd + 1))
    if k < mean:  # the lower tail is the small one: summed directly
        return min(1.0, math.fsum(term(i) for i in range(max(lo, 0), k + 1)))
    return max(0.0, 1.0 - math.fsum(term(i) for i in range(k + 1, hi + 1)))


def first_true(holds: Callable[[int], bool], lo: int, hi: int) -> int:
    """The smallest n in (lo, hi] for which HOLDS, a predicate false up to some n and true
    from it on, given true at hi (bisection)."""
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if holds(mid):
            hi = mid
        else:
            lo = mid
    return hi
