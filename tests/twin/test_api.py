"""The twin's HTTP surface, driven as a real process over real sockets."""

from __future__ import annotations

import collections.abc
import concurrent.futures
import itertools
import json
import statistics
import time

import httpx
import pytest

from tests.support.sse import chat_body, metric, stream_chat
from tests.support.twinproc import TwinProcess, start_twin

pytestmark = pytest.mark.integration
KEY = "sk-twin-test"


@pytest.fixture(scope="module")
def twin() -> collections.abc.Iterator[TwinProcess]:
    with start_twin("tiny", api_key=KEY) as proc:
        yield proc


@pytest.fixture
def client(twin: TwinProcess) -> collections.abc.Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=twin.url, headers=headers, timeout=30) as c:
        yield c


def words(n: int, tag: str) -> str:
    return " ".join(f"{tag}" if i == 0 else "w" for i in range(n))


def test_health_models_version(client: httpx.Client) -> None:
    assert client.get("/health").status_code == 200
    models = client.get("/v1/models").json()
    assert models["data"][0]["id"] == "tiny"
    assert models["data"][0]["max_model_len"] == 4096
    version = client.get("/version").json()
    assert version["twin"] == {"profile": "tiny", "speed": 1.0, "seed": 0, "dtype": "bfloat16"}


def test_every_chunk_carries_cumulative_usage_and_1_to_3_tokens(client: httpx.Client) -> None:
    out = stream_chat(client, chat_body("usage please", 40))
    assert out.status == 200 and out.done and out.error is None
    usages = [c["usage"] for c in out.chunks]
    assert len(usages) == len(out.chunks)
    completions = [u["completion_tokens"] for u in usages]
    assert completions == sorted(completions) and completions[-1] == 40
    steps = [b - a for a, b in itertools.pairwise(completions) if b != a]
    assert set(steps) <= {1, 2, 3} and max(steps) > 1, steps
    assert all(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] for u in usages)
    assert out.chunks[-1]["choices"] == []
    assert len(out.content_chunks()) < 40


def test_usage_only_when_asked(client: httpx.Client) -> None:
    body = chat_body("no usage", 5)
    body["stream_options"] = {"include_usage": False}
    out = stream_chat(client, body)
    assert out.done and all("usage" not in c for c in out.chunks)


def test_tokenize_agrees_with_prompt_tokens(client: httpx.Client) -> None:
    text = "Hello, world! 12345 tokens" + " more" * 50
    tok = client.post("/tokenize", json={"prompt": text}).json()
    done = client.post("/v1/completions", json={"prompt": text, "max_tokens": 3}).json()
    assert done["usage"]["prompt_tokens"] == tok["count"] == len(tok["tokens"])
    msgs = [{"role": "user", "content": text}]
    tok_chat = client.post("/tokenize", json={"messages": msgs}).json()
    out = stream_chat(client, chat_body(text, 2))
    assert out.chunks[0]["usage"]["prompt_tokens"] == tok_chat["count"]
    by_ids = client.post("/v1/completions", json={"prompt": tok["tokens"], "max_tokens": 2}).json()
    assert by_ids["usage"]["prompt_tokens"] == tok["count"]


def test_repeated_prompt_hits_prefix_cache_and_ttft_drops(client: httpx.Client) -> None:
    prompt = words(1500, "cachetest")
    hits0 = metric(client, "vllm:prefix_cache_hits_total")
    cold = stream_chat(client, chat_body(prompt, 2))
    hits1 = metric(client, "vllm:prefix_cache_hits_total")
    warm = stream_chat(client, chat_body(prompt, 2))
    hits2 = metric(client, "vllm:prefix_cache_hits_total")
    assert hits1 == hits0
    assert hits2 - hits1 >= 1400
    assert cold.ttft_s is not None and warm.ttft_s is not None
    # tiny: cold prefill of ~1,500 tokens at 200 us/token; warm recomputes 16 tokens
    assert cold.ttft_s > 0.3
    assert warm.ttft_s < cold.ttft_s / 3


def test_the_role_chunk_comes_with_the_first_token_not_at_arrival(client: httpx.Client) -> None:
    """As vLLM's chat server: the role chunk goes out with the engine's first output, so a
    client that stops its TTFT clock at the first chunk with `choices` (vllm bench serve's chat
    backend) reads the prefill too."""
    out = stream_chat(client, chat_body(words(1000, "roletest"), 2))
    assert out.done and out.ttft_s is not None
    role, first = out.chunks[:2]
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert first["choices"][0]["delta"]["content"]
    assert out.ttft_s > 0.15  # a cold prefill of ~1,000 tokens at 200 us/token
    assert out.arrivals[1] - out.arrivals[0] < 0.05  # one flush, not a prefill apart


def test_requests_beyond_kv_capacity_wait(client: httpx.Client) -> None:
    # 4 x (900 + 300) tokens > 2,048: some of them must wait for blocks
    seen_waiting = 0.0
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [
            pool.submit(stream_chat, client, chat_body(words(900, f"cap{i}"), 300))
            for i in range(4)
        ]
        for _ in range(100):
            seen_waiting = max(seen_waiting, metric(client, "vllm:num_requests_waiting"))
            if seen_waiting or all(f.done() for f in futures):
                break
            time.sleep(0.02)
        results = [f.result() for f in futures]
    assert seen_waiting > 0
    assert all(r.done and r.chunks[-1]["usage"]["completion_tokens"] == 300 for r in results)


def test_401_without_key(twin: TwinProcess) -> None:
    with httpx.Client(base_url=twin.url) as anon:
        resp = anon.post("/v1/chat/completions", json=chat_body("x", 2))
        assert resp.status_code == 401
        assert resp.json()["error"]["code"] == 401
        assert anon.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert anon.get("/health").status_code == 200


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (chat_body(words(4000, "long"), 200), "maximum context length"),
        ({**chat_body("x", 2), "model": "nope"}, "does not exist"),
        (chat_body("x", -1), "max_tokens"),
        (chat_body("x", 2, temperature="hot"), "temperature"),
        ({"max_tokens": 2}, "messages"),
        ({**chat_body("x", 2), "stream": False}, "stream"),
        ({"messages": [{"content": "no role"}]}, "role"),
    ],
)
def test_bad_input_is_400_with_openai_error(
    client: httpx.Client, body: dict[str, object], needle: str
) -> None:
    resp = client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert needle in err["message"] and err["code"] == 400


def test_malformed_json_and_bad_completions_prompt(client: httpx.Client) -> None:
    resp = client.post(
        "/v1/chat/completions",
        content=b'{"messages": [',
        headers={"content-type": "application/json"},
    )
    assert resp.status_code == 400 and "malformed JSON" in resp.json()["error"]["message"]
    resp = client.post("/v1/completions", json={"prompt": [1, "two"], "max_tokens": 2})
    assert resp.status_code == 400
    assert client.get("/nope").status_code == 404


def test_ground_truth_log_matches_client_arrivals(tmp_path: object) -> None:
    import pathlib

    log = pathlib.Path(str(tmp_path)) / "gt.jsonl"
    with (
        start_twin("tiny", extra_args=["--ground-truth-log", str(log)]) as tw,
        httpx.Client(base_url=tw.url) as c,
    ):
        out = stream_chat(c, chat_body("ground truth", 30))
        assert out.done
        time.sleep(0.1)
        records = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(records) == 1
    rec = records[0]
    assert rec["request_id"] == out.chunks[0]["id"] and rec["outcome"] == "finished"
    assert sum(n for _, n in rec["chunks"]) == 30
    content = [
        i
        for i, c in enumerate(out.chunks)
        if c.get("choices") and c["choices"][0]["delta"].get("content")
    ]
    assert len(content) == len(rec["chunks"])
    delays = [out.arrivals[i] - sent for (sent, _), i in zip(rec["chunks"], content, strict=True)]
    assert min(delays) >= 0  # logged before the client saw it
    # ... and close to when it was really sent: well inside the mean time between two tokens
    # of the same run (a ratio, not a fixed number of ms, so that a loaded machine holds it).
    # The mean, not the median gap: a twin whose event loop was held up sends the tokens that
    # fell due meanwhile back to back, and on a loaded machine (CI at 0b4ed4f) more than half
    # the gaps were such 0.1 ms bursts, so the median gap measured the burst, not the run.
    sent = [t for t, _ in rec["chunks"]]
    mean_gap = (sent[-1] - sent[0]) / (len(sent) - 1)
    assert statistics.median(delays) < 0.5 * mean_gap


def test_step_lag_is_reported(client: httpx.Client) -> None:
    stream_chat(client, chat_body("lag", 20))
    assert metric(client, "twin:steps_total") > 0
    assert metric(client, "twin:step_seconds_sum") > 0
    assert metric(client, "twin:step_lag_fraction") >= 0
    assert 0 <= metric(client, "twin:step_lag_max_seconds") < 1.0


def test_cancelled_request_lingers_in_the_engine(tmp_path: object) -> None:
    """A client that goes away leaves its request running for the profile's abort delay
    (then the next step boundary): /metrics shows it, the ground truth says when it went."""
    import pathlib

    from bench.twin import profile

    tmp = pathlib.Path(str(tmp_path))
    prof = tmp / "linger.json"
    data = profile.load("tiny").model_dump() | {"name": "linger", "abort_delay_s": 0.6}
    prof.write_text(json.dumps(data))
    log = tmp / "gt.jsonl"
    with (
        start_twin(str(prof), extra_args=["--ground-truth-log", str(log)]) as tw,
        httpx.Client(base_url=tw.url, timeout=30) as c,
    ):
        with c.stream("POST", "/v1/chat/completions", json=chat_body("linger", 2000)) as r:
            next(r.iter_lines())
            while metric(c, "vllm:num_requests_running") < 1:
                time.sleep(0.01)
        cancelled_at = time.time()
        time.sleep(0.2)
        assert metric(c, "vllm:num_requests_running") == 1  # still running
        deadline = time.time() + 5
        while metric(c, "vllm:num_requests_running") > 0 and time.time() < deadline:
            time.sleep(0.02)
        gone_at = time.time()
        time.sleep(0.05)
        records = [json.loads(line) for line in log.read_text().splitlines()]
    assert gone_at - cancelled_at >= 0.55
    (rec,) = records
    assert rec["outcome"] == "cancelled"
    assert 0.55 <= rec["released"] - cancelled_at <= gone_at - cancelled_at + 0.05
