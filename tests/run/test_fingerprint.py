"""The answer fingerprint: hostile answers read into records, and the probe's requests.

The probe runs against httpx.MockTransport servers (no sockets): what it sends, what it
records from each kind of answer, and that a failure is data on the answer.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.answers import MAX_ANSWER_CHARS, Answer, Fingerprint, answer_sha256
from bench.results import SCHEMA_VERSION, KvCapacity, Results, RunSettings, ServerInfo
from bench.run import answer_body, plan, retrieval
from bench.run.fingerprint import FingerprintProbe, load_prompt_set
from bench.run.presize import Presizer
from bench.stream.client import MAX_SETUP_BODY_BYTES, Client
from bench.stream.records import RequestRecord
from tests.support import virtual
from tests.support.scripted import ScriptedClock

# -- reading one answer ------------------------------------------------------------------


def _chat(content: Any, logprobs: Any = None, **extra: Any) -> dict[str, Any]:
    return {
        "choices": [{"message": {"role": "assistant", "content": content}, "logprobs": logprobs}],
        "usage": {"completion_tokens": 3},
        **extra,
    }


def test_vllm_token_id_names_give_the_ids() -> None:
    entries = [{"token": f"token_id:{i}", "logprob": -0.1} for i in (5, 6, 7)]
    got = answer_body.read(_chat("a b c", {"content": entries}), 64)
    assert got == answer_body.ReadAnswer("a b c", (5, 6, 7), 3)


def test_completions_tokens_and_llamacpp_ids_are_read() -> None:
    completions = {
        "choices": [{"text": "x y", "logprobs": {"tokens": ["token_id:1", "token_id:2"]}}]
    }
    assert answer_body.read(completions, 64).token_ids == (1, 2)
    llama = _chat("x", {"content": [{"id": 11, "token": "x"}, {"id": 12, "token": "y"}]})
    assert answer_body.read(llama, 64).token_ids == (11, 12)
    native = {"content": "x y", "completion_probabilities": [{"id": 3}, {"id": 4}]}
    got = answer_body.read(native, 64)
    assert (got.text, got.token_ids, got.failure) == ("x y", (3, 4), None)


def test_nan_logprobs_are_never_read_and_the_ids_still_are() -> None:
    raw = (
        '{"choices":[{"message":{"content":"a"},'
        '"logprobs":{"content":[{"token":"token_id:9","logprob":NaN}]}}]}'
    )
    assert answer_body.read(json.loads(raw), 64).token_ids == (9,)


@pytest.mark.parametrize(
    "entries",
    [
        [{"token": "token_id:1"}, {"token": "plain text"}],  # one without an id
        [{"id": True}],  # a bool is no id
        [{"id": -1}],
        [{"id": 2**40}],
        [{"token": "token_id:99999999999"}],
        ["token_id:1", 5],
    ],
)
def test_an_entry_without_a_usable_id_leaves_no_ids_and_keeps_the_text(entries: list[Any]) -> None:
    got = answer_body.read(_chat("kept", {"content": entries}), 64)
    assert (got.text, got.token_ids, got.failure) == ("kept", None, None)


def test_more_entries_than_asked_keep_the_first_max_tokens() -> None:
    entries = [{"token": f"token_id:{i}"} for i in range(500)]
    assert answer_body.read(_chat("t", {"content": entries}), 64).token_ids == tuple(range(64))


@pytest.mark.parametrize(
    ("answer", "failure"),
    [
        (None, "no choices in the answer"),
        ([1, 2], "no choices in the answer"),
        ({"choices": []}, "no choices in the answer"),
        ({"choices": ["x"]}, "no choices in the answer"),
        ({"choices": [{"message": {"content": 5}}]}, "no text in the answer"),
        ({"choices": [{"message": "text"}]}, "no text in the answer"),
    ],
)
def test_answers_without_choices_or_text_fail_with_a_reason(answer: Any, failure: str) -> None:
    got = answer_body.read(answer, 64)
    assert got.failure == failure and got.token_ids is None


def test_huge_text_is_cut_and_lone_surrogates_are_replaced() -> None:
    got = answer_body.read(_chat("\udc80" + "w" * 100_000), 64)
    assert len(got.text) == MAX_ANSWER_CHARS and got.text.startswith("?w")
    got.text.encode("utf-8")  # storable in results.json


def test_reasoning_comes_before_the_content() -> None:
    answer = {"choices": [{"message": {"reasoning_content": "think ", "content": "say"}}]}
    assert answer_body.read(answer, 64).text == "think say"


@pytest.mark.parametrize(
    ("usage", "expected"),
    [({"completion_tokens": 64}, 64), ({"completion_tokens": True}, None),
     ({"completion_tokens": -3}, None), ({"completion_tokens": 1e300}, None), ("x", None)],
)  # fmt: skip
def test_usage_is_kept_only_when_it_is_a_count(usage: Any, expected: int | None) -> None:
    assert (
        answer_body.read({"choices": [{"text": "a"}], "usage": usage}, 64).output_tokens == expected
    )


def test_tokenize_ids_in_each_engines_shape() -> None:
    assert answer_body.tokenize_ids({"tokens": [1, 2], "count": 2}) == (1, 2)
    assert answer_body.tokenize_ids({"tokens": [{"id": 1, "piece": "a"}]}) == (1,)
    bad: list[Any] = [None, {"tokens": []}, {"tokens": [1.5]}, {"tokens": [True]},
                      {"tokens": list(range(300))}, {"tokens": "12"}]  # fmt: skip
    assert [answer_body.tokenize_ids(b) for b in bad] == [None] * len(bad)


# -- the probe ---------------------------------------------------------------------------

Handler = Callable[[str, dict[str, Any]], httpx.Response]


def _results(engine: str | None = "vllm", *, contexts: tuple[int, ...] = (1024,)) -> Results:
    settings = RunSettings(
        url="http://s", contexts=contexts, concurrencies=(1,), duration_s=1, max_tokens=128
    )
    info = ServerInfo(
        url="http://s", model="m", max_model_len=4096, has_tokenize=True, engine=engine
    )
    kv = KvCapacity(tokens=2000, source="kv_budget", detail="test")
    the_plan = plan.make_plan(settings, info, kv, prompt_sizing="tokenize")
    return Results(
        bench_version="t", run_id="r", created_at="t", settings=settings, server=info,
        plan=the_plan,
    )  # fmt: skip


def _words(text: str) -> int:
    return len(text.split())


def _probe(handler: Handler) -> tuple[FingerprintProbe, Client, list[tuple[str, dict[str, Any]]]]:
    """A probe over a server answering /tokenize with word counts and completions with
    HANDLER; every request is recorded."""
    sent: list[tuple[str, dict[str, Any]]] = []

    def route(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        sent.append((request.url.path, body))
        if request.url.path == "/tokenize" and "messages" in body:
            return httpx.Response(200, json={"count": _words(body["messages"][0]["content"])})
        return handler(request.url.path, body)

    clock = ScriptedClock(step_s=0.001)
    client = Client("http://s", clock=clock, transport=httpx.MockTransport(route))

    async def single(results: Results, text: str, n: int, what: str) -> RequestRecord:
        raise AssertionError("no sizing probe with /tokenize")

    async def no_sleep(seconds: float) -> None:
        await asyncio.sleep(0)

    presize = Presizer(
        clock, no_sleep, None, client=client, single=single, note=lambda *a, **k: None
    )
    return FingerprintProbe(client, presize, clock, lambda tokens: 60.0), client, sent


def _take(probe: FingerprintProbe, client: Client, results: Results) -> Fingerprint:
    async def go() -> Fingerprint:
        try:
            return await probe.take(results)
        finally:
            await client.aclose()

    return asyncio.run(go())


def _ids_answer(path: str, body: dict[str, Any]) -> httpx.Response:
    n = body["max_tokens"]
    entries = [{"token": f"token_id:{100 + i}", "logprob": -0.5} for i in range(n)]
    return httpx.Response(200, json=_chat(" ".join(["w"] * n), {"content": entries}))


def test_the_probe_sends_the_set_greedy_seeded_with_the_engines_id_fields() -> None:
    probe, client, sent = _probe(_ids_answer)
    found = _take(probe, client, _results())
    ps = load_prompt_set()
    asked = [b for p, b in sent if p == "/v1/chat/completions"]
    assert len(asked) == len(ps.short) + 1  # the short ones and the one decode context
    for body in asked:
        assert body["temperature"] == 0 and body["seed"] == ps.seed
        assert body["max_tokens"] == ps.max_tokens == 64 and body["ignore_eos"] is True
        assert body["stream"] is False and body["return_tokens_as_token_ids"] is True
        assert body["logprobs"] is True
    assert [m["messages"][0]["content"] for m in asked[: len(ps.short)]] == list(ps.short)
    long_prompt = asked[-1]["messages"][0]["content"]
    assert long_prompt.startswith(ps.long_instruction) and _words(long_prompt) == 1024
    assert [a.name for a in found.answers] == ["short 1", "short 2", "short 3", "1K"]
    last = found.answers[-1]
    assert last.prompt_tokens == 1024 and last.ids_from == "logprobs"
    assert last.token_ids == tuple(range(100, 164))
    assert last.sha256 == answer_sha256(tuple(range(100, 164)))
    # the cost: every answer and every /tokenize call of the sizing
    assert found.requests == len(sent) and found.seconds > 0
    assert found.server_s == found.seconds  # speed factor 1


def test_llamacpp_is_asked_for_n_probs_and_an_unknown_engine_for_plain_logprobs() -> None:
    for engine, fields in (
        ("llamacpp", {"n_probs": 1}),
        (None, {"return_tokens_as_token_ids": True}),
    ):
        probe, client, sent = _probe(_ids_answer)
        _take(probe, client, _results(engine))
        body = next(b for p, b in sent if p == "/v1/chat/completions")
        assert fields.items() <= body.items()


def test_without_ids_the_answer_text_is_tokenized_by_the_server() -> None:
    def plain(path: str, body: dict[str, Any]) -> httpx.Response:
        if path == "/tokenize":  # the answer's text: vLLM's shape (a prompt, no template)
            assert body == {"model": "m", "prompt": "one two", "add_special_tokens": False}
            return httpx.Response(200, json={"tokens": [7, 8], "count": 2})
        return httpx.Response(200, json=_chat("one two"))

    probe, client, _ = _probe(plain)
    found = _take(probe, client, _results())
    assert {(a.token_ids, a.ids_from) for a in found.answers} == {((7, 8), "tokenize")}


def test_failures_are_data_on_the_answer_and_the_rest_still_answers() -> None:
    calls = iter(range(100))

    def hostile(path: str, body: dict[str, Any]) -> httpx.Response:
        if path == "/tokenize":
            return httpx.Response(500)  # no ids for the text: compared by text
        i = next(calls)
        if i == 0:
            return httpx.Response(500, json={"error": {"message": "boom\n" + "x" * 5000}})
        if i == 1:
            return httpx.Response(200, content=b"\xff\xfe not json")
        if i == 2:
            return httpx.Response(200, content=b" " * (MAX_SETUP_BODY_BYTES + 10))
        return httpx.Response(200, json=_chat("fine"))

    probe, client, _ = _probe(hostile)
    found = _take(probe, client, _results())
    a = {x.name: x for x in found.answers}
    assert a["short 1"].status == "failed" and a["short 1"].reason is not None
    assert a["short 1"].reason.startswith("HTTP 500: boom x") and len(a["short 1"].reason) < 200
    assert (a["short 2"].status, a["short 2"].reason) == ("failed", "no choices in the answer")
    assert a["short 3"].status == "failed" and "MiB" in (a["short 3"].reason or "")
    assert a["1K"].status == "answered" and a["1K"].token_ids is None
    assert a["1K"].sha256 == answer_sha256("fine") and a["1K"].compared == "fine"


def test_a_context_that_does_not_fit_the_kv_cache_is_not_run() -> None:
    probe, client, sent = _probe(_ids_answer)
    found = _take(probe, client, _results(contexts=(1024, 3000)))
    big = found.answers[-1]
    assert big.status == "not_run" and "KV" in (big.reason or "")
    assert big.name == "3000" and big.prompt_tokens == 3000
    # neither sized nor sent: the three short prompts and 1K only
    assert sum(p == "/v1/chat/completions" for p, _ in sent) == 4
    assert max(_words(b["messages"][0]["content"]) for _, b in sent) <= 1024


def test_a_server_that_cannot_size_the_prompt_fails_that_answer_only() -> None:
    def no_count(path: str, body: dict[str, Any]) -> httpx.Response:
        return _ids_answer(path, body)

    probe, client, _ = _probe(no_count)

    async def broken(text: str) -> int:
        return 5  # a count that never grows

    probe.presize.counter = lambda results, label: broken  # type: ignore[method-assign]
    found = _take(probe, client, _results())
    assert found.answers[-1].status == "failed"
    assert (found.answers[-1].reason or "").startswith("not sized: /tokenize cannot size")
    assert all(a.status == "answered" for a in found.answers[:-1])


def test_the_prompt_set_is_fixed_data_and_its_long_text_the_same_every_run() -> None:
    ps = load_prompt_set()
    assert ps.version == "v2" and len(ps.short) >= 3
    a, b = (retrieval.NeedleText(ps.long_key, ps.seed, ps.long_instruction, "1234-5678")
            for _ in range(2))  # fmt: skip
    assert a.text(500) == b.text(500)
    # each context prompt is a prefix of the next but for the question at its end
    short, long = a.text(100).removesuffix(retrieval.QUESTION), a.text(500)
    assert long.startswith(short) and "The pass code is 1234-5678." in short


def test_a_fingerprint_round_trips_through_results_json(tmp_path: Path) -> None:
    answer = Answer(name="8K", status="answered", token_ids=(1, 2), ids_from="logprobs",
                    text="a b", sha256=answer_sha256((1, 2)))  # fmt: skip
    fp = Fingerprint(version="v1", max_tokens=64, seed=1, answers=(answer,), requests=3)
    results = _results().model_copy(update={"fingerprint": fp})
    again = Results.model_validate_json(results.model_dump_json())
    assert again.fingerprint == fp and again.schema_version == SCHEMA_VERSION
    old = json.loads(results.model_dump_json())
    del old["fingerprint"]
    old["schema_version"] = 2
    assert Results.model_validate(old).fingerprint is None


def test_a_server_that_never_answers_costs_one_bound_and_the_rest_is_not_sent() -> None:
    """On a virtual-time loop: the answer's bound is the run's read time-out (5 s here)."""
    sent: list[str] = []

    async def hang(request: httpx.Request) -> httpx.Response:
        sent.append(request.url.path)
        await asyncio.get_running_loop().create_future()  # never answers
        raise AssertionError("unreachable")

    client = Client("http://s", clock=virtual.clock, transport=httpx.MockTransport(hang))
    results = _results()
    results = results.model_copy(
        update={"settings": results.settings.model_copy(update={"request_timeout_s": 5.0})}
    )

    async def single(results: Results, text: str, n: int, what: str) -> RequestRecord:
        raise AssertionError("no sizing probe")

    async def go() -> tuple[Fingerprint, float]:
        presize = Presizer(virtual.clock, asyncio.sleep, None, client=client, single=single,
                           note=lambda *a, **k: None)  # fmt: skip
        t0 = virtual.clock()
        try:
            found = await FingerprintProbe(client, presize, virtual.clock, lambda n: 600.0).take(
                results
            )
        finally:
            await client.aclose()
        return found, virtual.clock() - t0

    found, took = virtual.run(go())
    assert took == pytest.approx(5.0)
    assert sent == ["/v1/chat/completions"] and found.requests == 1
    first, *rest = found.answers
    assert (first.status, first.reason) == ("failed", "no whole answer within 5 s")
    assert [a.status for a in rest] == ["not_run"] * 3
    assert {a.reason for a in rest} == {
        "not sent: the short 1 prompt got no whole answer within 5 s"
    }


def test_a_server_that_is_gone_gets_one_request() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    probe, client, _ = _probe(_ids_answer)
    probe.client = Client("http://s", clock=ScriptedClock(), transport=httpx.MockTransport(refuse))
    found = _take(probe, probe.client, _results())
    assert found.requests == 1
    assert found.answers[0].status == "failed" and "cannot reach" in (found.answers[0].reason or "")
    assert [a.status for a in found.answers[1:]] == ["not_run"] * 3
    asyncio.run(client.aclose())
