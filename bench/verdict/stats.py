"""Student's t distribution, Welch's t-test and confidence intervals, without SciPy.

The t CDF goes through the regularized incomplete beta function, evaluated with the
continued fraction of Numerical Recipes §6.4 (modified Lentz); the quantile inverts the
CDF by bisection, which is monotone and needs no derivative. Accuracy is ~1e-10, far
below what a benchmark verdict needs; the tests pin values from SciPy.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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
