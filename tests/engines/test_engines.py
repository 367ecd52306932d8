"""Each engine's facts from real-shaped text (bench.engines), detection over a scripted
transport, and token counting without continuous usage (bench.stream.tokens)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from bench.engines import base, llamacpp, sglang, trtllm
from bench.engines.detect import Detected, detect, family
from bench.run.capacity import kv_capacity
from bench.stream import metrics, tokens
from bench.stream.client import Client
from bench.stream.records import RequestRecord
from bench.stream.sse import Events

# The shape of SGLang's /metrics (docs/references/production_metrics.md, collector.py).
SGLANG = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.0
# HELP sglang:max_total_num_tokens Maximum total number of tokens in the KV cache pool.
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="meta-llama/Llama-3.1-8B-Instruct"} 161721.0
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.007507552643049313
sglang:spec_accept_length{model_name="meta-llama/Llama-3.1-8B-Instruct"} 2.5
sglang:spec_accept_rate{model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.75
sglang:generation_tokens_total{model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.557572e+06
sglang:time_to_first_token_seconds_bucket{le="0.04",model_name="m"} 1.0
"""
# llama-server's /metrics with --metrics (no labels; README of tools/server).
LLAMACPP = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 6886
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 3469
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 3
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
llamacpp:spec_decode_num_draft_tokens_total 23912
llamacpp:spec_decode_num_accepted_tokens_total 14739
llamacpp:spec_decode_num_drafts_total 5420
llamacpp:predicted_tokens_seconds nan
"""
PROPS = {
    "default_generation_settings": {"n_ctx": 8192, "params": {"n_predict": -1}},
    "total_slots": 4,
    "model_path": "/models/qwen.gguf",
}
TRTLLM = json.dumps(
    [
        {"iter": 1, "numActiveRequests": 1, "numQueuedRequests": 0},
        {
            "iter": 2,
            "numActiveRequests": 5,
            "numQueuedRequests": 3,
            "kvCacheStats": {
                "maxNumBlocks": 1000,
                "tokensPerBlock": 32,
                "usedNumBlocks": 10,
                "cacheHitRate": 0.25,
            },
        },
    ]
)


def test_sglang_metrics_land_on_the_canonical_keys() -> None:
    snap = sglang.parse(SGLANG, 1.0)
    assert snap.get(metrics.RUNNING) == 7.0 and snap.get(metrics.WAITING) == 2.0
    assert snap.get(metrics.GENERATION_TOKENS) == 7.557572e6
    assert snap.get(base.SPEC_ACCEPT_RATE) == 0.75
    assert snap.get(base.SPEC_ACCEPT_LENGTH) == 2.5
    assert snap.get(base.PREFIX_HIT_RATE) == pytest.approx(0.0075, abs=1e-4)
    cap = sglang.ENGINE.capacity(snap, {})
    assert cap == base.Capacity(
        161721, "metrics:sglang:max_total_num_tokens", "sglang:max_total_num_tokens=161721"
    )


def test_two_data_parallel_ranks_add_up_but_their_rates_do_not() -> None:
    text = "".join(
        f'sglang:{name}{{model_name="m",dp_rank="{rank}"}} {value}\n'
        for rank in (0, 1)
        for name, value in (("num_running_reqs", 3), ("max_total_num_tokens", 1000))
    )
    text += 'sglang:cache_hit_rate{dp_rank="0"} 0.2\nsglang:cache_hit_rate{dp_rank="1"} 0.4\n'
    snap = sglang.parse(text, 0.0)
    assert snap.get(metrics.RUNNING) == 6
    assert snap.get("sglang:max_total_num_tokens") == 2000
    assert snap.get(base.PREFIX_HIT_RATE) == pytest.approx(0.3)


def test_sglang_capacity_from_server_info_when_the_metrics_lack_it() -> None:
    probes = {"/get_server_info": {"internal_states": [{"max_total_num_tokens": 5000}]}}
    cap = sglang.ENGINE.capacity(sglang.parse("", 0.0), probes)
    assert cap is not None and cap.tokens == 5000
    assert cap.source == "endpoint:/get_server_info max_total_num_tokens"
    kv = kv_capacity(None, None, None, cap)
    assert (kv.tokens, kv.source) == (5000, "engine_endpoint")
    assert kv_capacity(None, 77, None, cap).source == "kv_budget"  # the flag still wins


def test_llamacpp_metrics_and_props() -> None:
    snap = llamacpp.parse(LLAMACPP, 2.0)
    assert snap.get(metrics.RUNNING) == 3 and snap.get(metrics.WAITING) == 1
    assert snap.get(metrics.SPEC_ACCEPTED) == 14739
    assert snap.get(metrics.SPEC_DRAFT_TOKENS) == 23912
    assert snap.get(metrics.SPEC_DRAFTS) == 5420
    assert "llamacpp:predicted_tokens_seconds" not in snap.values  # nan is passed over
    cap = llamacpp.ENGINE.capacity(snap, {"/props": PROPS})
    assert cap is not None and cap.tokens == 8192 * 4  # split slots, as with -np given
    assert cap.source == "endpoint:/props default_generation_settings.n_ctx x total_slots"
    assert llamacpp.ENGINE.max_model_len({"/props": PROPS}) == (
        8192,
        "endpoint:/props default_generation_settings.n_ctx",
    )
    assert llamacpp.ENGINE.capacity(snap, {"/props": {"total_slots": 4}}) is None


def test_a_unified_llamacpp_cache_is_read_from_the_server_log(tmp_path: Path) -> None:
    cap = llamacpp.ENGINE.capacity(None, {"/props": PROPS})
    log = tmp_path / "server.log"
    line = "srv load_model: n_slots = 4, n_ctx_slot = 8192, kv_unified = '{}'\n"
    log.write_text(line.format("false") + "restarted\n" + line.format("true"))
    kv = kv_capacity(None, None, log, cap)
    assert (kv.tokens, kv.source) == (8192, "startup_log")  # the last start counts
    log.write_text(line.format("false"))
    assert kv_capacity(None, None, log, cap).tokens == 32_768
    assert kv_capacity(None, None, tmp_path / "missing.log", cap).tokens == 32_768


def test_trtllm_reads_the_newest_iteration() -> None:
    snap = trtllm.parse(TRTLLM, 3.0)
    assert snap.get(metrics.RUNNING) == 5 and snap.get(metrics.WAITING) == 3
    assert snap.get(base.PREFIX_HIT_RATE) == 0.25
    cap = trtllm.ENGINE.capacity(snap, {})
    assert cap is not None and cap.tokens == 32_000
    assert trtllm.parse("[]", 0).values == {}
    assert trtllm.parse("{not json", 0).values == {}


def test_family_decides_by_the_metric_names() -> None:
    assert family(SGLANG) == "sglang"
    assert family(LLAMACPP) == "llamacpp"
    assert family('vllm:num_requests_running{model_name="m"} 1\n') == "vllm"
    assert family(TRTLLM) == "trtllm"
    assert family("python_gc_objects_collected_total 1\n") is None
    # A label value that looks like another engine's family is no family line.
    assert family('x{a="sglang:"} 1\n# llamacpp: in a comment\n') is None


def _detect(routes: dict[str, tuple[int, str]]) -> tuple[Detected, list[str]]:
    asked: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request.url.path)
        status, body = routes.get(request.url.path, (404, "Not Found"))
        return httpx.Response(status, text=body)

    async def go() -> Detected:
        client = Client("http://s", clock=lambda: 0.0, transport=httpx.MockTransport(handler))
        try:
            return await detect(client)
        finally:
            await client.aclose()

    return asyncio.run(go()), asked


def test_detection_by_metrics_then_endpoints_then_vllm() -> None:
    found, asked = _detect({"/metrics": (200, 'vllm:num_requests_running{a="b"} 1\n')})
    assert (found.engine.name, found.how) == ("vllm", "metrics:vllm:*")
    assert asked == ["/metrics"]  # vLLM found: nothing else asked
    found, _ = _detect({"/metrics": (200, LLAMACPP), "/props": (200, json.dumps(PROPS))})
    assert (found.engine.name, found.probes["/props"]) == ("llamacpp", PROPS)
    found, _ = _detect({"/metrics": (404, ""), "/server_info": (200, '{"model_path": "m"}')})
    assert (found.engine.name, found.how) == ("sglang", "endpoint:/server_info")
    found, _ = _detect({"/props": (200, json.dumps(PROPS))})
    assert (found.engine.name, found.how) == ("llamacpp", "endpoint:/props")
    found, _ = _detect({"/props": (200, "[1, 2]"), "/get_server_info": (200, "null")})
    assert found.engine.name == "vllm" and found.how.startswith("fallback:")


def test_chunk_text_and_tokenize_answers() -> None:
    assert tokens.chunk_text(b'{"choices":[{"delta":{"content":"Hi \\"x\\""}}]}') == 'Hi "x"'
    assert tokens.chunk_text(b'{"choices":[{"text":"abc"}]}') == "abc"
    assert tokens.chunk_text(b'{"choices":[{"delta":{"reasoning_content":"r"}}]}') == "r"
    assert tokens.chunk_text(b"{broken") == ""
    assert tokens.read_tokenize({"count": 3, "tokens": [1, 2, 3], "token_strs": None}) == (3, None)
    llama = {"tokens": [{"id": 1, "piece": "He"}, {"id": 2, "piece": "llo"}]}
    assert tokens.read_tokenize(llama) == (2, [b"He", b"llo"])
    # llama.cpp gives a piece that is no valid UTF-8 by itself as its byte values.
    split = {"tokens": [{"id": 7, "piece": [0xC3]}, {"id": 8, "piece": [0xA9]}]}
    assert tokens.read_tokenize(split) == (2, [b"\xc3", b"\xa9"])
    assert tokens.read_tokenize({"tokens": [{"id": 7, "piece": [300]}]}) == (1, None)
    assert tokens.read_tokenize({"tokens": [5, 6]}) == (2, None)
    assert tokens.read_tokenize({"count": True}) is None
    assert tokens.read_tokenize([1]) is None


def test_boundaries_place_each_token_in_the_chunk_that_completed_it() -> None:
    # Chunks "He", "llo wor", "ld"; tokens "Hello", " world".
    exact, ok = tokens.boundaries(["He", "llo wor", "ld"], 2, [b"Hello", b" world"])
    assert ok and exact == [0, 1, 2]
    # The server's own total wins; the pieces place the tokens.
    scaled, ok = tokens.boundaries(["He", "llo wor", "ld"], 4, [b"Hello", b" world"])
    assert ok and scaled == [0, 2, 4]
    share, ok = tokens.boundaries(["ab", "cd"], 10, [b"x"])  # pieces do not spell the text
    assert not ok and share == [5, 10]
    # "é" is two byte tokens: the chunk that completes the character holds both.
    two, ok = tokens.boundaries(["a", "é"], 3, [b"a", b"\xc3", b"\xa9"])
    assert ok and two == [1, 3]


def _stream(
    lines: list[bytes], counting: tokens.Counting | None, now: Callable[[int], float]
) -> RequestRecord:
    record = RequestRecord(worker=0, start_s=0.0)
    events = Events(record, counting)
    for i, line in enumerate(lines):
        if events.feed(line, now(i)):
            break
    return record


def _llama_chunk(text: str, predicted: int | None) -> bytes:
    obj: dict[str, object] = {"choices": [{"index": 0, "delta": {"content": text}}]}
    if predicted is not None:
        obj["timings"] = {"prompt_n": 10, "predicted_n": predicted}
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def test_the_engine_s_own_per_chunk_count_is_read_like_usage() -> None:
    counting = tokens.Counting(chunk_count=llamacpp.PREDICTED_N)
    lines = [_llama_chunk("a", 1), _llama_chunk("bc", 3), b"data: [DONE]\n\n"]
    record = _stream(lines, counting, float)
    assert list(record.chunk_tokens) == [1, 3] and list(record.chunk_s) == [0.0, 1.0]
    assert record.unattributed == 0 and record.finished


def test_kept_text_is_counted_after_the_cell_never_all_at_the_last_chunk() -> None:
    counting = tokens.Counting(capture_text=True)
    usage = b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\n'
    lines = [_llama_chunk("He", None), _llama_chunk("llo wor", None), _llama_chunk("ld", None)]
    record = _stream([*lines, usage, b"data: [DONE]\n\n"], counting, float)
    # As streamed: the final usage stamps both tokens at its chunk (time 3).
    assert list(record.chunk_s) == [3.0] and record.unattributed == 3

    async def tokenize(text: str) -> tuple[int, list[bytes] | None]:
        assert text == "Hello world"
        return 2, [b"Hello", b" world"]

    assert asyncio.run(tokens.attribute([record], tokenize)) == "tokenized_text"
    assert list(record.chunk_s) == [1.0, 2.0] and list(record.chunk_tokens) == [1, 2]
    assert record.unattributed == 0 and record.texts is None


def test_kept_text_is_bounded() -> None:
    record = RequestRecord(worker=0, start_s=0.0)
    tokens.keep(record, 0.0, "x" * tokens.MAX_TEXT_CHARS)
    tokens.keep(record, 1.0, "y")
    assert record.texts is None and record.text_chars == -1
    tokens.keep(record, 2.0, "z")  # dropped for good
    assert record.texts is None
