"""Order statistics and trial estimates, with no third-party dependency.

Percentiles interpolate linearly between order statistics (numpy's default), so a
median of an even sample is the mean of the middle two, as the card's medians are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from bench.results import Distribution, Estimate

# Two-sided 95 % Student t critical values by degrees of freedom (1..30); 1.96 beyond.
_T95 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


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
