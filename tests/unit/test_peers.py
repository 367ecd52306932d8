"""tools.peers without sockets: the truth log's arithmetic on a hand-written log, and the
parsers of vLLM's and AIPerf's result files on hand-written files in their formats."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tools import peers

# Three requests (arrival; chunks [send time, tokens]); times from 1000.0.
TRUTH = [
    {"request_id": "a", "arrival": 1000.0, "outcome": "finished", "prompt_tokens": 100,
     "output_tokens": 5, "chunks": [[1000.1, 1], [1000.2, 2], [1000.5, 2]]},
    {"request_id": "b", "arrival": 1000.5, "outcome": "finished", "prompt_tokens": 200,
     "output_tokens": 3, "chunks": [[1000.5, 0], [1000.8, 1], [1000.9, 2]]},
    {"request_id": "c", "arrival": 1001.0, "outcome": "finished", "prompt_tokens": 300,
     "output_tokens": 4, "chunks": [[1001.2, 2], [1001.6, 1], [1002.0, 1]]},
    # outside the window, or not finished: never counted
    {"request_id": "d", "arrival": 999.0, "outcome": "finished", "prompt_tokens": 9,
     "output_tokens": 2, "chunks": [[999.1, 1], [999.2, 1]]},
    {"request_id": "e", "arrival": 1001.5, "outcome": "cancelled", "prompt_tokens": 9,
     "output_tokens": 1, "chunks": [[1001.6, 1]], "released": 1001.7},
]  # fmt: skip


def test_truth_figures(tmp_path: Path) -> None:
    log = tmp_path / "truth.jsonl"
    log.write_text("".join(json.dumps(x) + "\n" for x in TRUTH) + '{"cut', encoding="utf-8")
    lines = peers.window(peers.read_truth(log), 1000.0, 1001.9)
    assert [x["request_id"] for x in lines] == ["a", "b", "c"]
    got = peers.truth_figures(lines)
    # TTFT: the first chunk carrying tokens minus arrival: 0.1, 0.3 (b's empty chunk is not
    # a token), 0.2 -> median 0.2 s
    assert got.ttft_p50_ms == pytest.approx(200.0)
    # TPOT: (last - first) / (out - 1): 0.4/4 = 0.1, 0.1/2 = 0.05, 0.8/3 = 0.2667 -> 0.1 s
    assert got.tpot_p50_ms == pytest.approx(100.0)
    # span: first arrival 1000.0 to last chunk 1002.0 = 2 s; 3 requests, 12 tokens
    assert got.req_s == pytest.approx(1.5)
    assert got.out_tok_s == pytest.approx(6.0)
    assert got.n == 3
    assert got.prompt == pytest.approx(200.0)


def test_truth_median_of_even_count_interpolates() -> None:
    lines = [dict(x) for x in TRUTH[:2]]
    # TTFTs 0.1 and 0.3: numpy's p50 (and every tool's) is their mean
    assert peers.truth_figures(lines).ttft_p50_ms == pytest.approx(200.0)


def test_truth_figures_refuse_an_empty_window() -> None:
    with pytest.raises(ValueError, match="no requests"):
        peers.truth_figures([])


# The keys `vllm bench serve --save-result` writes (vllm 0.32.0), values made up.
VLLM_RESULT = {
    "date": "20261206-104000", "endpoint_type": "openai-chat", "backend": "openai-chat",
    "label": None, "model_id": "tiny", "tokenizer_id": "/m", "num_prompts": 4,
    "request_rate": 2.0, "burstiness": 1.0, "max_concurrency": None, "duration": 2.5,
    "completed": 4, "failed": 0, "total_input_tokens": 1000, "total_output_tokens": 128,
    "request_throughput": 1.6, "request_goodput": None, "output_throughput": 51.2,
    "total_token_throughput": 451.2, "max_output_tokens_per_s": 60.0,
    "max_concurrent_requests": 2, "mean_ttft_ms": 40.0, "median_ttft_ms": 38.5,
    "std_ttft_ms": 3.0, "p50_ttft_ms": 38.5, "mean_tpot_ms": 5.0, "median_tpot_ms": 4.75,
    "std_tpot_ms": 0.5, "p50_tpot_ms": 4.75, "mean_itl_ms": 9.0, "median_itl_ms": 8.0,
    "std_itl_ms": 2.0, "p50_itl_ms": 8.0, "mean_e2el_ms": 190.0, "median_e2el_ms": 188.0,
    "std_e2el_ms": 5.0, "p50_e2el_ms": 188.0,
}  # fmt: skip


def test_parse_vllm_result() -> None:
    got = peers.parse_vllm(json.loads(json.dumps(VLLM_RESULT)))
    assert got.values() == (1.6, 51.2, 38.5, 4.75)
    assert got.n == 4
    # against a twin at speed 10: server rates are 10x slower, latencies 10x longer
    slow = peers.to_server_time(got, 10.0)
    assert slow.values() == pytest.approx((0.16, 5.12, 385.0, 47.5))


def test_parse_aiperf_result() -> None:
    stat = {"unit": "ms", "avg": 1.0, "p50": 2.0, "p90": 3.0}
    result = {
        "request_throughput": {"unit": "requests/sec", "avg": 3.5},
        "output_token_throughput": {"unit": "tokens/sec", "avg": 112.0},
        "time_to_first_token": {**stat, "p50": 24.5},
        "inter_token_latency": {**stat, "p50": 4.1},
        "completed_request_count": {"unit": "requests", "avg": 10.0},
    }
    assert peers.parse_aiperf(result).values() == (3.5, 112.0, 24.5, 4.1)


def test_parse_ours() -> None:
    point = {
        "achieved_rate": 1.9, "output_tok_s": 60.8, "completed": 200,
        "ttft": {"n": 200, "mean": 0.05, "p50": 0.048, "p90": 0.07, "p99": 0.09},
        "tpot": {"n": 200, "mean": 0.005, "p50": 0.0045, "p90": 0.006, "p99": 0.007},
    }  # fmt: skip
    got = peers.parse_ours({"workload": {"points": [point]}})
    assert got.values() == pytest.approx((1.9, 60.8, 48.0, 4.5))


def test_table_marks_what_is_over_3_percent() -> None:
    f = peers.Figures(2.0, 64.0, 50.0, 5.0, 200, 256.0)
    g = peers.Figures(2.0, 64.0, 55.0, 5.1, 200, 256.0)
    text = peers.table({("ours", 2.0): (f, f), ("vllm-chat", 2.0): (g, f)})
    rows = [r for r in text.splitlines() if r.startswith("| vllm-chat")]
    ttft = next(r for r in rows if "TTFT" in r)
    assert "+10.0 % **>3 %**" in ttft  # the tool against the truth
    assert "-9.1 % **>3 %**" in ttft  # ours against the tool
    tpot = next(r for r in rows if "TPOT" in r)
    assert "+2.0 %" in tpot and ">3" not in tpot
    assert math.isnan(peers.delta_pct(1.0, 0.0))
