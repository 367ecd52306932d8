"""The launch's reasoning and tool-call paths in the answer fingerprint: which the launch
promises (bench.run.launch_paths), whether an answer kept the promise, read from hostile
JSON (bench.run.answer_paths, Hypothesis-fuzzed), and the probe's prompts for them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.answers import MAX_ANSWER_CHARS, MAX_REASON_CHARS, Answer, Fingerprint
from bench.host import environment
from bench.results import Results
from bench.run import answer_paths, launch_paths
from bench.run.answer_paths import MAX_ARGUMENTS_CHARS
from bench.run.fingerprint import load_prompt_set
from bench.run.launch_paths import LaunchPaths
from tests.run.test_fingerprint import _chat, _probe, _results, _take

CARD_ARGV = (
    "vllm", "serve", "Qwen/Qwen3.5", "--reasoning-parser", "qwen3", "--enable-auto-tool-choice",
    "--tool-call-parser", "qwen3_coder", "--port", "8000",
)  # fmt: skip


# -- what the launch promises -------------------------------------------------------------


def test_the_cards_launch_promises_both_paths() -> None:
    assert launch_paths.from_argv(CARD_ARGV) == LaunchPaths("qwen3", "qwen3_coder")


def test_a_tool_parser_without_auto_tool_choice_promises_no_tool_call() -> None:
    argv = ["vllm", "serve", "m", "--tool-call-parser", "hermes"]
    assert launch_paths.from_argv(argv) == LaunchPaths()
    assert not launch_paths.from_argv(argv).any


def test_equals_form_the_last_flag_wins_and_hostile_names_are_dropped() -> None:
    argv = ["--reasoning-parser=deepseek_r1", "--reasoning-parser", "qwen3"]
    assert launch_paths.from_argv(argv).reasoning_parser == "qwen3"
    assert launch_paths.from_argv(["--reasoning-parser=x\x1b[31m"]).reasoning_parser is None
    assert launch_paths.from_argv(["--reasoning-parser", "a" * 65]).reasoning_parser is None
    assert launch_paths.from_argv(["--reasoning-parser"]).reasoning_parser is None  # no value


# -- reading the promise from an answer ----------------------------------------------------


def _message(**fields: Any) -> dict[str, Any]:
    return {"choices": [{"message": {"role": "assistant", **fields}}]}


def _call(name: Any = "get_weather", arguments: Any = '{"city": "Paris"}') -> dict[str, Any]:
    call = {"id": "c1", "type": "function", "function": {"name": name, "arguments": arguments}}
    return _message(content=None, tool_calls=[call])


def test_reasoning_in_either_field_holds_and_none_breaks() -> None:
    assert answer_paths.reasoning(_message(reasoning_content="thinking", content="4")).held
    assert answer_paths.reasoning(_message(reasoning="thinking", content=None)).held
    inline = answer_paths.reasoning(_message(content="<think>thinking</think>4"))
    assert not inline.held and "no reasoning field" in inline.detail
    empty = answer_paths.reasoning(_message(reasoning_content="  ", content="4"))
    assert not empty.held and "empty" in empty.detail


def test_a_call_of_the_offered_tool_with_json_arguments_holds() -> None:
    got = answer_paths.tool_call(
        _call(arguments='{"unit": "celsius", "city": "Paris"}'), "get_weather"
    )
    assert got.held and got.text == 'get_weather({"city": "Paris", "unit": "celsius"})'


def test_each_broken_tool_call_says_why() -> None:
    cases = {
        "no tool call": _message(content='<tool_call>{"name": "get_weather"}</tool_call>'),
        "not JSON": _call(arguments="{city: Paris"),
        "a JSON list, not an object": _call(arguments="[1, 2]"),
        "a dict, not a JSON string": _call(arguments={"city": "Paris"}),
        "not the offered get_weather": _call(name="rm_rf"),
        "names no function": _call(name=7),
        "over the limit": _call(arguments='"' + "x" * MAX_ARGUMENTS_CHARS + '"'),
        "not JSON: '[[[[": _call(arguments="[" * 60_000),
    }
    for why, answer in cases.items():
        got = answer_paths.tool_call(answer, "get_weather")
        assert not got.held and why in got.detail, (why, got.detail)
        assert got.text is None and len(got.detail) < MAX_REASON_CHARS


def test_deeply_nested_arguments_within_the_size_limit_are_data() -> None:
    deep = '{"a": ' * 5000 + "1" + "}" * 5000
    got = answer_paths.tool_call(_call(arguments=deep), "get_weather")
    assert not got.held and "JSON" in got.detail


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    name=_json | st.just("get_weather"),
    arguments=_json | st.text(max_size=200) | _json.map(json.dumps),
    calls=st.sampled_from(["one", "none", "not a list", "entry not a dict"]),
    reasoning=_json,
)
def test_any_answer_is_a_verdict_on_the_promise_never_an_exception(
    name: Any, arguments: Any, calls: str, reasoning: Any
) -> None:
    call: Any = {"function": {"name": name, "arguments": arguments}}
    tool_calls: Any = {"one": [call], "none": [], "not a list": call, "entry not a dict": [name]}
    answer = _message(content=None, tool_calls=tool_calls[calls], reasoning_content=reasoning)
    got = answer_paths.tool_call(answer, "get_weather")
    assert isinstance(got.held, bool) and 0 < len(got.detail) < MAX_REASON_CHARS
    assert got.held == (got.text is not None)
    if got.held:
        assert calls == "one" and name == "get_weather" and isinstance(arguments, str)
        assert isinstance(json.loads(arguments), dict) and len(got.text or "") <= MAX_ANSWER_CHARS
        got.text.encode("utf-8")  # type: ignore[union-attr]  # no lone surrogate
    r = answer_paths.reasoning(answer)
    assert r.held == (isinstance(reasoning, str) and bool(reasoning.strip()))


@settings(max_examples=100, deadline=None)
@given(st.one_of(_json, st.dictionaries(st.text(max_size=10), _json)))
def test_any_body_at_all_is_read(body: Any) -> None:
    assert not answer_paths.tool_call(body, "get_weather").held or isinstance(body, dict)
    answer_paths.reasoning(body)


# -- the probe's path prompts --------------------------------------------------------------


def _path_server(reasoning: bool, tool: str) -> Any:
    """A server whose reasoning prompt comes back in the reasoning field (or inline) and
    whose tool prompt is answered by TOOL: "call", "text" or "garbage"."""

    def answer(path: str, body: dict[str, Any]) -> httpx.Response:
        if path == "/tokenize":  # no ids for the answers' text: compared by text
            return httpx.Response(500)
        if "tools" in body:
            if tool == "call":
                return httpx.Response(200, json=_call(arguments='{"city":"Paris"}'))
            text = "get_weather(Paris)" if tool == "text" else None
            return httpx.Response(200, json=_call(arguments=text) if text is None else _chat(text))
        if "step by step" in str(body.get("messages")):
            if reasoning:
                return httpx.Response(
                    200, json=_message(reasoning_content="9:40 to 13:15", content="3 h 35")
                )
            return httpx.Response(200, json=_chat("<think>9:40 to 13:15</think>3 h 35"))
        return httpx.Response(200, json=_chat("plain"))

    return answer


def _fingerprint(
    launch: LaunchPaths, server: Any, results: Results | None = None
) -> tuple[Fingerprint, list[dict[str, Any]]]:
    probe, client, sent = _probe(server)
    probe.launch = launch
    found = _take(probe, client, results or _results())
    return found, [b for p, b in sent if p == "/v1/chat/completions"]


def test_the_launchs_paths_get_one_prompt_each_and_the_promises_are_recorded() -> None:
    found, asked = _fingerprint(LaunchPaths("qwen3", "hermes"), _path_server(True, "call"))
    ps = load_prompt_set()
    names = [a.name for a in found.answers]
    assert names == ["short 1", "short 2", "short 3", "reasoning", "tool call", "1K"]
    assert (found.reasoning_parser, found.tool_call_parser) == ("qwen3", "hermes")
    r, t = found.answer("reasoning"), found.answer("tool call")
    assert r is not None and t is not None
    assert (r.promise, r.promise_held, r.status) == ("reasoning", True, "answered")
    assert r.text == "9:40 to 13:153 h 35" and "reasoning_content" in (r.promise_detail or "")
    assert (t.promise, t.promise_held, t.status) == ("tool_call", True, "answered")
    assert t.text == 'get_weather({"city": "Paris"})' and t.sha256 is not None
    tool_body = next(b for b in asked if "tools" in b)
    assert tool_body["tools"] == [ps.tool] and tool_body["tool_choice"] == "auto"
    assert tool_body["max_tokens"] == ps.path_max_tokens and "ignore_eos" not in tool_body
    assert tool_body["temperature"] == 0 and tool_body["seed"] == ps.seed
    assert tool_body["chat_template_kwargs"] == {"enable_thinking": False}
    assert all(a.promise is None for a in found.answers if a.name.startswith("short"))


def test_a_broken_promise_is_data_on_the_answer() -> None:
    found, _ = _fingerprint(LaunchPaths("qwen3", "hermes"), _path_server(False, "text"))
    r, t = found.answer("reasoning"), found.answer("tool call")
    assert r is not None and (r.status, r.promise_held) == ("answered", False)
    assert t is not None and (t.status, t.promise_held) == ("answered", False)
    assert "the tool call does not parse" in (t.promise_detail or "")
    found, _ = _fingerprint(LaunchPaths(None, "hermes"), _path_server(False, "garbage"))
    t = found.answer("tool call")
    assert t is not None and t.status == "failed" and t.promise_held is False
    assert "a NoneType, not a JSON string" in (t.promise_detail or "")
    assert found.answer("reasoning") is None


def test_no_path_prompt_without_the_launchs_promise_or_on_completions() -> None:
    found, asked = _fingerprint(LaunchPaths(), _path_server(True, "call"))
    assert all(a.promise is None for a in found.answers) and not any("tools" in b for b in asked)
    results = _results()
    results = results.model_copy(
        update={"settings": results.settings.model_copy(update={"api": "completions"})}
    )
    probe, client, _ = _probe(_path_server(True, "call"))
    probe.launch = LaunchPaths("qwen3", None)
    r = _take(probe, client, results).answer("reasoning")
    assert r is not None and r.status == "not_run" and "--api completions" in (r.reason or "")


def test_the_new_fields_round_trip_and_older_answers_read() -> None:
    a = Answer(name="tool call", status="answered", text="x", promise="tool_call",
               promise_held=False, promise_detail="no tool call")  # fmt: skip
    assert Answer.model_validate_json(a.model_dump_json()) == a
    old = {"name": "short 1", "status": "answered", "text": "x"}
    assert Answer.model_validate(old).promise is None


def test_the_launch_is_read_back_from_environment_json(tmp_path: Path) -> None:
    env = tmp_path / "environment.json"
    assert environment.launch_argv_of(tmp_path) == ()  # none recorded
    env.write_text(json.dumps({"launch": {"source": "proc", "argv": list(CARD_ARGV)}}))
    assert launch_paths.from_argv(environment.launch_argv_of(tmp_path)) == LaunchPaths(
        "qwen3", "qwen3_coder"
    )
    for hostile in ('{"launch": {"argv": ["a", 7]}}', '{"launch": "x"}', "[1]", "{not json"):
        env.write_text(hostile)
        assert environment.launch_argv_of(tmp_path) == ()
