"""A point's schedule (bench.workload.schedule): the length rules' exact ranges, the arrival
gaps' distributions, and the same seed giving the same plan value for value."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable
from typing import Any

import pytest

from bench.workload.schedule import draw_lengths, gaps, length_bounds, plan_point
from bench.workload_spec import LengthRule, Lengths, Process, Workload


def _workload(**arrivals: Any) -> Workload:
    spec: dict[str, Any] = {"name": "sched", "seed": 7, "arrivals": {"rates": [4.0], **arrivals}}
    return Workload.model_validate(spec)


@pytest.mark.parametrize(
    ("nominal", "ratio", "rule", "expected"),
    [
        (1000, 0.0, "vllm", (1000, 1000)),  # r = 0: exactly L
        (1000, 0.5, "vllm", (500, 1500)),
        (1000, 0.999, "vllm", (1, 1999)),  # r near 1: floor(1.000...) = 1
        (100, 0.999, "vllm", (1, 200)),  # floor(0.1) = 0 -> at least 1; ceil(199.9) = 200
        (7, 0.25, "vllm", (5, 9)),  # floor(5.25) = 5, ceil(8.75) = 9
        (1, 0.0, "vllm", (1, 1)),
        (1, 0.5, "vllm", (1, 2)),  # floor(0.5) = 0 -> 1
        (1000, 0.0, "sglang", (1, 1000)),  # r = 0: the whole [1, L] (sglang's rule)
        (1000, 0.5, "sglang", (500, 1000)),
        (1000, 1.0, "sglang", (1000, 1000)),  # r = 1: exactly L
        (1000, 0.999, "sglang", (999, 1000)),
        (7, 0.5, "sglang", (3, 7)),  # int(3.5) = 3
        (1, 0.5, "sglang", (1, 1)),
        (1, 0.0, "sglang", (1, 1)),
    ],
)
def test_each_length_rule_gives_its_exact_range(
    nominal: int, ratio: float, rule: str, expected: tuple[int, int]
) -> None:
    """A wrong bound means the lengths drawn are not the publisher's client's (a run would
    offer other traffic than the one it claims to reproduce), or a 0-token request."""
    assert length_bounds(nominal, ratio, rule) == expected


@pytest.mark.parametrize(
    ("rule", "ratio", "in_range", "out_range"),
    [("vllm", 0.5, (50, 150), (5, 15)), ("sglang", 0.5, (50, 100), (5, 10))],
)
def test_drawn_lengths_stay_inside_and_reach_both_ends(
    rule: LengthRule, ratio: float, in_range: tuple[int, int], out_range: tuple[int, int]
) -> None:
    """Every draw inside the rule's range, and both ends drawn: an off-by-one (randint's
    inclusive end taken as exclusive) would miss an end or step past it."""
    lengths = Lengths(input_tokens=100, output_tokens=10, range_ratio=ratio, semantics=rule)
    pairs = draw_lengths(lengths, 5000, random.Random(1))
    ins = [i for i, _ in pairs]
    outs = [o for _, o in pairs]
    assert (min(ins), max(ins)) == in_range
    assert (min(outs), max(outs)) == out_range


def test_constant_gaps_are_exactly_one_over_the_rate() -> None:
    assert gaps("constant", 4.0, 1.0, 6, random.Random(0)) == [0.25] * 5
    assert gaps("constant", 3.0, 1.0, 1, random.Random(0)) == []


def _mean_cv(values: list[float]) -> tuple[float, float]:
    mean = statistics.fmean(values)
    return mean, statistics.pstdev(values) / mean


@pytest.mark.parametrize(
    ("process", "burstiness"), [("poisson", 1.0), ("gamma", 0.25), ("gamma", 1.0), ("gamma", 4.0)]
)
def test_random_gaps_have_mean_one_over_the_rate_and_the_gamma_spread(
    process: Process, burstiness: float
) -> None:
    """Mean 1/R within 5 % and CV 1/sqrt(b) within 6 % over 40,000 seeded gaps (standard
    errors: under 1.5 % and 1.2 %). Gamma's scale taken as R b (mean b^2 R instead of 1/R)
    or its shape as 1/b (mean 1/(R b^2), CV sqrt(b)) fails here."""
    rate = 5.0
    drawn = gaps(process, rate, burstiness, 40_001, random.Random(f"gaps/{process}/{burstiness}"))
    assert len(drawn) == 40_000
    assert min(drawn) >= 0.0
    mean, cv = _mean_cv(drawn)
    assert mean == pytest.approx(1.0 / rate, rel=0.05)
    assert cv == pytest.approx(1.0 / math.sqrt(burstiness), rel=0.06)


def ks_statistic(values: list[float], cdf: Callable[[float], float]) -> float:
    """Kolmogorov-Smirnov D: the largest gap between the sample's step CDF and `cdf`."""
    xs = sorted(values)
    n = len(xs)
    return max(max((i + 1) / n - cdf(x), cdf(x) - i / n) for i, x in enumerate(xs))


def test_the_ks_statistic_is_zero_on_a_perfect_sample_and_large_on_a_shifted_one() -> None:
    """The helper itself: quantile midpoints of U(0, 1) give D = 1/(2n); half of it shifted
    past 1 gives D = 1/2."""
    n = 100
    uniform = [(i + 0.5) / n for i in range(n)]
    assert ks_statistic(uniform, lambda x: min(max(x, 0.0), 1.0)) == pytest.approx(0.5 / n)
    assert ks_statistic([x / 2 for x in uniform], lambda x: min(max(x, 0.0), 1.0)) == (
        pytest.approx(0.5, abs=0.01)
    )


def test_poisson_gaps_pass_a_kolmogorov_smirnov_test_against_the_exponential() -> None:
    """D below the 1 % critical value 1.628/sqrt(n). Gaps of the wrong rate (expovariate
    given 1/R, or a mean of 1/(2R)) give a D many times larger, checked too."""
    rate, n = 4.0, 5000
    drawn = gaps("poisson", rate, 1.0, n + 1, random.Random("ks"))
    critical = 1.628 / math.sqrt(n)
    assert ks_statistic(drawn, lambda x: 1.0 - math.exp(-rate * x)) < critical
    assert ks_statistic(drawn, lambda x: 1.0 - math.exp(-2 * rate * x)) > 5 * critical


def test_an_infinite_rate_sends_every_request_at_zero() -> None:
    for process in ("constant", "poisson", "gamma"):
        plan = plan_point(_workload(rates=[math.inf], process=process, requests=50), 0)
        assert [p.at_s for p in plan] == [0.0] * 50


def test_a_rate_plan_starts_at_zero_and_never_goes_back() -> None:
    plan = plan_point(_workload(process="gamma", burstiness=0.5, requests=300), 0)
    times = [p.at_s for p in plan]
    assert times[0] == 0.0
    assert times == sorted(times)
    assert [p.index for p in plan] == list(range(300))


def test_the_same_seed_gives_the_same_plan_byte_for_byte() -> None:
    """A and B of a compare must see identical traffic: two plans of the same workload, point
    and trial are equal down to the last digit of every float."""
    w = _workload(rates=[2.0, 8.0], process="gamma", burstiness=0.5, requests=200, warmups=20)
    for point in (0, 1):
        for warmup in (False, True):
            first = repr(plan_point(w, point, 1, warmup=warmup))
            again = repr(plan_point(w.model_copy(), point, 1, warmup=warmup))
            assert first == again


def test_a_plan_is_pinned_across_versions() -> None:
    """The first requests of a small plan, as bench drew them when this test was written. A
    change here means a bench (or Python) upgrade sends other traffic for the same seed:
    results measured before and after are then not of the same workload."""
    w = Workload.model_validate(
        {
            "name": "pinned",
            "seed": 42,
            "arrivals": {"rates": [10.0], "process": "poisson", "requests": 3},
            "lengths": {"input_tokens": 100, "output_tokens": 20, "range_ratio": 0.5},
        }
    )
    got = [(p.at_s, p.input_tokens, p.output_tokens) for p in plan_point(w, 0)]
    assert got == PINNED_PLAN


PINNED_PLAN = [(0.0, 67, 25), (0.3497123379369284, 133, 25), (0.3540287309753199, 70, 22)]


def test_another_seed_point_or_trial_changes_the_plan() -> None:
    """Each point, trial and seed draws its own schedule: were the seed text to leave one
    out, trials would repeat each other (their spread would read as zero)."""
    w = _workload(rates=[4.0, 4.0], requests=100)
    base = repr(plan_point(w, 0))
    other_seed = w.model_copy(update={"seed": 8})
    assert repr(plan_point(other_seed, 0)) != base
    assert repr(plan_point(w, 1)) != base  # same rate, another point
    assert repr(plan_point(w, 0, trial=1)) != base


def test_warm_up_plans_send_at_once_with_their_own_count() -> None:
    """Rate warm-ups: `warmups` requests, all at 0. Closed-count: C x warmups_per_stream
    warm-ups and C x requests_per_stream measured, all at 0; groups follow group_size."""
    w = _workload(requests=40, warmups=5)
    warm = plan_point(w, 0, warmup=True)
    assert len(warm) == 5 and all(p.at_s == 0.0 for p in warm)
    closed = Workload.model_validate(
        {
            "name": "closed",
            "arrivals": {
                "kind": "closed-count",
                "concurrencies": [2, 8],
                "requests_per_stream": 10,
                "warmups_per_stream": 2,
            },
            "prefix": {"tokens": 8, "group_size": 4},
        }
    )
    assert len(plan_point(closed, 1, warmup=True)) == 16
    measured = plan_point(closed, 1)
    assert len(measured) == 80 and {p.at_s for p in measured} == {0.0}
    assert [p.group for p in measured[:9]] == [0, 0, 0, 0, 1, 1, 1, 1, 2]
