"""t distribution and Welch's test against values computed with SciPy 1.17 (pinned here)."""

from __future__ import annotations

import math

import pytest

from bench.distributions import betainc, t_cdf, t_quantile
from bench.stats import mean_ci, welch

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
    with pytest.raises(ValueError, match="betainc needs"):
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
    with pytest.raises(ValueError, match="at least two values"):
        mean_ci([1.0])


def test_norm_ppf_matches_known_quantiles() -> None:
    from bench.distributions import norm_ppf

    assert abs(norm_ppf(0.975) - 1.959963985) < 1e-7
    assert abs(norm_ppf(0.8) - 0.841621234) < 1e-7
    assert abs(norm_ppf(0.001) + 3.090232306) < 1e-7


def test_benjamini_hochberg_step_up() -> None:
    from bench.stats import benjamini_hochberg

    # m = 5, q = 0.05: thresholds 0.01 0.02 0.03 0.04 0.05; the largest rank under its
    # threshold is 3 (0.029 <= 0.03), so the three smallest are rejected.
    p = [0.029, 0.001, 0.2, 0.015, 0.049]
    assert benjamini_hochberg(p, 0.05) == [True, True, False, True, False]
    assert benjamini_hochberg([0.5] * 10, 0.05) == [False] * 10
    assert benjamini_hochberg([], 0.05) == []


def test_welch_log_is_a_test_of_the_ratio() -> None:
    from bench.stats import welch, welch_log

    a, b = [100.0, 101.0, 99.0], [110.0, 111.1, 108.9]
    r = welch_log(a, b)
    assert 9.5 < r.delta_pct < 10.5 and r.low_pct < r.delta_pct < r.high_pct
    # Scale-free: the same ratio at another scale gives the same p.
    assert abs(welch_log([x * 7 for x in a], [x * 7 for x in b]).p_value - r.p_value) < 1e-12
    # On logs of values close together it agrees with Welch on the values.
    assert abs(r.p_value - welch(a, b).p_value) < 0.01
    pooled = welch_log([100.0], [110.0], pooled_sd=0.01, pooled_df=100)
    assert pooled.p_value < 1e-6 and pooled.df == 100


def test_mde_at_80_percent_power() -> None:
    from bench.stats import mde_pct

    # (1.96 + 0.8416) x 1 % x sqrt(2 / 3) = 2.29 %  (as a ratio: exp(..) - 1)
    assert abs(mde_pct(0.01, 3, 3) - 2.314) < 0.01
    assert mde_pct(0.01, 5, 5) < mde_pct(0.01, 3, 3) < mde_pct(0.01, 1, 1)


def test_pooled_noise_says_when_pooling_is_unsound() -> None:
    from bench.stats import pooled_noise

    even = [[100.0, 101.0, 99.0], [50.0, 50.5, 49.5], [10.0, 10.1, 9.9]]
    p = pooled_noise(even)
    assert p is not None and p.sound and p.df == 6 and abs(p.sd_log - 0.01) < 1e-3
    uneven = [*even * 5, [100.0, 130.0, 70.0]]
    q = pooled_noise(uneven)
    assert q is not None and not q.sound


def test_trigamma_and_the_prior_df_of_cell_variances() -> None:
    import math
    import random

    from bench.distributions import trigamma
    from bench.stats import prior_df

    assert abs(trigamma(1.0) - math.pi**2 / 6) < 1e-9
    assert abs(trigamma(0.5) - math.pi**2 / 2) < 1e-9
    rng = random.Random(1)
    alike = [[math.exp(rng.gauss(0, 0.01)) for _ in range(3)] for _ in range(200)]
    assert prior_df(alike) > 20  # variances differ by chance alone: shrink hard
    mixed = [
        [math.exp(rng.gauss(0, 0.01 if i % 2 else 0.05)) for _ in range(3)] for i in range(200)
    ]
    assert prior_df(mixed) < 10  # some cells are truly noisier: keep their own noise


def test_a_noisier_cell_keeps_its_own_noise_when_pooled() -> None:
    # Live twin, make compare-twin base-2 vs base-3: TTFT of 16K x 1 spread ~9 % over three
    # trials on one side while the pooled TTFT noise was 1.8 %; pooled alone flagged it.
    from bench.stats import PooledNoise
    from bench.verdict.cells import BY_NAME, Cell
    from bench.verdict.compare import Policy, figure_delta

    a = Cell("decode", "16K", 1, "valid", trials={"ttft_s": (0.4421, 0.4669, 0.4840)})
    b = Cell("decode", "16K", 1, "valid", trials={"ttft_s": (0.4366, 0.4414, 0.4427)})
    metric = BY_NAME["ttft_s"]
    hard = PooledNoise(0.0177, 60, True, 30)
    p_hard = figure_delta(metric, a, b, Policy(), pooled=hard, tests=64).p_value
    moderated = PooledNoise(0.0177, 60, True, 30, prior_df=1.8)
    p_mod = figure_delta(metric, a, b, Policy(), pooled=moderated, tests=64).p_value
    assert p_hard is not None and p_mod is not None
    assert p_hard < Policy().alpha / 64 < p_mod  # BH's level for one change among 64


@pytest.mark.parametrize("df", [1.0, 3.0, 10.0, 57.5])
def test_noncentral_t_power_at_no_shift_is_the_level(df: float) -> None:
    from bench.distributions import nct_power

    # With ncp 0 the noncentral t is Student's t: P(|T| > t_(1 - a/2)) = a.
    for alpha in (0.05, 0.00125):
        crit = t_quantile(1.0 - alpha / 2.0, df)
        assert nct_power(0.0, crit, df) == pytest.approx(alpha, rel=1e-6)


def test_noncentral_t_power_agrees_with_a_simulation() -> None:
    import math
    import random

    from bench.distributions import nct_ncp_for_power, nct_power

    df, alpha = 3.0, 0.025
    crit = t_quantile(1.0 - alpha / 2.0, df)
    ncp = nct_ncp_for_power(alpha, 0.8, df)
    assert nct_power(ncp, crit, df) == pytest.approx(0.8, abs=1e-6)
    rng = random.Random(5)
    draws = 100_000
    hits = sum(
        abs((rng.gauss(0.0, 1.0) + ncp) / math.sqrt(rng.gammavariate(df / 2.0, 2.0) / df)) > crit
        for _ in range(draws)
    )
    assert hits / draws == pytest.approx(0.8, abs=0.006)  # 4.7 sd of 100,000 draws
    # The textbook shortcut t_(1-a/2) + t_power falls short at few degrees of freedom.
    assert ncp > crit + t_quantile(0.8, df) + 0.1


def test_mde_with_degrees_of_freedom_is_the_noncentral_t_shift() -> None:
    import math

    from bench.distributions import nct_ncp_for_power
    from bench.stats import mde_pct

    ncp = nct_ncp_for_power(0.05, 0.8, 4.0)
    assert mde_pct(0.1, 3, 3, df=4.0) == pytest.approx(
        math.expm1(ncp * 0.1 * math.sqrt(2 / 3)) * 100
    )
    assert mde_pct(0.1, 3, 3, df=4.0) > mde_pct(0.1, 3, 3, df=40.0) > mde_pct(0.1, 3, 3)
