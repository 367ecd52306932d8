"""t distribution and Welch's test against values computed with SciPy 1.17 (pinned here)."""

from __future__ import annotations

import math

import pytest

from bench.stats import betainc, mean_ci, t_cdf, t_quantile, welch

T975 = {
    1: 12.706204736174694,
    2: 4.302652729749462,
    3: 3.1824463052837078,
    4: 2.7764451051977934,
    5: 2.5705818356363146,
    10: 2.228138851986274,
    30: 2.0422724563012378,
    1000: 1.9623390808264083,
    4.7: 2.62072607535317,
}


@pytest.mark.parametrize(("df", "expected"), sorted(T975.items()))
def test_t_quantile_matches_scipy(df: float, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, rel=1e-9)
    assert t_quantile(0.025, df) == pytest.approx(-expected, rel=1e-9)


def test_t_cdf_and_betainc_match_scipy() -> None:
    assert t_cdf(2.0, 5) == pytest.approx(0.9490302605850708, abs=1e-12)
    assert t_cdf(-1.3, 2.5) == pytest.approx(0.15024339463535416, abs=1e-12)
    assert t_cdf(0.0, 7) == 0.5
    assert betainc(2.5, 0.5, 0.3) == pytest.approx(0.018927124071945658, rel=1e-10)
    assert betainc(30, 40, 0.45) == pytest.approx(0.6447480085585666, rel=1e-10)
    with pytest.raises(ValueError):
        betainc(1, 1, 1.5)


def test_welch_matches_scipy() -> None:
    w = welch([1, 2, 3, 4, 5], [2, 4, 6, 8, 10])
    assert w.t == pytest.approx(1.8973665961010275, rel=1e-12)  # sign: b - a
    assert w.p_value == pytest.approx(0.10753119493062728, rel=1e-8)
    assert w.df == pytest.approx(6.25 / 1.0625, rel=1e-12)
    w = welch([10.1, 10.3, 9.9], [11.0, 11.4, 10.8])
    assert w.t == pytest.approx(4.585302607244159, rel=1e-10)
    assert w.p_value == pytest.approx(0.01429499366957761, rel=1e-8)
    assert w.low < w.diff < w.high and w.low > 0


def test_welch_with_no_spread_is_exact() -> None:
    same = welch([3.0, 3.0], [3.0, 3.0])
    assert (same.p_value, same.diff) == (1.0, 0.0)
    moved = welch([3.0, 3.0], [4.0, 4.0])
    assert (moved.p_value, moved.low, moved.high) == (0.0, 1.0, 1.0)
    assert math.isinf(moved.t)


def test_mean_ci_matches_scipy() -> None:
    ci = mean_ci([10.1, 10.3, 9.9])
    assert ci.low == pytest.approx(9.603172457649933, rel=1e-10)
    assert ci.high == pytest.approx(10.596827542350066, rel=1e-10)
    with pytest.raises(ValueError):
        mean_ci([1.0])
