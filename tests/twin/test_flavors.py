"""The twin's engine flavors, driven as real processes over real sockets: each speaks its
engine's endpoints, metric names and chunk/usage behaviour (docs/engines/*.md)."""

from __future__ import annotations

import collections.abc

import httpx
import pytest

from bench.engines import detect, llamacpp, sglang
from tests.support.sse import chat_body, stream_chat
from tests.support.twinproc import start_twin

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def llama() -> collections.abc.Iterator[httpx.Client]:
    with (
        start_twin("tiny", speed=20.0, extra_args=["--engine", "llamacpp"]) as proc,
        httpx.Client(base_url=proc.url, timeout=30) as client,
    ):
        yield client


@pytest.fixture(scope="module")
def sgl() -> collections.abc.Iterator[httpx.Client]:
    with (
        start_twin("tiny", speed=20.0, extra_args=["--engine", "sglang"]) as proc,
        httpx.Client(base_url=proc.url, timeout=30) as client,
    ):
        yield client


def test_llamacpp_endpoints(llama: httpx.Client) -> None:
    assert llama.get("/health").json() == {"status": "ok"}
    props = llama.get("/props").json()
    assert llamacpp.looks_like({"/props": props})
    assert props["default_generation_settings"]["n_ctx"] * props["total_slots"] == 2048
    (card,) = llama.get("/v1/models").json()["data"]
    assert "max_model_len" not in card and card["owned_by"] == "llamacpp"
    pieces = llama.post("/tokenize", json={"content": " lorem ipsum", "with_pieces": True})
    assert [t["piece"] for t in pieces.json()["tokens"]] == [" lorem", " ipsum"]
    assert llama.get("/get_server_info").status_code == 404
    text = llama.get("/metrics").text
    assert detect.family(text) == "llamacpp" and "vllm:" not in text
    assert "llamacpp:requests_processing 0.0" in text  # unlabelled


def test_llamacpp_completions_usage_on_the_finish_chunk_asked_or_not(
    llama: httpx.Client,
) -> None:
    body = {"prompt": "hello", "max_tokens": 6, "stream": True, "ignore_eos": True}
    got = stream_chat(llama, body, path="/v1/completions")
    *text_chunks, last = got.chunks
    assert got.done and all("usage" not in c and "timings" not in c for c in text_chunks)
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["usage"]["completion_tokens"] == 6 == last["timings"]["predicted_n"]


def test_llamacpp_chat_ignores_continuous_usage_and_counts_with_timings(
    llama: httpx.Client,
) -> None:
    got = stream_chat(llama, chat_body("hi", 8, timings_per_token=True))
    role, *text_chunks, finish, usage_only = got.chunks
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert all("usage" not in c for c in [role, *text_chunks, finish])
    counts = [c["timings"]["predicted_n"] for c in text_chunks]
    assert counts == sorted(set(counts)) and counts[-1] == 8
    assert usage_only["choices"] == [] and usage_only["usage"]["completion_tokens"] == 8
    plain = stream_chat(llama, chat_body("hi", 4, stream_options=None))
    assert all("usage" not in c for c in plain.chunks)
    assert plain.chunks[-1]["timings"]["predicted_n"] == 4


def test_sglang_endpoints_and_continuous_usage_without_include_usage(sgl: httpx.Client) -> None:
    info = sgl.get("/get_server_info").json()
    assert sglang.looks_like({"/get_server_info": info})
    assert info["internal_states"][0]["max_total_num_tokens"] == 2048
    assert sgl.get("/props").status_code == 404
    (card,) = sgl.get("/v1/models").json()["data"]
    assert card["max_model_len"] == 4096 and card["owned_by"] == "sglang"
    text = sgl.get("/metrics").text
    assert detect.family(text) == "sglang"
    assert 'sglang:max_total_num_tokens{model_name="tiny"} 2048.0' in text
    got = stream_chat(sgl, chat_body("hi", 5, stream_options={"continuous_usage_stats": True}))
    usages = [c["usage"]["completion_tokens"] for c in got.content_chunks()]
    assert usages == sorted(usages) and usages[-1] == 5
