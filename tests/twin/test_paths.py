"""The twin's reasoning and tool-call paths (bench.twin.paths): its answers as vLLM's parsers
shape them, read back by the fingerprint's reader (bench.run.answer_paths), and a request's
tools refused when they are no tools."""

from __future__ import annotations

from typing import Any

import pytest

from bench.run import answer_paths
from bench.run.fingerprint import load_prompt_set
from bench.twin.paths import MAX_REQUIRED, OfferedTool, Paths, chat_message, offered_tool
from bench.twin.requests import BadRequest

WORDS = [" lorem", " ipsum", " dolor", " sit"]
TOOL = OfferedTool("get_weather", ("city",))


def _answer(message: dict[str, Any]) -> dict[str, Any]:
    return {"choices": [{"message": message}]}


def test_the_fingerprints_tool_is_offered_as_its_name_and_required_parameters() -> None:
    ps = load_prompt_set()
    assert offered_tool({"tools": [ps.tool], "tool_choice": "auto"}) == TOOL
    assert offered_tool({"tools": [ps.tool], "tool_choice": "none"}) is None
    assert offered_tool({}) is None
    many = {"function": {"name": "f", "parameters": {"required": [f"p{i}" for i in range(50)]}}}
    assert len(offered_tool({"tools": [many]}).required) == MAX_REQUIRED  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "tools",
    [[], "x", [{"function": {"name": "a b"}}], [{"function": {"name": "x" * 65}}], [7],
     [{"function": {"name": "f", "parameters": {"required": [1]}}}]],
)  # fmt: skip
def test_tools_that_are_no_tools_are_a_400(tools: Any) -> None:
    with pytest.raises(BadRequest) as caught:
        offered_tool({"tools": tools})
    assert caught.value.status == 400 and caught.value.param == "tools"


def test_with_the_parsers_the_reader_finds_the_promises_kept() -> None:
    on = Paths(reasoning=True, tool_calls=True)
    message, finish = chat_message(WORDS, None, on, "c1")
    assert finish == "length" and message["reasoning_content"] == " lorem ipsum dolor"
    assert message["content"] == " sit" and answer_paths.reasoning(_answer(message)).held
    message, finish = chat_message(WORDS, TOOL, on, "c1")
    got = answer_paths.tool_call(_answer(message), "get_weather")
    assert finish == "tool_calls" and message["content"] is None
    assert got.held and got.text == 'get_weather({"city": "lorem"})'


def test_without_the_parsers_or_with_them_broken_the_promises_break() -> None:
    off = chat_message(WORDS, TOOL, Paths(), "c1")[0]
    assert off == {"role": "assistant", "content": " lorem ipsum dolor sit", "tool_calls": []}
    broken, finish = chat_message(WORDS, TOOL, Paths(True, True, unparsed=True), "c1")
    assert finish == "length" and broken["tool_calls"] == []
    assert broken["content"].startswith(" lorem ipsum dolor sit<tool_call>{")
    assert not answer_paths.tool_call(_answer(broken), "get_weather").held
    assert not answer_paths.reasoning(_answer(broken)).held
