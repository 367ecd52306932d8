"""What a benchmark client needs to know about llama.cpp's llama-server, asserted on the real
server (built by tests/setup/llamacpp.sh, started by server.py) over plain HTTP.

If one of these fails after a llama.cpp upgrade, docs/engines/llamacpp-observed.md needs
revisiting before a client's numbers can be trusted: where usage comes in a stream, what a
chunk holds, what /metrics counts, how big the KV cache is, and how to tell the engine apart.

The model has random weights: what it writes is unknown, so every assertion holds for any
output. Where a fact needs a known output (a chunk holding two tokens) a grammar forces it.
"""

from __future__ import annotations

import json
import socket
import time
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.llamacpp.server import CONTEXT, MODEL_ALIAS, SLOTS, LlamaServer
from tests.support import prom

pytestmark = [pytest.mark.llamacpp, pytest.mark.integration]

# llama.cpp release b11312 is commit 0c1e57098, the one in llama-cpp-python 0.3.36's sdist;
# tests/setup/llamacpp.sh gives CMake both (the sdist's depth-1 .git would say "b1").
BUILD_INFO = "b11312-0c1e57098"
BOS = "<|begin_of_text|>"
PROMPT = "The cat sat on the mat, and the dog lay by the door."
COUNTERS = {
    "llamacpp:prompt_tokens_total",
    "llamacpp:prompt_tokens_cached_total",
    "llamacpp:prompt_seconds_total",
    "llamacpp:tokens_predicted_total",
    "llamacpp:tokens_predicted_seconds_total",
    "llamacpp:n_decode_total",
    "llamacpp:n_tokens_max",  # typed "counter", though it is a maximum
    "llamacpp:spec_decode_num_draft_tokens_total",
    "llamacpp:spec_decode_num_accepted_tokens_total",
    "llamacpp:spec_decode_num_drafts_total",
}
GAUGES = {
    "llamacpp:prompt_tokens_seconds",
    "llamacpp:predicted_tokens_seconds",
    "llamacpp:requests_processing",
    "llamacpp:requests_deferred",
    "llamacpp:n_busy_slots_per_decode",
}
IDLE_DEADLINE_S = 120.0


@dataclass(frozen=True)
class Stream:
    headers: httpx.Headers
    chunks: list[dict[str, Any]]  # every data: chunk before [DONE], parsed


def stream(client: httpx.Client, path: str, body: dict[str, Any]) -> Stream:
    """One streaming request, read to the end; checks it is SSE ending in [DONE]."""
    chunks: list[dict[str, Any]] = []
    done = False
    with client.stream("POST", path, json={"stream": True, **body}) as response:
        assert response.status_code == 200, response.read()
        for line in response.iter_lines():
            if not line:
                continue
            assert line.startswith("data: "), line  # no event:, id: or comment lines
            assert not done, "data after [DONE]"
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                done = True
            else:
                chunks.append(json.loads(data))
        headers = response.headers
    assert done, "stream ended without [DONE]"
    return Stream(headers, chunks)


def completion(max_tokens: int, prompt: str = PROMPT, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL_ALIAS,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "ignore_eos": True,
        **extra,
    }


def metrics(server: LlamaServer) -> dict[str, float]:
    samples = prom.scrape(server.url)
    assert all(not s.labels for s in samples), "llama-server's metrics carry no labels"
    return {s.name: s.value for s in samples}


def wait_idle(server: LlamaServer) -> dict[str, float]:
    """The metrics once no request is processing (a cancelled stream ends a little later)."""
    deadline = time.monotonic() + IDLE_DEADLINE_S
    while True:
        now = metrics(server)
        if now["llamacpp:requests_processing"] == 0:
            return now
        assert time.monotonic() < deadline, "llama-server still busy"
        time.sleep(0.2)


# (a) Streaming /v1/completions


@pytest.mark.parametrize(
    "stream_options",
    [
        None,
        {"include_usage": False},
        {"include_usage": True},
        {"include_usage": True, "continuous_usage_stats": True},
    ],
    ids=["none", "no-usage", "usage", "continuous"],
)
def test_completion_stream_has_usage_only_on_its_finish_chunk_whatever_is_asked(
    llama_server: LlamaServer, stream_options: dict[str, bool] | None
) -> None:
    extra: dict[str, Any] = {} if stream_options is None else {"stream_options": stream_options}
    with llama_server.client() as client:
        got = stream(client, "/v1/completions", completion(24, **extra))
    *text_chunks, last = got.chunks
    assert got.headers["content-type"] == "text/event-stream"
    # Text chunks: one choice with text and no finish reason; no usage, no timings.
    for chunk in text_chunks:
        assert [c["finish_reason"] for c in chunk["choices"]] == [None]
        assert "usage" not in chunk and "timings" not in chunk
    # A chunk holds the text of one token or more, so there are at most max_tokens of them.
    assert 1 <= len(text_chunks) <= 24
    # The finish chunk carries usage (include_usage false or absent: still there;
    # continuous_usage_stats: ignored) and llama.cpp's own timings. No usage-only chunk with
    # empty choices follows, unlike OpenAI's (and this server's own chat) streams.
    assert last["choices"] == [
        {"text": "", "index": 0, "logprobs": None, "finish_reason": "length"}
    ]
    usage, timings = last["usage"], last["timings"]
    assert usage["completion_tokens"] == 24 == timings["predicted_n"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + 24
    assert usage["prompt_tokens_details"]["cached_tokens"] == timings["cache_n"]
    assert timings["prompt_n"] + timings["cache_n"] == usage["prompt_tokens"]
    # Every chunk: same id (prefixed chatcmpl- even for text completions), the alias as model,
    # and the build as system_fingerprint.
    assert {c["id"] for c in got.chunks} == {last["id"]}
    assert last["id"].startswith("chatcmpl-")
    assert {c["object"] for c in got.chunks} == {"text_completion"}
    assert {c["model"] for c in got.chunks} == {MODEL_ALIAS}
    assert {c["system_fingerprint"] for c in got.chunks} == {BUILD_INFO}


def test_timings_per_token_put_a_running_token_count_on_every_chunk(
    llama_server: LlamaServer,
) -> None:
    with llama_server.client() as client:
        got = stream(client, "/v1/completions", completion(32, timings_per_token=True))
    counts = [c["timings"]["predicted_n"] for c in got.chunks]
    *text_counts, final_count = counts
    assert text_counts == sorted(set(text_counts))  # strictly increasing, one or more a chunk
    assert text_counts[0] >= 1
    # The last text chunk has all 32 unless the output ends inside a UTF-8 character (below).
    assert text_counts[-1] <= final_count == 32 == got.chunks[-1]["usage"]["completion_tokens"]
    assert all("usage" not in c for c in got.chunks[:-1])


def test_an_end_of_sequence_token_is_counted_but_not_written(llama_server: LlamaServer) -> None:
    """A grammar allows "x" and then only EOS: finish_reason "stop", and usage counts 2."""
    body = {"model": MODEL_ALIAS, "prompt": PROMPT, "max_tokens": 50, "grammar": 'root ::= "x"'}
    with llama_server.client() as client:
        got = stream(client, "/v1/completions", body)
    *text_chunks, last = got.chunks
    assert "".join(c["choices"][0]["text"] for c in text_chunks) == "x"
    assert last["choices"][0]["finish_reason"] == "stop"
    assert last["usage"]["completion_tokens"] == 2 == last["timings"]["predicted_n"]


E_ACUTE = 'root ::= "é"*'  # a grammar: output "é" only, each one two byte tokens


@pytest.mark.parametrize(
    ("max_tokens", "chunk_counts"), [(8, [2, 4, 6, 8]), (7, [2, 4, 6])], ids=["even", "odd"]
)
def test_a_character_split_across_tokens_comes_in_one_chunk_or_never(
    llama_server: LlamaServer, max_tokens: int, chunk_counts: list[int]
) -> None:
    """ "é" is two byte tokens in this vocabulary; the server holds back the first (an
    incomplete UTF-8 sequence) and sends both in one chunk: chunks are not tokens. A stream
    that stops after a first half never sends it; the usage still counts it."""
    with llama_server.client() as client:
        pieces = client.post("/tokenize", json={"content": "é", "with_pieces": True}).json()
        got = stream(
            client,
            "/v1/completions",
            completion(max_tokens, grammar=E_ACUTE, timings_per_token=True),
        )
        whole = client.post("/v1/completions", json=completion(max_tokens, grammar=E_ACUTE)).json()
        retokenized = client.post("/tokenize", json={"content": "é" * 4}).json()["tokens"]
    # Pieces that are not valid UTF-8 come back as byte lists.
    assert [p["piece"] for p in pieces["tokens"]] == [[0xC3], [0xA9]]
    assert len(retokenized) == 8
    *text_chunks, last = got.chunks
    assert [c["choices"][0]["text"] for c in text_chunks] == ["é"] * (max_tokens // 2)
    assert [c["timings"]["predicted_n"] for c in text_chunks] == chunk_counts
    assert last["usage"]["completion_tokens"] == max_tokens == last["timings"]["predicted_n"]
    # Not streamed, the dangling first half comes as U+FFFD.
    assert whole["choices"][0]["text"] == "é" * (max_tokens // 2) + "\ufffd" * (max_tokens % 2)


def chat(max_tokens: int, **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL_ALIAS,
        "messages": [{"role": "user", "content": PROMPT}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        **extra,
    }


def test_chat_stream_puts_usage_in_a_last_chunk_with_empty_choices_only_when_asked(
    llama_server: LlamaServer,
) -> None:
    # ASCII only (a grammar), so that the first token makes the first chunk (see below).
    body = chat(6, grammar="root ::= [a-z ]*")
    with llama_server.client() as client:
        asked = stream(
            client, "/v1/chat/completions", {**body, "stream_options": {"include_usage": True}}
        )
        plain = stream(client, "/v1/chat/completions", body)
    for got in (asked, plain):
        assert got.chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": None}
        assert {c["object"] for c in got.chunks} == {"chat.completion.chunk"}
    *_, finish, usage_chunk = asked.chunks
    assert finish["choices"][0]["finish_reason"] == "length"
    assert finish["choices"][0]["delta"] == {}
    assert usage_chunk["choices"] == []
    assert usage_chunk["usage"]["completion_tokens"] == 6
    assert "timings" in usage_chunk and "timings" not in finish
    # Without include_usage: no usage anywhere; the timings move to the finish chunk.
    assert all("usage" not in c for c in plain.chunks)
    assert plain.chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert plain.chunks[-1]["timings"]["predicted_n"] == 6


def test_chat_stream_has_no_role_chunk_when_the_first_token_is_half_a_character(
    llama_server: LlamaServer,
) -> None:
    """The role delta rides on the first token's chunk; when that token is held back (an
    incomplete UTF-8 sequence) the stream starts with content and never names the role."""
    with llama_server.client() as client:
        got = stream(client, "/v1/chat/completions", chat(4, grammar=E_ACUTE))
    *text_chunks, finish = got.chunks
    assert [c["choices"][0]["delta"] for c in text_chunks] == [{"content": "é"}] * 2
    assert finish["choices"][0] == {"finish_reason": "length", "index": 0, "delta": {}}


# (b) /metrics


def test_metrics_are_these_unlabelled_families_with_no_kv_cache_gauge(
    llama_server: LlamaServer,
) -> None:
    response = httpx.get(f"{llama_server.url}/metrics", timeout=30.0)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/plain; version=0.0.4"
    types = dict(
        line.split()[2:4] for line in response.text.splitlines() if line.startswith("# TYPE ")
    )
    assert types == {name: "counter" for name in COUNTERS} | {name: "gauge" for name in GAUGES}
    assert set(metrics(llama_server)) == COUNTERS | GAUGES
    assert not [name for name in types if "kv" in name or "cache_usage" in name]


def test_counters_advance_by_exactly_what_usage_and_timings_report(
    llama_server: LlamaServer,
) -> None:
    before = wait_idle(llama_server)
    finals = []
    with llama_server.client() as client:
        for i, n in enumerate([5, 17, 40]):
            got = stream(client, "/v1/completions", completion(n, prompt=f"{i}: {PROMPT}"))
            finals.append(got.chunks[-1])
        # The same prompt again reuses all of it but its last token from the slot's cache
        # (cache_prompt defaults to true); cache_prompt false processes all of it again.
        for cache_prompt in (True, True, False):
            got = stream(client, "/v1/completions", completion(3, cache_prompt=cache_prompt))
            finals.append(got.chunks[-1])
    after = wait_idle(llama_server)

    def delta(name: str) -> float:
        return after[f"llamacpp:{name}"] - before[f"llamacpp:{name}"]

    usage = [f["usage"] for f in finals]
    timings = [f["timings"] for f in finals]
    assert usage[-2]["prompt_tokens_details"]["cached_tokens"] == usage[-2]["prompt_tokens"] - 1
    assert usage[-1]["prompt_tokens_details"]["cached_tokens"] == 0
    completion_tokens = sum(u["completion_tokens"] for u in usage)
    assert completion_tokens == 5 + 17 + 40 + 3 + 3 + 3
    assert delta("tokens_predicted_total") == completion_tokens
    assert delta("tokens_predicted_total") == sum(t["predicted_n"] for t in timings)
    # prompt_tokens_total leaves out what came from the cache; the cached counter has it.
    assert delta("prompt_tokens_total") == sum(t["prompt_n"] for t in timings)
    assert delta("prompt_tokens_cached_total") == sum(t["cache_n"] for t in timings)
    assert delta("prompt_tokens_total") + delta("prompt_tokens_cached_total") == sum(
        u["prompt_tokens"] for u in usage
    )
    assert delta("n_decode_total") > 0
    assert delta("prompt_seconds_total") > 0 and delta("tokens_predicted_seconds_total") > 0
    assert after["llamacpp:requests_deferred"] == 0


def test_requests_processing_counts_a_running_stream(llama_server: LlamaServer) -> None:
    before = wait_idle(llama_server)
    with (
        llama_server.client() as client,
        client.stream(
            "POST", "/v1/completions", json={**completion(4_000), "stream": True}
        ) as response,
    ):
        # Keep the iterator: dropping it closes the connection, which cancels the request.
        events = (line for line in response.iter_lines() if line)
        assert next(events).startswith("data: {")
        during = metrics(llama_server)
        slots = client.get("/slots").json()
        assert next(events).startswith("data: {")  # still streaming
    assert during["llamacpp:requests_processing"] == 1
    assert during["llamacpp:requests_deferred"] == 0
    # A request's generated tokens are counted when it ends, not while it runs.
    predicted = "llamacpp:tokens_predicted_total"
    assert during[predicted] == before[predicted]
    assert sorted(s["is_processing"] for s in slots) == [False] * (SLOTS - 1) + [True]
    # Closing the stream cancels the request; the slot is free again soon after.
    after = wait_idle(llama_server)
    assert after[predicted] > before[predicted]  # a cancelled request's tokens count too


# (c) /props, /slots, /v1/models, /health, /version


def test_props_report_per_slot_context_slots_model_and_build(llama_server: LlamaServer) -> None:
    with llama_server.client() as client:
        props = client.get("/props").json()
        slots = client.get("/slots").json()
    # -np 4 -c 32768: the KV cache holds 32,768 tokens in all, split into 4 slots of 8,192
    # (kv_unified is false when -np is given); n_ctx is one slot's.
    assert props["default_generation_settings"]["n_ctx"] == CONTEXT // SLOTS == 8_192
    assert props["total_slots"] == SLOTS
    assert [(s["id"], s["n_ctx"]) for s in slots] == [(i, 8_192) for i in range(SLOTS)]
    assert sum(s["n_ctx"] for s in slots) == CONTEXT
    assert "n_slots = 4, n_ctx_slot = 8192, kv_unified = 'false'" in llama_server.log_text()
    assert props["model_path"] == str(llama_server.model)
    assert props["model_alias"] == MODEL_ALIAS
    assert props["build_info"] == BUILD_INFO
    assert props["model_ftype"] == "all F32"
    assert (props["endpoint_metrics"], props["endpoint_slots"], props["endpoint_props"]) == (
        True,
        True,
        False,
    )
    assert props["bos_token"] == BOS
    assert props["chat_template"].startswith("{{ bos_token }}")
    assert props["default_generation_settings"]["params"]["ignore_eos"] is False


def test_models_health_and_no_version_endpoint(llama_server: LlamaServer) -> None:
    with llama_server.client() as client:
        models = client.get("/v1/models").json()
        health = client.get("/health")
        version = client.get("/version")
        unknown_model = client.post(
            "/v1/completions", json=completion(1) | {"model": "no-such-model"}
        )
    (model,) = models["data"]
    assert model["id"] == MODEL_ALIAS
    assert model["owned_by"] == "llamacpp"
    assert {k: model["meta"][k] for k in ("n_ctx", "n_ctx_train", "n_vocab", "n_embd")} == {
        "n_ctx": 8_192,
        "n_ctx_train": 32_768,
        "n_vocab": 4_096,
        "n_embd": 64,
    }
    # An Ollama-style list comes alongside OpenAI's.
    assert [m["name"] for m in models["models"]] == [MODEL_ALIAS]
    assert (health.status_code, health.json()) == (200, {"status": "ok"})
    assert version.status_code == 404
    assert version.json()["error"]["type"] == "not_found_error"
    # One model per server: "model" is not checked, the answer names the alias.
    assert unknown_model.status_code == 200
    assert unknown_model.json()["model"] == MODEL_ALIAS


# (d) /tokenize and /detokenize


def test_tokenize_counts_the_prompt_as_usage_does_once_bos_is_added(
    llama_server: LlamaServer,
) -> None:
    with llama_server.client() as client:
        plain = client.post("/tokenize", json={"content": PROMPT}).json()["tokens"]
        special = client.post("/tokenize", json={"content": PROMPT, "add_special": True}).json()
        text = client.post("/detokenize", json={"tokens": plain}).json()["content"]
        answer = client.post("/v1/completions", json=completion(1, cache_prompt=False)).json()
        bos = client.post(
            "/tokenize", json={"content": BOS, "add_special": False, "parse_special": True}
        ).json()["tokens"]
    # add_special defaults to false: no BOS. The completion's prompt count includes it.
    assert special["tokens"] == bos + plain
    assert answer["usage"]["prompt_tokens"] == len(special["tokens"]) == len(plain) + 1
    assert text == PROMPT


def test_detokenize_of_tokenize_gives_back_the_streamed_text(llama_server: LlamaServer) -> None:
    with llama_server.client() as client:
        got = stream(client, "/v1/completions", completion(48))
        streamed = "".join(c["choices"][0]["text"] for c in got.chunks)
        tokens = client.post("/tokenize", json={"content": streamed}).json()["tokens"]
        back = client.post("/detokenize", json={"tokens": tokens}).json()["content"]
    assert back == streamed
    # Re-tokenizing the text need not give the generated tokens back (a random model picks
    # non-canonical splits, and a stray byte comes out as U+FFFD): count from usage or
    # timings, not from the text.
    assert got.chunks[-1]["usage"]["completion_tokens"] == 48
    assert tokens


def test_a_prompt_of_a_few_thousand_tokens_fits_a_slot(llama_server: LlamaServer) -> None:
    words = " ".join(["the cat and the dog"] * 700)
    with llama_server.client(timeout_s=600.0) as client:
        count = len(client.post("/tokenize", json={"content": words}).json()["tokens"])
        got = stream(client, "/v1/completions", completion(4, prompt=words, cache_prompt=False))
        too_long = client.post(
            "/v1/completions", json=completion(4, prompt=words * 3, cache_prompt=False)
        )
    assert 3_000 < count < 8_192
    assert got.chunks[-1]["usage"]["prompt_tokens"] == count + 1
    # Over one slot's 8,192 tokens: refused with the counts, not truncated.
    assert too_long.status_code == 400
    error = too_long.json()["error"]
    assert error["type"] == "exceed_context_size_error"
    assert error["n_ctx"] == 8_192
    assert error["n_prompt_tokens"] > 8_192


# (e) Headers


def test_every_response_names_llamacpp_in_its_server_header(llama_server: LlamaServer) -> None:
    with llama_server.client() as client:
        responses = [
            client.get("/health"),
            client.get("/v1/models"),
            client.get("/no-such-path"),
            client.post("/v1/completions", json=completion(1)),
        ]
        got = stream(client, "/v1/completions", completion(1))
    assert [r.headers["server"] for r in responses] == ["llama.cpp"] * 4
    assert responses[2].status_code == 404
    assert got.headers["server"] == "llama.cpp"
    assert got.headers["x-accel-buffering"] == "no"
    assert "x-request-id" not in got.headers


def raw_request(path: str, body: dict[str, Any]) -> bytes:
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


def raw_response(reader: IO[bytes]) -> tuple[str, dict[str, str], bytes]:
    """Status line, headers (lower-case names) and body, sized or chunked."""
    status = reader.readline().decode().strip()
    headers = {}
    while (line := reader.readline()) not in (b"\r\n", b""):
        name, value = line.decode().split(":", 1)
        headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, reader.read(int(headers["content-length"]))
    assert headers["transfer-encoding"] == "chunked"
    body = b""
    while size := int(reader.readline().strip(), 16):
        body += reader.read(size)
        assert reader.read(2) == b"\r\n"
    assert reader.read(2) == b"\r\n"  # no trailers
    return status, headers, body


def test_the_connection_is_closed_after_a_stream_despite_its_keep_alive_header(
    llama_server: LlamaServer,
) -> None:
    """Plain answers keep the connection open; a streamed one ends with the server closing
    it, although its headers promise keep-alive. A client that pools connections must not
    send the next request on it."""
    url = urlsplit(llama_server.url)
    assert url.hostname is not None and url.port is not None
    with (
        socket.create_connection((url.hostname, url.port), timeout=60.0) as sock,
        sock.makefile("rb") as reader,
    ):
        for _ in range(2):
            sock.sendall(raw_request("/tokenize", {"content": "the cat"}))
            status, headers, body = raw_response(reader)
            assert status == "HTTP/1.1 200 OK"
            assert headers["keep-alive"] == "timeout=5, max=100"
            assert json.loads(body)["tokens"]
        sock.sendall(raw_request("/v1/completions", {**completion(3), "stream": True}))
        status, headers, body = raw_response(reader)
        assert status == "HTTP/1.1 200 OK"
        assert headers["keep-alive"] == "timeout=5, max=100"
        assert "connection" not in headers
        assert body.endswith(b"data: [DONE]\n\n")
        ended = time.monotonic()
        assert reader.read(1) == b""  # end of file: the server closed its side
        # At once, not when the advertised 5 s keep-alive runs out.
        assert time.monotonic() - ended < 2.5
