"""The binomial CDF (bench.distributions.binom_cdf) against exact sums, and the
distribution-free quantile interval built on it (bench.stats.quantile_interval)."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction

import pytest

from bench.distributions import binom_cdf
from bench.stats import quantile_interval


def exact_binom_cdf(k: int, n: int, p: float) -> Fraction:
    """P(X <= k), X ~ Binomial(n, p), in exact rationals (p taken as the float it is)."""
    pf = Fraction(p)
    return sum(
        (math.comb(n, i) * pf**i * (1 - pf) ** (n - i) for i in range(max(k + 1, 0))),
        Fraction(0),
    )


@pytest.mark.parametrize("p", [0.01, 0.1, 0.3, 0.5, 0.77, 0.99])
@pytest.mark.parametrize("n", [1, 2, 7, 30, 60])
def test_binom_cdf_matches_the_exact_sum(n: int, p: float) -> None:
    """Both tails (the sum switches at k = n p) agree with the exact value to 1e-9 relative:
    a wrong tail, an off-by-one in k or a lost term would be far off."""
    for k in range(-1, n + 2):
        want = float(exact_binom_cdf(min(k, n), n, p))
        assert binom_cdf(k, n, p) == pytest.approx(want, rel=1e-9, abs=1e-15), (k, n, p)


@pytest.mark.parametrize(("n", "p"), [(60, 0.3), (1000, 0.01), (800, 0.5), (400, 0.99)])
def test_binom_cdf_rises_with_k_from_0_to_1(n: int, p: float) -> None:
    """Monotone in k, across the switch between the two tails too: a step back there would
    make the bisections of `quantile_interval` and `more_needed` land anywhere."""
    values = [binom_cdf(k, n, p) for k in range(-1, n + 1)]
    assert values[0] == 0.0 and values[-1] == 1.0
    assert all(a <= b for a, b in itertools.pairwise(values))


def test_binom_cdf_edges() -> None:
    assert binom_cdf(0, 10, 0.0) == 1.0
    assert binom_cdf(9, 10, 1.0) == 0.0
    assert binom_cdf(0, 0, 0.5) == 1.0
    with pytest.raises(ValueError, match="binom_cdf needs"):
        binom_cdf(1, 10, 1.5)


def test_a_p99_interval_needs_enough_values() -> None:
    """At 95 % a p99 needs 0.99^n <= 2.5 %: n >= 368. With 200 values there is none (the
    largest value is not an upper bound at 95 %); with 1000 there is one."""
    assert quantile_interval([float(i) for i in range(200)], 0.99) is None
    assert quantile_interval([float(i) for i in range(367)], 0.99) is None
    assert quantile_interval([float(i) for i in range(368)], 0.99) == (359.0, 367.0)
    got = quantile_interval([float(i) for i in range(1000)], 0.99)
    assert got is not None and got[0] <= 989.0 <= got[1] <= 999.0
    assert quantile_interval([1.0], 0.5) is None
    assert quantile_interval([1.0, 2.0, 3.0], 1.0) is None


@pytest.mark.parametrize("n", [50, 300, 1000])
@pytest.mark.parametrize("q", [0.5, 0.9, 0.99])
def test_the_ranks_are_the_equal_tailed_ones(n: int, q: float) -> None:
    """On values 0..n-1 the interval is the ranks (l - 1, u - 1): l the largest rank with
    P(B <= l - 1) <= 2.5 %, u the smallest with P(B <= u - 1) >= 97.5 %, B ~ Bin(n, q)."""
    got = quantile_interval([float(i) for i in range(n)], q)
    if got is None:
        assert q**n > 0.025  # P(B = n) above the tail: no rank u <= n
        return
    lo, hi = int(got[0]) + 1, int(got[1]) + 1
    assert binom_cdf(lo - 1, n, q) <= 0.025 < binom_cdf(lo, n, q)
    assert binom_cdf(hi - 2, n, q) < 0.975 <= binom_cdf(hi - 1, n, q)


@pytest.mark.parametrize("q", [0.5, 0.9])
def test_a_95_percent_interval_covers_the_true_quantile_about_95_percent_of_the_time(
    q: float,
) -> None:
    """400 seeded samples of 300 uniform values: the true q-quantile of U(0, 1) is q, and the
    interval holds it in 92-99 % of them (95 % +- 3 standard errors of 1.1 %)."""
    rng = random.Random(f"coverage/{q}")
    trials = 400
    covered = 0
    for _ in range(trials):
        got = quantile_interval([rng.random() for _ in range(300)], q)
        assert got is not None
        covered += got[0] <= q <= got[1]
    assert 0.92 <= covered / trials <= 0.99
