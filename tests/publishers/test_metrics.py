"""bench.publishers.metrics: each publisher's figures from hand-made records with known answers.

Every expected value is worked out by hand in the comments next to it; numpy (a dev
dependency, never imported by bench) only cross-checks the percentile and the median.
"""

from __future__ import annotations

import math
from typing import get_args

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.publishers import metrics
from bench.publishers.metrics import (
    COMPUTED,
    TimedRequest,
    compute,
    mlperf_percentile_ms,
    mlperf_tpots_ms,
    mlperf_ttfts_ms,
    percentile_linear,
    percentile_mlperf,
)
from bench.publishers.model import ComputedAs

KEYS: tuple[ComputedAs, ...] = get_args(ComputedAs)


def rec(
    start: float,
    first: float | None,
    end: float,
    *,
    inp: int = 100,
    out: int = 10,
    chunks: tuple[float, ...] | None = None,
    tokens: tuple[int, ...] | None = None,
    ok: bool = True,
) -> TimedRequest:
    """A record; by default one chunk at the first token carrying every output token."""
    if chunks is None:
        chunks = () if first is None else (first,)
    if tokens is None:
        tokens = (out,) if len(chunks) == 1 else (1,) * len(chunks)
    return TimedRequest(
        start_s=start,
        first_token_s=first,
        end_s=end,
        input_tokens=inp,
        output_tokens=out,
        chunk_s=chunks,
        chunk_tokens=tokens,
        ok=ok,
    )


def fig(key: ComputedAs, records: list[TimedRequest], *, duration_s: float = 10.0) -> float:
    value = compute(key, records, duration_s=duration_s, gpus=None)
    assert value is not None, key
    return value


# --- throughputs (vLLM) and per GPU (InferenceX) ------------------------------------------

THREE = [
    rec(0.0, 0.5, 4.0, inp=100, out=10),
    rec(1.0, 1.5, 9.0, inp=200, out=20),
    rec(2.0, 2.5, 6.0, inp=300, out=30),
    # Not completed for vLLM: a failure, and a success without any token (its client marks
    # a response with no chunk as failed).
    rec(3.0, 3.5, 5.0, inp=1000, out=5, ok=False),
    rec(3.0, None, 5.0, inp=400, out=0),
]


def test_throughputs_of_three_requests_over_ten_seconds() -> None:
    # completed: 3 of 5 -> 3 / 10 s = 0.3 req/s
    assert fig("request_rate", THREE) == pytest.approx(0.3)
    # output: 10 + 20 + 30 = 60 tokens / 10 s = 6 tok/s (the failed one's 5 are not counted)
    assert fig("output_tok_s", THREE) == pytest.approx(6.0)
    # total: (100 + 200 + 300) + 60 = 660 tokens / 10 s = 66 tok/s
    assert fig("total_tok_s", THREE) == pytest.approx(66.0)


def test_per_gpu_figures_divide_by_the_gpu_count_or_are_none() -> None:
    # 66 tok/s / 4 GPUs = 16.5; 6 tok/s / 4 = 1.5
    assert compute("input_output_tok_s_per_gpu", THREE, duration_s=10, gpus=4) == pytest.approx(
        16.5
    )
    assert compute("output_tok_s_per_gpu", THREE, duration_s=10, gpus=4) == pytest.approx(1.5)
    assert compute("input_output_tok_s_per_gpu", THREE, duration_s=10, gpus=None) is None
    assert compute("output_tok_s_per_gpu", THREE, duration_s=10, gpus=None) is None
    # Figures not per GPU ignore the count.
    assert compute("total_tok_s", THREE, duration_s=10, gpus=4) == pytest.approx(66.0)


def test_no_successful_request_gives_none() -> None:
    failed = [rec(0.0, 0.5, 1.0, ok=False), rec(0.0, None, 1.0, out=0)]
    for key in KEYS:
        assert compute(key, failed, duration_s=10.0, gpus=4) is None, key
        assert compute(key, [], duration_s=10.0, gpus=4) is None, key


# --- TPOT, E2EL, ITL, interactivity ---------------------------------------------------------

# Sent at 0 s, first token at 1.0 s, one token a chunk every 0.1 s up to 1.9 s (10 tokens),
# the last byte (usage chunk, [DONE]) at 2.0 s.
TEN = rec(0.0, 1.0, 2.0, out=10, chunks=tuple(1.0 + i / 10 for i in range(10)), tokens=(1,) * 10)


def test_tpot_excludes_the_first_token() -> None:
    # vLLM: (latency - ttft) / (tokens - 1) = (1.9 - 1.0) / 9 = 0.1 s = 100 ms.
    assert fig("tpot_mean_ms", [TEN]) == pytest.approx(100.0)
    assert fig("tpot_median_ms", [TEN]) == pytest.approx(100.0)
    assert fig("tpot_p99_ms", [TEN]) == pytest.approx(100.0)
    # With the first token in it, latency / tokens = 1.9 / 10 = 190 ms: another figure.
    with_first_ms = 1.9 / 10 * 1000
    assert with_first_ms == pytest.approx(190.0)
    assert fig("tpot_mean_ms", [TEN]) != pytest.approx(with_first_ms)
    # TTFT 1.0 s = 1000 ms
    assert fig("ttft_mean_ms", [TEN]) == pytest.approx(1000.0)


def test_e2el_ends_at_the_last_token_chunk_not_the_last_byte() -> None:
    # vLLM's latency stops at its last chunk with choices (1.9 s), not at the end (2.0 s).
    assert fig("e2el_mean_ms", [TEN]) == pytest.approx(1900.0)
    assert fig("e2el_median_ms", [TEN]) == pytest.approx(1900.0)


def test_one_token_requests_have_no_tpot_or_itl() -> None:
    one = [rec(0.0, 0.2, 0.3, out=1), rec(0.0, 0.4, 0.5, out=1)]
    assert compute("tpot_mean_ms", one, duration_s=1.0, gpus=None) is None
    assert compute("tpot_p99_ms", one, duration_s=1.0, gpus=None) is None
    assert compute("interactivity", one, duration_s=1.0, gpus=None) is None
    assert compute("itl_mean_ms", one, duration_s=1.0, gpus=None) is None
    # TTFT still: median of 200 and 400 ms = 300 ms
    assert fig("ttft_median_ms", one, duration_s=1.0) == pytest.approx(300.0)
    # With a two-token request added, its TPOT alone is the statistic: (0.9 - 0.4) / 1 = 500.
    two = [*one, rec(0.0, 0.4, 1.0, out=2, chunks=(0.4, 0.9), tokens=(1, 1))]
    assert fig("tpot_mean_ms", two, duration_s=1.0) == pytest.approx(500.0)


def test_interactivity_is_1000_over_the_median_tpot() -> None:
    # TPOTs: (1.9 - 1.0) / 9 = 100 ms, (1.45 - 1.0) / 9 = 50 ms, (1.225 - 1.0) / 9 = 25 ms.
    records = [
        rec(0.0, 1.0, 2.0, out=10, chunks=(1.0, 1.9), tokens=(1, 9)),
        rec(0.0, 1.0, 2.0, out=10, chunks=(1.0, 1.45), tokens=(1, 9)),
        rec(0.0, 1.0, 2.0, out=10, chunks=(1.0, 1.225), tokens=(1, 9)),
    ]
    assert fig("tpot_median_ms", records) == pytest.approx(50.0)
    # median 50 ms -> 1000 / 50 = 20 tok/s/user
    assert fig("interactivity", records) == pytest.approx(20.0)
    # Not 1000 / mean: the mean is 175 / 3 = 58.33 ms, 1000 / 58.33 = 17.14.
    assert fig("tpot_mean_ms", records) == pytest.approx(175 / 3)
    assert fig("interactivity", records) != pytest.approx(1000 / (175 / 3))


def test_itl_is_one_gap_per_chunk_whatever_its_tokens() -> None:
    # Chunks at 1.0, 1.2 and 1.5 s carrying 1, 3 and 2 tokens: ITLs are the two gaps,
    # 200 and 300 ms, not split into per-token gaps (200/3 x 3, 300/2 x 2: a mean of 100).
    r = rec(0.0, 1.0, 1.6, out=6, chunks=(1.0, 1.2, 1.5), tokens=(1, 3, 2))
    assert fig("itl_mean_ms", [r]) == pytest.approx(250.0)
    assert fig("itl_median_ms", [r]) == pytest.approx(250.0)
    # p99 of [0.2, 0.3]: index 1 x 0.99 = 0.99 -> 0.3 - 0.1 x 0.01 = 0.299 s
    assert fig("itl_p99_ms", [r]) == pytest.approx(299.0)
    # TPOT over the same request: (1.5 - 1.0) / 5 = 100 ms.
    assert fig("tpot_mean_ms", [r]) == pytest.approx(100.0)
    # Gaps pool over requests: with TEN's nine 100 ms gaps, 11 ITLs, mean (0.5 + 0.9) / 11.
    assert fig("itl_mean_ms", [r, TEN]) == pytest.approx(1400 / 11)


# --- percentiles ----------------------------------------------------------------------------


def test_percentile_linear_hand_values() -> None:
    hundred = [float(i) for i in range(1, 101)]
    # [1..100], q 99: index 99 x 0.99 = 98.01 -> 99 + (100 - 99) x 0.01 = 99.01
    assert percentile_linear(hundred, 99) == pytest.approx(99.01)
    # [10, 20, 30, 40], q 50: index 1.5 -> 30 - 10 x 0.5 = 25; q 25: index 0.75 -> 17.5
    assert percentile_linear([40.0, 10.0, 30.0, 20.0], 50) == 25.0
    assert percentile_linear([10.0, 20.0, 30.0, 40.0], 25) == 17.5
    # [1..5], q 90: index 3.6 -> 4 + 0.6 = 4.6
    assert percentile_linear([1.0, 2.0, 3.0, 4.0, 5.0], 90) == pytest.approx(4.6)
    # The ends and one value.
    assert percentile_linear([3.0, 1.0, 2.0], 0) == 1.0
    assert percentile_linear([3.0, 1.0, 2.0], 100) == 3.0
    assert percentile_linear([7.0], 99) == 7.0


def test_percentile_mlperf_takes_the_element_at_n_times_p() -> None:
    five = [5.0, 1.0, 4.0, 2.0, 3.0]  # sorted: 1 2 3 4 5
    assert percentile_mlperf(five, 50) == 3.0  # 5 x 0.5 = 2.5 -> index 2
    assert percentile_mlperf(five, 90) == 5.0  # 5 x 0.9 = 4.5 -> index 4 (numpy: 4.6)
    assert percentile_mlperf(five, 99) == 5.0  # 4.95 -> 4
    assert percentile_mlperf(five, 0) == 1.0
    # [1..100], q 99: index 100 x 0.99 = 99 -> 100, where numpy interpolates 99.01.
    assert percentile_mlperf([float(i) for i in range(1, 101)], 99) == 100.0
    # [1..1000]: index 990 -> 991
    assert percentile_mlperf([float(i) for i in range(1, 1001)], 99) == 991.0
    with pytest.raises(ValueError, match="100 excluded"):
        percentile_mlperf(five, 100)


@pytest.mark.parametrize("fn", [percentile_linear, percentile_mlperf])
def test_percentile_refuses_what_it_cannot_rank(fn: object) -> None:
    assert callable(fn)
    for values, q in (([], 50), ([1.0], -1), ([1.0], math.nan), ([math.inf], 50), ([1.0], 101)):
        with pytest.raises(ValueError, match=r"^[^\n]+$"):
            fn(values, q)


VALUES = st.lists(
    st.floats(min_value=-1e9, max_value=1e9, allow_nan=False), min_size=1, max_size=40
)


@settings(max_examples=200, deadline=None, database=None)
@given(VALUES, st.floats(0, 100), st.floats(0, 100))
def test_percentiles_lie_between_min_and_max_and_grow_with_q(
    values: list[float], q1: float, q2: float
) -> None:
    lo, hi = min(q1, q2), max(q1, q2)
    for fn in (percentile_linear, percentile_mlperf):
        if fn is percentile_mlperf and hi >= 100:
            continue
        a, b = fn(values, lo), fn(values, hi)
        assert min(values) <= a <= max(values)
        assert min(values) <= b <= max(values)
        assert a <= b


@settings(max_examples=200, deadline=None, database=None)
@given(VALUES, st.floats(0, 100))
def test_percentile_linear_and_median_are_numpys_bit_for_bit(values: list[float], q: float) -> None:
    np = pytest.importorskip("numpy")
    assert percentile_linear(values, q) == float(np.percentile(values, q))
    assert metrics._median(values) == float(np.median(values))
    assert metrics._mean(values) == pytest.approx(float(np.mean(values)), rel=1e-9, abs=1e-6)


# --- MLPerf LoadGen ------------------------------------------------------------------------


def test_mlperf_tokens_per_second_divides_by_the_last_issued_query_done() -> None:
    records = [
        rec(0.0, 0.5, 4.0, out=10),
        rec(1.0, 1.5, 9.0, out=20),  # done last of all, at 9 s
        rec(1.5, 1.7, 3.0, out=1),  # one token: LoadGen records 0 for it
        rec(2.0, 2.5, 6.0, out=30),  # issued last, done at 6 s
    ]
    # tokens 10 + 20 + 30 = 60 (the first token of each counted), time 6 s - 0 s: 10 tok/s.
    # Not the given duration (60 / 10 = 6) nor the last completion (60 / 9 = 6.67).
    assert compute("mlperf_tokens_per_s", records, duration_s=10.0, gpus=None) == 10.0
    # vLLM's output throughput over the same requests: 61 / 10 s.
    assert fig("output_tok_s", records) == pytest.approx(6.1)


def test_mlperf_ttft_and_tpot_per_query() -> None:
    # Scheduled (sent) at 0, first token at 0.25 s, last chunk at 1.0 s, completed at
    # 1.25 s, 4 tokens. TTFT 250 ms. TPOT counts to the completion, in whole ns truncated:
    # (1_250_000_000 - 250_000_000) // 3 = 333_333_333 ns = 333.333333 ms.
    r = rec(0.0, 0.25, 1.25, out=4, chunks=(0.25, 0.5, 0.75, 1.0), tokens=(1, 1, 1, 1))
    assert mlperf_ttfts_ms([r]) == [250.0]
    assert mlperf_tpots_ms([r]) == [333.333333]
    # vLLM's TPOT stops at the last chunk: (1.0 - 0.25) / 3 = 250 ms.
    assert fig("tpot_mean_ms", [r]) == pytest.approx(250.0)
    # p99 over queries by LoadGen's rule: TTFTs 250, 100, 400 -> index int(3 x 0.99) = 2: 400
    more = [r, rec(1.0, 1.1, 2.0, out=2), rec(2.0, 2.4, 3.0, out=2)]
    assert mlperf_percentile_ms("ttft", more, 99) == pytest.approx(400.0)
    # TPOTs: 333.333333, (1.0 - 0.1) / 1 = 900, (1.0 - 0.4) / 1 = 600 -> 900
    assert mlperf_percentile_ms("tpot", more, 99) == pytest.approx(900.0)
    # The summary's p99 lines, in ns as LoadGen prints them.
    assert compute("mlperf_ttft_p99_ns", more, duration_s=3.0, gpus=None) == pytest.approx(4e8)
    assert compute("mlperf_tpot_p99_ns", more, duration_s=3.0, gpus=None) == pytest.approx(9e8)


def test_mlperf_refuses_what_loadgen_logs_as_an_error() -> None:
    # A completed query of one token: LoadGen errors ("greater than 1"): no TPOT at all.
    records = [rec(0.0, 0.2, 1.0, out=5), rec(0.0, 0.3, 0.4, out=1)]
    assert mlperf_tpots_ms(records) is None
    assert mlperf_percentile_ms("tpot", records, 99) is None
    assert mlperf_ttfts_ms(records) == [200.0, 300.0]
    # A completed query with no first token: no TTFT either.
    assert mlperf_ttfts_ms([rec(0.0, None, 1.0, out=0)]) is None
    # Failed queries are left out.
    assert mlperf_ttfts_ms([rec(0.0, 0.2, 1.0), rec(0.0, None, 1.0, out=0, ok=False)]) == [200.0]


# --- what is refused -----------------------------------------------------------------------

GOOD: dict[str, object] = {
    "start_s": 1.0,
    "first_token_s": 1.5,
    "end_s": 3.0,
    "input_tokens": 10,
    "output_tokens": 3,
    "chunk_s": (1.5, 2.0),
    "chunk_tokens": (1, 2),
    "ok": True,
}


@pytest.mark.parametrize(
    "change",
    [
        {"start_s": math.nan},
        {"start_s": -1.0},
        {"end_s": math.inf},
        {"first_token_s": math.nan},
        {"first_token_s": -0.5},
        {"input_tokens": -1},
        {"output_tokens": -3},
        {"output_tokens": 2.5},
        {"output_tokens": True},
        {"chunk_tokens": (1, -2)},
        {"chunk_s": (1.5, math.inf)},
        {"chunk_s": (1.5, -2.0)},
        {"chunk_s": (1.5,)},  # two counts, one time
        {"chunk_s": (2.0, 1.6)},  # back in time
        {"chunk_s": (1.4, 2.0)},  # before the first token
        {"chunk_s": (1.5, 3.5)},  # after the end
        {"first_token_s": None},  # chunks but no first token
        {"first_token_s": 0.5},  # before the request
        {"end_s": 0.5},  # ends before it starts
        {"start_s": "1.0"},
        {"ok": 1},
    ],
)
def test_a_record_no_measurement_gives_is_refused(change: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"^request record: [^\n]+$"):
        TimedRequest(**{**GOOD, **change})  # type: ignore[arg-type]


def test_the_good_record_is_accepted_and_frozen() -> None:
    r = TimedRequest(**GOOD)  # type: ignore[arg-type]
    with pytest.raises(AttributeError):
        r.end_s = 4.0  # type: ignore[misc]


def test_compute_refuses_bad_arguments() -> None:
    ok = [rec(0.0, 0.5, 1.0)]
    for duration in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match=r"^duration [^\n]+$"):
            compute("request_rate", ok, duration_s=duration, gpus=None)
    for gpus in (0, -2):
        with pytest.raises(ValueError, match="GPU count"):
            compute("output_tok_s_per_gpu", ok, duration_s=1.0, gpus=gpus)
    with pytest.raises(ValueError, match="unknown figure definition"):
        compute("tokens_per_watt", ok, duration_s=1.0, gpus=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not a TimedRequest"):
        compute("request_rate", [object()], duration_s=1.0, gpus=None)  # type: ignore[list-item]


def test_every_definition_has_a_function_that_says_where_it_comes_from() -> None:
    assert set(COMPUTED) == set(KEYS)
    sources = ("serve.py", "process_result.py", "results.cc")
    for key, fn in COMPUTED.items():
        doc = fn.__doc__ or ""
        assert any(s in doc for s in sources), key


# --- any valid records ------------------------------------------------------------------------

TIMES = st.floats(min_value=0.0, max_value=1e3, allow_nan=False, allow_infinity=False)
GAPS = st.floats(min_value=0.0, max_value=5.0, allow_nan=False, allow_infinity=False)


@st.composite
def records(draw: st.DrawFn) -> TimedRequest:
    start = draw(TIMES)
    first = start + draw(GAPS) if draw(st.booleans()) else None
    chunks: list[float] = []
    if first is not None:
        t = first
        chunks.append(t)
        for gap in draw(st.lists(GAPS, max_size=6)):
            t += gap
            chunks.append(t)
    end = (chunks[-1] if chunks else start) + draw(GAPS)
    return TimedRequest(
        start_s=start,
        first_token_s=first,
        end_s=end,
        input_tokens=draw(st.integers(0, 10_000)),
        output_tokens=draw(st.integers(0, 100)),
        chunk_s=tuple(chunks),
        chunk_tokens=tuple(draw(st.integers(1, 4)) for _ in chunks),
        ok=draw(st.booleans()),
    )


@settings(max_examples=200, deadline=None, database=None)
@given(
    st.lists(records(), max_size=8),
    st.floats(min_value=1e-3, max_value=1e4),
    st.none() | st.integers(1, 64),
    st.floats(0, 99.9),
)
def test_every_figure_of_valid_records_is_none_or_finite_and_not_negative(
    recs: list[TimedRequest], duration_s: float, gpus: int | None, q: float
) -> None:
    for key in KEYS:
        value = compute(key, recs, duration_s=duration_s, gpus=gpus)
        assert value is None or (math.isfinite(value) and value >= 0), (key, value)
    for figure in ("ttft", "tpot"):
        value = mlperf_percentile_ms(figure, recs, q)
        assert value is None or (math.isfinite(value) and value >= 0), (figure, value)
