"""The twin's open-loop truth in virtual time (bench.twin.openloop, bench.twin.capacity):
no sockets, no sleeps."""

from __future__ import annotations

import pytest

from bench.twin import profile, virtual
from bench.twin.capacity import capacity_truth
from bench.twin.engine import TwinScheduler
from bench.twin.openloop import (
    measured_stream,
    point_truth,
    poisson_arrivals,
    prompt,
    simulate,
    slower_decode,
)

TINY = profile.load("tiny")
IN, OUT = 256, 64
BOUNDS = {"ttft": 0.5, "tpot": 0.05}


def point(rate: float, requests: int, seed: int) -> dict[str, float]:
    stream = measured_stream(
        TINY, rate, requests=requests, input_tokens=IN, output_tokens=OUT, seed=seed
    )
    return point_truth(*stream)


def capacity(
    p: profile.Profile, bounds: dict[str, float], requests: int, seeds: tuple[int, ...]
) -> float:
    return capacity_truth(
        p, bounds, input_tokens=IN, output_tokens=OUT, requests_per_point=requests, seeds=seeds
    )


def test_a_low_rate_sees_the_profiles_unloaded_costs() -> None:
    pt = point(0.2, 200, 0)
    prefill = (
        TINY.frontend_seconds(IN, 1)
        + TINY.request_overhead_seconds(IN)
        + IN * TINY.prefill_seconds_per_token(IN)
    )
    assert pt["ttft_p50"] == pytest.approx(prefill, rel=0.01)
    # One request decoding alone, at its mean context, MTP's mean tokens per step.
    step = TINY.decode_step_seconds(1, IN + OUT / 2) / TINY.mean_tokens_per_step
    assert pt["tpot_p50"] == pytest.approx(step, rel=0.08)
    assert pt["throughput_rps"] == pytest.approx(0.2, rel=0.1)


def test_one_request_is_the_virtual_twins_request_and_speed_divides_times() -> None:
    """The frontend's delays are the server's: a frontend with a cost gives the same end
    as `virtual.request_s`, which drives the same `Frontend` as the HTTP twin."""
    p = TINY.model_copy(update={"frontend_s": [[0.01, 0.04], [0.02, 0.05]]})
    [one] = simulate(p, [(0.0, IN, OUT)])
    assert one.e2el == virtual.request_s(TwinScheduler(p, 0), prompt(0, IN), OUT)
    assert one.tokens == OUT
    burst = simulate(p, [(0.0, IN, 8)] * 3)
    assert [r.ttft for r in burst] == sorted(r.ttft for r in burst)
    # A burst of C leaves the serialized worker at f(1) + k f(C) (bench/twin/README.md).
    prefill = p.request_overhead_seconds(IN) + IN * p.prefill_seconds_per_token(IN)
    f1, f3 = p.frontend_seconds(IN, 1), p.frontend_seconds(IN, 3)
    assert burst[0].ttft == pytest.approx(f1 + prefill)
    assert burst[2].ttft >= f1 + 2 * f3 + prefill
    fast = simulate(p, [(0.0, IN, 8)] * 3, speed=10.0)
    assert [r.e2el for r in fast] == pytest.approx([r.e2el / 10 for r in burst])


def test_prompts_are_unique_unless_a_prefix_is_shared() -> None:
    spaced = [(float(i), IN, 4) for i in range(8)]  # one at a time on an idle engine
    unique = simulate(TINY, spaced)
    assert len({round(r.ttft, 9) for r in unique}) == 1
    shared = simulate(TINY, spaced, prefix_tokens=192, group_size=4)
    firsts, others = shared[0::4], [r for i, r in enumerate(shared) if i % 4]
    assert all(r.ttft == pytest.approx(unique[0].ttft) for r in firsts)
    assert all(r.ttft < 0.6 * unique[0].ttft for r in others)


def test_ttft_grows_with_rate() -> None:
    p99 = [point(r, 500, 0)["ttft_p99"] for r in (1, 4, 8)]
    assert p99 == sorted(p99) and p99[2] > 2 * p99[0]


def test_above_the_ceiling_the_queue_grows_without_bound() -> None:
    half = point(40.0, 750, 0)
    full = point(40.0, 1500, 0)
    assert full["throughput_rps"] < 0.5 * 40.0
    assert full["backlog_end"] > 0.5 * 1500  # of 1,800 sent, most still queued
    assert full["backlog_end"] > 1.8 * half["backlog_end"]  # twice as long, twice as deep
    assert full["ttft_p50"] > 1.5 * half["ttft_p50"] > 1.0  # the wait grows with time


def test_capacity_lies_between_a_rate_that_meets_and_one_that_misses() -> None:
    cap = capacity(TINY, BOUNDS, 500, (0, 1))
    assert 1.0 < cap < 40.0
    for seed in (0, 1):
        below = point(0.75 * cap, 1000, seed)
        above = point(1.4 * cap, 1000, seed)
        assert below["ttft_p99"] <= 0.5 and below["tpot_p99"] <= 0.05
        assert above["ttft_p99"] > 0.5


def test_a_slower_decode_has_a_lower_capacity_where_tpot_binds() -> None:
    slow = slower_decode(TINY, 1.10)
    assert slow.decode_step_seconds(5, 300) == pytest.approx(
        1.10 * TINY.decode_step_seconds(5, 300)
    )
    assert slow.prefill_s_per_token == TINY.prefill_s_per_token
    assert slow.frontend_s == TINY.frontend_s
    base = capacity(TINY, {"tpot": 0.01}, 500, (0, 1))
    slower = capacity(slow, {"tpot": 0.01}, 500, (0, 1))
    # TPOT's p99 rises slowly with the rate, so 10 % on it costs 10 % or more of the rate.
    assert 0.6 * base < slower < base / 1.05


def test_same_seed_same_numbers() -> None:
    arrivals = poisson_arrivals(6.0, 300, IN, OUT, seed=3)
    assert simulate(TINY, arrivals, seed=3) == simulate(TINY, arrivals, seed=3)
    assert poisson_arrivals(6.0, 300, IN, OUT, seed=4) != arrivals
    a = point(6.0, 300, 3)
    assert point(6.0, 300, 3) == a
    assert capacity(TINY, BOUNDS, 200, (5,)) == capacity(TINY, BOUNDS, 200, (5,))


def test_bounds_must_name_known_figures() -> None:
    with pytest.raises(ValueError, match="ttft"):
        capacity(TINY, {"itl": 0.1}, 100, (0,))


def test_the_kv_pool_never_holds_more_than_its_blocks() -> None:
    engine = TwinScheduler(TINY, 0)
    for i in range(300):
        engine.add(engine.make_request(prompt(i, IN), OUT))
    most = 0
    while not engine.idle:
        engine.step()
        most = max(most, len(engine.running))
    assert most <= TINY.num_blocks // (IN // TINY.block_size)  # 8 unique 256-token prompts
