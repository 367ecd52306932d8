"""bench.publishers.reproduce: our request records judged against a publisher's card.

Records are made by hand with figures worked out in the comments; the cards are the vLLM
dashboard and MLPerf fixtures with their figures put where each test wants them.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from bench.errors import Exit
from bench.publishers import mlperf
from bench.publishers import vllm_dashboard as vd
from bench.publishers.metrics import TimedRequest
from bench.publishers.model import PublishedFigure, PublisherCard
from bench.publishers.reproduce import Trial, judge, mean_interval
from bench.workload import slo
from tests.publishers.paths import MLPERF_SERVER

DATA = Path(__file__).resolve().parents[1] / "data" / "publishers"
SHAREGPT = DATA / "vllm-dashboard" / "serving_llama8B_tp1_sharegpt_qps_4.json"
SERVER = MLPERF_SERVER
T_975_4 = 2.7764451051977987  # Student's t, 0.975 quantile, 4 degrees of freedom (tables)
T_975_2 = 4.302652729696142


def rec(start: float, ttft: float, end: float, *, out: int = 10, inp: int = 100) -> TimedRequest:
    """A request whose OUT tokens come one a chunk, 80 ms apart from its first token."""
    first = start + ttft
    chunks = tuple(first + 0.08 * j for j in range(out))
    return TimedRequest(
        start_s=start,
        first_token_s=first,
        end_s=end,
        input_tokens=inp,
        output_tokens=out,
        chunk_s=chunks,
        chunk_tokens=(1,) * out,
        ok=True,
    )


# Ten requests, one a second: TTFT 200 ms each, TPOT (0.72 s / 9) = 80 ms. Over 10 s:
# 1.0 req/s, 100 output tokens -> 10 tok/s, 1100 tokens in and out -> 110 tok/s.
TEN = tuple(rec(float(i), 0.2, i + 1.0) for i in range(10))


@pytest.fixture(scope="module")
def vllm_card() -> PublisherCard:
    return vd.read(SHAREGPT, {})


def with_values(card: PublisherCard, **values: float) -> PublisherCard:
    """CARD with only the named figures, each at the value given."""
    figures = []
    for name, value in values.items():
        f = card.figure(name)
        assert f is not None, name
        figures.append(f.model_copy(update={"value": value}))
    return card.model_copy(update={"figures": tuple(figures)})


# --- one trial ------------------------------------------------------------------------------


def test_exactly_reproduced_figures_and_one_not_checked(vllm_card: PublisherCard) -> None:
    card = with_values(
        vllm_card,
        request_throughput=1.0,
        output_throughput=10.0,
        mean_ttft_ms=200.0,
        std_ttft_ms=3.0,  # no computed_as: listed, not checked
    )
    result = judge(card, [Trial(TEN, 10.0, 1)], tolerance_pct=5)
    assert result.outcome == "REPRODUCED"
    assert result.exit_code() is Exit.OK
    rows = {r.name: r for r in result.figures}
    assert rows["request_throughput"].ours == pytest.approx(1.0)
    assert rows["output_throughput"].ours == pytest.approx(10.0)
    assert rows["mean_ttft_ms"].ours == pytest.approx(200.0)
    assert rows["mean_ttft_ms"].band_low == pytest.approx(190.0)
    assert rows["mean_ttft_ms"].band_high == pytest.approx(210.0)
    assert all(r.interval is None for r in result.figures)
    std = rows["std_ttft_ms"]
    assert std.outcome == "NOT CHECKED" and std.ours is None and "computed_as" in std.note
    lines = result.lines()
    assert lines[0] == "REPRODUCED within ±5 % (3 figures, 1 trial)"
    assert any("std_ttft_ms" in line and "NOT CHECKED" in line for line in lines)
    assert any("one sample" in line and "ours alone" in line for line in lines)
    assert any("One trial: no interval" in line for line in lines)
    assert not any("Accuracy" in line for line in lines)  # no constraints, no claim to make


def test_ten_percent_slower_is_not_reproduced(vllm_card: PublisherCard) -> None:
    # Our throughput is 90 % of the published one; our TTFT 10 % longer than published.
    card = with_values(vllm_card, request_throughput=1.0 / 0.9, mean_ttft_ms=200.0 / 1.1)
    result = judge(card, [Trial(TEN, 10.0, 1)], tolerance_pct=5)
    assert [r.outcome for r in result.figures] == ["NOT REPRODUCED", "NOT REPRODUCED"]
    assert result.outcome == "NOT REPRODUCED"
    assert result.exit_code() is Exit.NOT_REPRODUCED
    assert "-10.00 % off" in result.figures[0].note
    assert "+10.00 % off" in result.figures[1].note
    assert result.lines()[0] == "NOT REPRODUCED within ±5 % (2 figures, 1 trial)"
    # A wider tolerance takes both in: direction does not matter, only distance.
    assert judge(card, [Trial(TEN, 10.0, 1)], tolerance_pct=12).outcome == "REPRODUCED"


def test_band_edges_are_inside(vllm_card: PublisherCard) -> None:
    # 1.0 req/s ours against 1.0 / 1.05 published: on the upper edge (inside, up to rounding).
    result = judge(
        with_values(vllm_card, request_throughput=1.0 / 1.05 + 1e-12),
        [Trial(TEN, 10.0, 1)],
        tolerance_pct=5,
    )
    assert result.outcome == "REPRODUCED"


def test_a_figure_a_trial_cannot_compute_is_not_checked(vllm_card: PublisherCard) -> None:
    per_gpu = PublishedFigure(
        name="output_tput_per_gpu",
        value=10.0,
        unit="tok/s/gpu",
        definition="output tokens / duration / GPUs",
        computed_as="output_tok_s_per_gpu",
    )
    card = with_values(vllm_card, request_throughput=1.0)
    card = card.model_copy(update={"figures": (*card.figures, per_gpu)})
    result = judge(card, [Trial(TEN, 10.0, None)], tolerance_pct=5)
    row = result.figures[1]
    assert row.outcome == "NOT CHECKED" and "GPU count" in row.note
    assert result.outcome == "REPRODUCED"  # on the one figure checked
    assert result.lines()[0] == "REPRODUCED within ±5 % (1 figure, 1 trial)"
    # With the GPU count the same figure is checked: 10 tok/s over 1 GPU.
    assert judge(card, [Trial(TEN, 10.0, 1)], tolerance_pct=5).figures[1].outcome == ("REPRODUCED")


def test_nothing_checked_is_not_resolved(vllm_card: PublisherCard) -> None:
    result = judge(with_values(vllm_card, std_ttft_ms=3.0), [Trial(TEN, 10.0, 1)], tolerance_pct=5)
    assert result.outcome == "NOT RESOLVED"
    assert result.exit_code() is Exit.INCONCLUSIVE
    assert "nothing checked" in result.reason
    # No successful request: every figure is not computable, so nothing is checked either.
    failed = tuple(TimedRequest(0.0, None, 1.0, 10, 0, (), (), False) for _ in range(3))
    card = with_values(vllm_card, request_throughput=1.0)
    result = judge(card, [Trial(failed, 10.0, 1)], tolerance_pct=5)
    assert result.figures[0].outcome == "NOT CHECKED"
    assert "no successful request" in result.figures[0].note
    assert result.outcome == "NOT RESOLVED"


# --- trials and their interval --------------------------------------------------------------


def trials_at(rates: list[float]) -> list[Trial]:
    """Trials of the ten requests, each with the duration giving RATE req/s (10 / rate)."""
    return [Trial(TEN, 10.0 / r, 1) for r in rates]


def test_interval_is_the_t_interval_of_the_mean() -> None:
    values = [1.03, 1.04, 1.05, 1.06, 1.07]
    mean, interval = mean_interval(values)
    half = T_975_4 * float(np.std(values, ddof=1)) / math.sqrt(5)
    assert mean == pytest.approx(1.05)
    assert interval == pytest.approx((1.05 - half, 1.05 + half))
    assert mean_interval([2.0]) == (2.0, None)


def test_interval_straddling_the_band_edge_is_not_resolved(vllm_card: PublisherCard) -> None:
    # Mean 1.05 req/s, half-width 2.776 x 0.0158 / sqrt 5 = 0.0196: 1.030..1.070 against a
    # band 0.95..1.05, across its upper edge.
    card = with_values(vllm_card, request_throughput=1.0)
    result = judge(card, trials_at([1.03, 1.04, 1.05, 1.06, 1.07]), tolerance_pct=5)
    row = result.figures[0]
    assert row.interval is not None
    assert row.interval[0] < 1.05 < row.interval[1]
    assert row.interval[0] > 0.95
    assert row.outcome == "NOT RESOLVED"
    assert result.outcome == "NOT RESOLVED"
    assert result.exit_code() is Exit.INCONCLUSIVE
    assert result.lines()[0] == "NOT RESOLVED within ±5 % (1 figure, 5 trials)"
    assert any("interval is ours alone" in line for line in result.lines())


def test_interval_inside_and_outside_the_band(vllm_card: PublisherCard) -> None:
    card = with_values(vllm_card, request_throughput=1.0)
    # 0.99, 1.00, 1.01: half-width 4.303 x 0.01 / sqrt 3 = 0.0248, inside 0.95..1.05.
    inside = judge(card, trials_at([0.99, 1.0, 1.01]), tolerance_pct=5)
    assert inside.figures[0].interval == pytest.approx(
        (1.0 - T_975_2 * 0.01 / math.sqrt(3), 1.0 + T_975_2 * 0.01 / math.sqrt(3))
    )
    assert inside.outcome == "REPRODUCED"
    assert inside.lines()[0] == "REPRODUCED within ±5 % (1 figure, 3 trials)"
    # 1.20, 1.21, 1.22: 1.185..1.235, wholly above the band.
    outside = judge(card, trials_at([1.20, 1.21, 1.22]), tolerance_pct=5)
    assert outside.figures[0].outcome == "NOT REPRODUCED"
    assert outside.outcome == "NOT REPRODUCED"


def test_one_figure_not_reproduced_outweighs_one_not_resolved(vllm_card: PublisherCard) -> None:
    # request rate straddles (above); output throughput 10.5 tok/s mean vs 20 published.
    card = with_values(vllm_card, request_throughput=1.0, output_throughput=20.0)
    result = judge(card, trials_at([1.03, 1.04, 1.05, 1.06, 1.07]), tolerance_pct=5)
    assert [r.outcome for r in result.figures] == ["NOT RESOLVED", "NOT REPRODUCED"]
    assert result.outcome == "NOT REPRODUCED"
    assert "output_throughput" in result.reason


# --- MLPerf: constraints by LoadGen's early stopping ------------------------------------------

N = 500
MIN_S = 2400.0  # the fixture's min_duration


def server_records(over: int, n: int = N, *, one_token: bool = False) -> tuple[TimedRequest, ...]:
    """N requests one a second, 10 tokens each: TTFT 100 ms and TPOT (0.9 s / 9) = 100 ms,
    except the first OVER, whose TTFT is 2.5 s (over the 2000 ms limit; TPOT 111 ms)."""
    out: list[TimedRequest] = []
    for i in range(n):
        start = float(i)
        if i < over:
            out.append(rec(start, 2.5, start + 3.5))
        else:
            out.append(rec(start, 0.1, start + 1.0))
    if one_token:
        out[-2] = rec(float(n - 2), 0.1, n - 2 + 1.0, out=1)
    return tuple(out)


@pytest.fixture(scope="module")
def server_card() -> PublisherCard:
    card = mlperf.read(SERVER, {})
    # LoadGen's tokens a second: 500 x 10 tokens over 500 s (the last-issued query's end).
    tokens = card.figures[0].model_copy(update={"value": N * 10 / (N - 1 + 1.0)})
    # Samples a second as computed_as request_rate: 500 over the trial's 2400 s.
    samples = card.figures[1].model_copy(update={"value": N / MIN_S})
    # The published p99s are not these records' (tests here judge the constraints): shown,
    # not checked.
    p99s = tuple(f.model_copy(update={"computed_as": None}) for f in card.figures[2:])
    return card.model_copy(update={"figures": (tokens, samples, *p99s)})


def test_mlperf_fixture_is_what_the_tests_assume(server_card: PublisherCard) -> None:
    c = server_card.constraints[0]
    assert (c.figure, c.percentile, c.limit_ms, c.confidence) == ("ttft", 99.0, 2000.0, 0.99)
    assert server_card.workload.min_duration_s == MIN_S
    assert server_card.samples_published == 1


def test_mlperf_constraints_met(server_card: PublisherCard) -> None:
    assert slo.verdict(N, 0, 0.99, 0.99) == "met"  # 0.99^500 = 0.0066 < 0.01
    result = judge(server_card, [Trial(server_records(0), MIN_S, 8)], tolerance_pct=5)
    ttft = result.constraints[0]
    assert ttft.trials[0].n == N and ttft.trials[0].over == 0
    assert ttft.trials[0].verdict == "met" and ttft.outcome == "REPRODUCED"
    assert [c.outcome for c in result.constraints] == ["REPRODUCED"] * 3  # ttft, tpot, duration
    assert [r.outcome for r in result.figures] == [
        "REPRODUCED",
        "REPRODUCED",
        "NOT CHECKED",
        "NOT CHECKED",
    ]
    assert result.outcome == "REPRODUCED"
    assert result.exit_code() is Exit.OK
    lines = result.lines()
    assert lines[0] == "REPRODUCED within ±5 % (2 figures, 3 constraints, 1 trial)"
    assert any(line.startswith("Accuracy is not claimed") for line in lines)
    assert any("one sample" in line for line in lines)


def test_mlperf_ttft_constraint_missed(server_card: PublisherCard) -> None:
    # 12 of 500 over: P(X >= 12) for Binomial(500, 0.01) is under 0.01.
    assert slo.verdict(N, 12, 0.99, 0.99) == "missed"
    result = judge(server_card, [Trial(server_records(12), MIN_S, 8)], tolerance_pct=5)
    ttft = result.constraints[0]
    assert (ttft.trials[0].over, ttft.trials[0].verdict) == (12, "missed")
    assert ttft.outcome == "NOT REPRODUCED"
    assert result.outcome == "NOT REPRODUCED"
    assert result.exit_code() is Exit.NOT_REPRODUCED
    assert "constraint p99 TTFT <= 2000 ms" in result.reason


def test_mlperf_ttft_constraint_undecided(server_card: PublisherCard) -> None:
    # 1 of 500 over: neither met nor missed; 162 more requests under the limit would do.
    assert slo.verdict(N, 1, 0.99, 0.99) == "undecided"
    assert slo.more_needed(N, 1, 0.99, 0.99) == 162
    result = judge(server_card, [Trial(server_records(1), MIN_S, 8)], tolerance_pct=5)
    ttft = result.constraints[0]
    assert ttft.outcome == "NOT RESOLVED" and ttft.more_needed == 162
    assert "162 more requests" in ttft.note
    assert result.outcome == "NOT RESOLVED"
    assert result.exit_code() is Exit.INCONCLUSIVE


def test_mlperf_every_trial_must_meet(server_card: PublisherCard) -> None:
    trials = [Trial(server_records(0), MIN_S, 8), Trial(server_records(12), MIN_S, 8)]
    result = judge(server_card, trials, tolerance_pct=5)
    assert [t.verdict for t in result.constraints[0].trials] == ["met", "missed"]
    assert result.outcome == "NOT REPRODUCED"


def test_mlperf_trial_shorter_than_min_duration(server_card: PublisherCard) -> None:
    # Constraints met, but 2000 s < 2400 s. The samples figure is put at 500 / 2000 s.
    samples = server_card.figures[1].model_copy(update={"value": N / 2000.0})
    card = server_card.model_copy(
        update={"figures": (server_card.figures[0], samples, *server_card.figures[2:])}
    )
    result = judge(card, [Trial(server_records(0), 2000.0, 8)], tolerance_pct=5)
    assert [c.outcome for c in result.constraints] == ["REPRODUCED", "REPRODUCED", "NOT RESOLVED"]
    assert "trial 1 lasted 2000 s" in result.constraints[2].note
    assert result.outcome == "NOT RESOLVED"
    assert result.exit_code() is Exit.INCONCLUSIVE


def test_mlperf_trial_loadgen_would_refuse(server_card: PublisherCard) -> None:
    # A completed request of one token: LoadGen's TPOT refuses it, the run is invalid.
    result = judge(
        server_card, [Trial(server_records(0, one_token=True), MIN_S, 8)], tolerance_pct=5
    )
    tpot = result.constraints[1]
    assert tpot.outcome == "NOT REPRODUCED" and "LoadGen would refuse" in tpot.note
    assert result.outcome == "NOT REPRODUCED"


# --- hostile numbers ------------------------------------------------------------------------


@pytest.mark.parametrize("tol", [math.nan, math.inf, -math.inf, 0.0, 100.0, -5.0, 150.0, True])
def test_hostile_tolerance_is_one_line_value_error(vllm_card: PublisherCard, tol: float) -> None:
    with pytest.raises(ValueError, match="tolerance") as info:
        judge(vllm_card, [Trial(TEN, 10.0, 1)], tolerance_pct=tol)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("records", "duration", "gpus"),
    [
        (TEN, math.nan, 1),
        (TEN, math.inf, 1),
        (TEN, 0.0, 1),
        (TEN, -1.0, 1),
        (TEN, 10.0, 0),
        (TEN, 10.0, True),
        (("not a record",), 10.0, 1),
    ],
)
def test_hostile_trial_is_one_line_value_error(
    records: tuple[TimedRequest, ...], duration: float, gpus: int | None
) -> None:
    with pytest.raises(ValueError, match="trial") as info:
        Trial(records, duration, gpus)
    assert "\n" not in str(info.value)


def test_no_trials_is_a_value_error(vllm_card: PublisherCard) -> None:
    with pytest.raises(ValueError, match="at least one trial"):
        judge(vllm_card, [], tolerance_pct=5)
