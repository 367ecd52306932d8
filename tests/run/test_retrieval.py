"""The long-context retrieval check on the fingerprint's context prompts: the code, where it
is planted, what counts as found, and what the probe records (httpx.MockTransport servers,
no sockets)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from bench.answers import MAX_HEAD_CHARS, Fingerprint, Retrieval
from bench.report.retrieval import retrieval_section
from bench.results import READABLE_SCHEMA_VERSIONS, SCHEMA_VERSION, Results
from bench.run import retrieval
from bench.run.fingerprint import load_prompt_set
from tests.run.test_fingerprint import _chat, _probe, _results, _take

CONTEXTS = (512, 1024, 1700)  # 512 is short: planted, but no retrieval verdict of its own


def test_the_code_comes_from_the_runs_seed() -> None:
    codes = [retrieval.code_for(seed) for seed in range(20)]
    assert codes[3] == retrieval.code_for(3)  # the same seed, the same code
    assert len(set(codes)) == 20
    assert all(re.fullmatch(r"[0-9]{4}-[0-9]{4}", c) for c in codes)


def test_found_means_the_codes_digits_in_order_near_the_answers_start() -> None:
    code = "4821-7730"
    for yes in ("4821-7730", "The pass code is 4821 7730.", "48217730", "code: 4821 - 7730"):
        assert retrieval.found_in(code, yes), yes
    for no in ("7730-4821", "14821-7730", "4821-77301", "4821", "x" * 80 + "4821-7730", ""):
        assert not retrieval.found_in(code, no), no


def test_the_code_is_planted_after_the_same_words_in_every_prompt() -> None:
    ps = load_prompt_set()
    text = retrieval.NeedleText(ps.long_key, ps.seed, ps.long_instruction, "1234-5678")
    before = text.before_needle()
    for n in (40, 400, 4000):
        got = text.text(n)
        assert got.startswith(before + "The pass code is 1234-5678. ")
        assert got.endswith(retrieval.QUESTION) and got.count("1234-5678") == 1
        body = got.removesuffix(retrieval.QUESTION)[len(ps.long_instruction) :]
        assert len(body.split()) == n + 5  # the filler's words and the code's sentence
    assert len(before[len(ps.long_instruction) :].split()) == retrieval.NEEDLE_WORDS
    # a prompt of fewer words than the code's place has it at its end, before the question
    assert text.text(5).endswith("The pass code is 1234-5678." + retrieval.QUESTION)


def _retriever(path: str, body: dict[str, Any]) -> httpx.Response:
    """A server that repeats the code it reads in the prompt (or says it found none)."""
    if path == "/tokenize":  # the answer's text: ids for it
        return httpx.Response(200, json={"tokens": [1, 2], "count": 2})
    found = re.search(r"pass code is ([0-9-]{9})\.", body["messages"][0]["content"])
    return httpx.Response(200, json=_chat(f"The code is {found[1]}." if found else "none"))


def _blind(path: str, body: dict[str, Any]) -> httpx.Response:
    if path == "/tokenize":
        return httpx.Response(500)
    return httpx.Response(200, json=_chat("I cannot see a pass code in the text above."))


def _record(handler: Any, **results: Any) -> tuple[Retrieval, list[str]]:
    probe, client, sent = _probe(handler)
    r = _results(contexts=CONTEXTS)
    if results:
        r = r.model_copy(update={"server": r.server.model_copy(update=results)})
    fp = _take(probe, client, r)
    assert fp.retrieval is not None
    prompts = [b["messages"][0]["content"] for p, b in sent if p == "/v1/chat/completions"]
    return fp.retrieval, prompts


def test_a_model_that_retrieves_is_found_at_every_long_context() -> None:
    got, prompts = _record(_retriever)
    code = retrieval.code_for(0)
    assert got.code == code and got.seed == 0 and got.note is None and got.informative
    assert got.planted_in == ("512", "1K", "1700")
    assert [(c.name, c.found) for c in got.contexts] == [("1K", True), ("1700", True)]
    assert got.found == 2 and got.contexts[0].head == f"The code is {code}."
    context_prompts = prompts[-3:]
    assert all(p.count(code) == 1 and p.endswith(retrieval.QUESTION) for p in context_prompts)
    # the depth: about the words before the code (the mock's /tokenize counts words)
    ps = load_prompt_set()
    words_before = len(ps.long_instruction.split()) + retrieval.NEEDLE_WORDS
    for c in got.contexts:
        assert c.depth_tokens is not None and abs(c.depth_tokens - words_before) < 8
        assert c.prompt_tokens is not None and c.depth_share == c.depth_tokens / c.prompt_tokens


def test_a_model_that_does_not_retrieve_is_not_informative() -> None:
    got, _ = _record(_blind)
    assert [c.found for c in got.contexts] == [False, False] and got.found == 0
    assert got.note == "found at no context: the model cannot do the task here"


def test_the_twin_is_marked_and_never_informative() -> None:
    got, _ = _record(_retriever, version_payload={"twin": {"seed": 0}})
    assert got.twin and got.note is not None and "twin" in got.note
    assert got.found == 2  # what it answered is still recorded


def test_failed_answers_are_recorded_without_a_found_and_the_head_is_bounded() -> None:
    def flaky(path: str, body: dict[str, Any]) -> httpx.Response:
        if path == "/tokenize":
            return httpx.Response(500)
        if body["messages"][0]["content"].count(" ") > 1500:  # the 1700 prompt
            return httpx.Response(500, json={"error": {"message": "too long"}})
        return httpx.Response(200, json=_chat("\x1b[31m" + "y" * 5000))

    got, _ = _record(flaky)
    assert [(c.name, c.status, c.found) for c in got.contexts] == [
        ("1K", "answered", False), ("1700", "failed", None)
    ]  # fmt: skip
    assert len(got.contexts[0].head) == MAX_HEAD_CHARS and got.contexts[1].head == ""
    page = retrieval_section(Fingerprint(version="v2", max_tokens=64, seed=1, retrieval=got))
    assert got.contexts[0].head.startswith("\\x1b[31myyy") and got.contexts[0].head[-1] == "…"
    assert "\x1b" not in page  # stored escaped
    assert "not found" in page and "Not informative: found at no context" in page


def test_a_plan_without_a_long_context_says_so() -> None:
    probe, client, _ = _probe(_retriever)
    fp = _take(probe, client, _results(contexts=(512,)))
    assert fp.retrieval is not None and fp.retrieval.contexts == ()
    assert fp.retrieval.note == "no decode context of 1,024 prompt tokens or more"


def test_the_check_round_trips_and_older_results_still_load() -> None:
    got, _ = _record(_retriever)
    fp = Fingerprint(version="v2", max_tokens=64, seed=1, retrieval=got)
    results = _results().model_copy(update={"fingerprint": fp})
    again = Results.model_validate_json(results.model_dump_json())
    assert again.fingerprint == fp and again.schema_version == SCHEMA_VERSION
    old = json.loads(results.model_dump_json())
    del old["fingerprint"]["retrieval"]
    old["schema_version"] = 3
    assert 3 in READABLE_SCHEMA_VERSIONS
    loaded = Results.model_validate(old).fingerprint
    assert loaded is not None and loaded.retrieval is None
    page = retrieval_section(loaded)
    assert "No long-context retrieval check in this run" in page


def test_the_report_shows_each_context_and_escapes_the_answer() -> None:
    got, _ = _record(_retriever)
    hostile = got.contexts[0].model_copy(update={"head": "<script>x</script>"})
    got = got.model_copy(update={"contexts": (hostile, *got.contexts[1:])})
    page = retrieval_section(Fingerprint(version="v2", max_tokens=64, seed=1, retrieval=got))
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert page.count("<td>found</td>") == 2 and f"Code {got.code} (from seed 0)" in page
    assert "found at 2 of 2 long contexts" in page
