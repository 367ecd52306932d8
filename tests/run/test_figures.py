"""Figures of a cell from hand-made records: the card's definitions and identities."""

from __future__ import annotations

import pytest

from bench.run.figures import cell_figures
from bench.stats import estimate, median, percentile
from bench.stream import metrics
from bench.stream.records import RequestRecord


def _record(
    worker: int,
    start: float,
    first: float,
    times: list[float],
    cum: list[int],
    *,
    finished: bool = False,
    end: float | None = None,
) -> RequestRecord:
    r = RequestRecord(worker=worker, start_s=start, first_token_s=first)
    for t, c in zip(times, cum, strict=True):
        r.add_usage(t, c)
    r.finished = finished
    r.end_s = end if end is not None else times[-1]
    return r


def test_window_tokens_measured_for_and_the_two_identities() -> None:
    # Window [10, 20]. Worker 0: chunks every second from t=5, 2 tokens each.
    a = _record(0, 4.0, 5.0, [5.0 + i for i in range(20)], [2 * (i + 1) for i in range(20)])
    # Worker 1: finishes inside the window at 12, then a new request starts at 12.
    b1 = _record(1, 0.0, 1.0, [1.0, 6.0, 11.5], [1, 5, 9], finished=True, end=12.0)
    b2 = _record(1, 12.0, 13.0, [13.0, 19.5, 21.0], [1, 4, 8])
    samples = [
        metrics.Snapshot(t_s=t, values={metrics.RUNNING: v})
        for t, v in [(9, 5), (10, 2), (15, 2), (20, 1)]
    ]
    figs, extras, why = cell_figures(
        [a, b1, b2], 10.0, 20.0, samples, [], first=None, last=None, ready_after_s=3.0
    )
    assert why is None and figs is not None
    # a: chunks at 10..20 -> 11 chunks x 2 tokens; b1: 4 tokens at 11.5; b2: 1 + 3 tokens.
    assert figs.output_tokens == 22 + 4 + 4
    assert figs.measured_for_s == 10.0  # last usage chunk inside the window is a's at 20
    assert figs.total_tok_s == figs.output_tokens / figs.measured_for_s
    # TBT per request, token weighted, up to the window's end (20): a (20-5)/31,
    # b1 (11.5-1)/8, b2 (19.5-13)/3 (its chunk at 21 arrived during cancellation).
    assert figs.tbt_s == pytest.approx(median([15 / 31, 10.5 / 8, 6.5 / 3]))
    assert figs.per_request_tok_s == pytest.approx(1 / figs.tbt_s)
    assert figs.ttft_s == median([1.0, 1.0, 1.0])
    assert figs.completed_requests == 1
    assert figs.average_active == pytest.approx((2 + 2 + 1) / 3)
    assert figs.active_source == "server_metrics"
    assert extras.requests_in_window == 3 and extras.ready_after_s == 3.0
    assert extras.tokens_received == 40 + 9 + 8


def test_without_metrics_average_active_is_the_client_count_and_says_so() -> None:
    a = _record(0, 0.0, 1.0, [1.0, 2.0, 3.0], [1, 2, 3])
    figs, _, _ = cell_figures(
        [a], 0.0, 3.0, [], [(0.0, 1), (1.0, 1), (2.0, 0)], first=None, last=None, ready_after_s=None
    )
    assert figs is not None
    assert figs.active_source == "client_in_flight"
    assert figs.average_active == pytest.approx(2 / 3)


def test_spec_decode_and_prefix_cache_from_metric_deltas() -> None:
    a = _record(0, 0.0, 1.0, [1.0, 2.0], [1, 3])
    first = metrics.Snapshot(
        0.0,
        {
            metrics.SPEC_ACCEPTED: 100,
            metrics.SPEC_DRAFT_TOKENS: 400,
            metrics.SPEC_DRAFTS: 200,
            metrics.PREFIX_HITS: 10,
            metrics.PREFIX_QUERIES: 20,
        },
    )
    last = metrics.Snapshot(
        2.0,
        {
            metrics.SPEC_ACCEPTED: 250,
            metrics.SPEC_DRAFT_TOKENS: 600,
            metrics.SPEC_DRAFTS: 300,
            metrics.PREFIX_HITS: 100,
            metrics.PREFIX_QUERIES: 120,
        },
    )
    _, extras, _ = cell_figures([a], 0.0, 2.0, [], [], first=first, last=last, ready_after_s=None)
    assert extras.spec_decode_acceptance_rate == 150 / 200
    assert extras.spec_decode_acceptance_length == 1 + 150 / 100
    assert extras.prefix_cache_hit_rate == 90 / 100
    assert extras.tokens_per_chunk == 1.5


def test_a_window_without_tokens_has_no_figures() -> None:
    a = _record(0, 0.0, 1.0, [1.0, 2.0], [1, 2])
    figs, _, why = cell_figures([a], 5.0, 6.0, [], [], first=None, last=None, ready_after_s=None)
    assert figs is None and why == "no token received inside the window"


def test_a_freeze_that_outlasts_the_window_is_invalid_not_valid_at_the_old_rate() -> None:
    """Window [10, 40]: tokens every 0.1 s until 13, then nothing (the server froze)."""
    times = [5.0 + 0.1 * i for i in range(81)]  # 5.0 .. 13.0
    a = _record(0, 4.0, 5.0, times, [i + 1 for i in range(81)])
    figs, _, why = cell_figures([a], 10.0, 40.0, [], [], first=None, last=None, ready_after_s=1)
    assert figs is None
    assert why == (
        "server stalled: no token in the last 27.0 s of the 30.0 s window "
        "(the longest gap between chunks before was 0.10 s)"
    )
    # The same stream until the window's end is a cell.
    times = [5.0 + 0.1 * i for i in range(351)]  # 5.0 .. 40.0
    b = _record(0, 4.0, 5.0, times, [i + 1 for i in range(351)])
    figs, _, why = cell_figures([b], 10.0, 40.0, [], [], first=None, last=None, ready_after_s=1)
    assert why is None and figs is not None and figs.measured_for_s == pytest.approx(30.0)


def test_percentiles_and_confidence_interval() -> None:
    assert median([1.0, 3.0, 2.0, 4.0]) == 2.5
    assert percentile([float(i) for i in range(101)], 99) == 99.0
    est = estimate([10.0, 12.0, 14.0])
    assert est.mean == 12.0
    assert est.ci95 == pytest.approx(4.303 * 2.0 / 3**0.5)
    assert estimate([5.0]).ci95 is None


def test_metrics_parse_sums_label_sets_and_keeps_info_labels() -> None:
    text = (
        "# HELP vllm:num_requests_running x\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 4.0\n'
        'vllm:cache_config_info{block_size="16",kv_cache_size_tokens="2048"} 1.0\n'
        'vllm:e2e_request_latency_seconds_bucket{le="1.0"} 5\n'
        "process_cpu_seconds_total 12\n"
    )
    snap = metrics.parse(text, 1.0)
    assert snap.get(metrics.RUNNING) == 7.0
    assert snap.info[metrics.CACHE_CONFIG]["kv_cache_size_tokens"] == "2048"
    assert "process_cpu_seconds_total" not in snap.values


def test_tokens_that_all_came_in_one_read_leave_no_time_between_tokens() -> None:
    # Each request's tokens arrived in a single read (a burst): TBT would be 0 and
    # per-request tok/s infinite. The cell says so instead of dividing by zero.
    a = _record(0, 10.0, 11.0, [11.0, 11.0], [1, 128], finished=True)
    b = _record(0, 12.0, 13.0, [13.0, 13.0], [1, 128], finished=True)
    figs, extras, why = cell_figures(
        [a, b], 10.0, 20.0, [], [], first=None, last=None, ready_after_s=1.0
    )
    assert figs is None
    assert why == "time between tokens not measurable: tokens arrived in bursts"
    assert extras.tokens_received == 256


def test_usage_only_in_the_last_chunk_makes_the_cell_invalid_not_inflated() -> None:
    # Window [10, 20]: a request whose 100 tokens were all made from t=1 but credited at
    # its last chunk (t=12) would put 100 tokens inside the window (issue 15).
    r = _record(0, 0.0, 1.0, [12.0], [100], finished=True, end=12.0)
    r.unattributed = 99
    ok = _record(1, 0.0, 1.0, [11.0, 12.0, 13.0], [1, 2, 3])
    figs, _, why = cell_figures(
        [r, ok], 10.0, 20.0, [], [], first=None, last=None, ready_after_s=1.0
    )
    assert figs is None
    assert why == (
        "usage not continuous: 1 request(s) streamed text without a token count, so when "
        "their tokens were made is unknown (the server must send usage on every chunk: "
        "vLLM's continuous_usage_stats)"
    )
