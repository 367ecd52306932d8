"""The twin's reasoning and tool-call paths: what its non-streamed chat answer looks like when
its launch enables them, as vLLM's parsers shape it, deterministically.

    --reasoning-parser NAME          the first 3/4 of the answer's tokens come back in
                                     `reasoning_content`, the rest in `content`
    --enable-auto-tool-choice with   a request that offers tools (tool_choice not "none") is
    --tool-call-parser NAME          answered by a call of the first offered tool: `content`
                                     null, `tool_calls` with its name and JSON arguments, one
                                     per required parameter (the answer's words as values),
                                     finish_reason "tool_calls"
    --fault-unparsed-paths           the parsers are broken (as a commit may break them):
                                     the reasoning stays in `content`, the call is written
                                     into `content` as text and `tool_calls` is empty

The tokens (and their logprob entries) are the answer's words either way, so a broken
parser changes no token: only the reasoning field and the tool call tell it.

A request's tools are hostile input: `offered_tool` keeps the first tool's name only when it
is a function name OpenAI allows (letters, digits, `_`, `-`, at most 64) and at most
MAX_REQUIRED of its required parameter names, each at most 64 characters; anything else is a
400 (bench.twin.requests.BadRequest). Every string goes out through json (escaped).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.twin.requests import BadRequest

MAX_REQUIRED = 8
_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


@dataclass(frozen=True)
class Paths:
    reasoning: bool = False  # --reasoning-parser
    tool_calls: bool = False  # --enable-auto-tool-choice and --tool-call-parser
    unparsed: bool = False  # --fault-unparsed-paths


@dataclass(frozen=True)
class OfferedTool:
    name: str
    required: tuple[str, ...] = ()


def offered_tool(obj: dict[str, Any]) -> OfferedTool | None:
    """The first tool the request offers, or None (no tools, or tool_choice "none")."""
    tools = obj.get("tools")
    if tools is None or obj.get("tool_choice") == "none":
        return None
    if not isinstance(tools, list) or not tools:
        raise BadRequest("'tools' must be a non-empty list", param="tools")
    function = tools[0].get("function") if isinstance(tools[0], dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(name, str) or not _FUNCTION_NAME.fullmatch(name):
        raise BadRequest("each tool needs a function with a valid 'name'", param="tools")
    params = function.get("parameters") if isinstance(function, dict) else None
    required = params.get("required") if isinstance(params, dict) else None
    if required is None:
        return OfferedTool(name)
    if not isinstance(required, list) or not all(
        isinstance(r, str) and 0 < len(r) <= 64 for r in required
    ):
        raise BadRequest("a tool's 'required' must be a list of names", param="tools")
    return OfferedTool(name, tuple(required[:MAX_REQUIRED]))


def chat_message(
    words: Sequence[str], tool: OfferedTool | None, paths: Paths, call_id: str
) -> tuple[dict[str, Any], str]:
    """The `message` of a non-streamed chat answer of WORDS, and its finish_reason."""
    text = "".join(words)
    message: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": []}
    if paths.unparsed:
        if tool is not None and paths.tool_calls:
            message["content"] = text + "<tool_call>" + _call_json(words, tool) + "</tool_call>"
        return message, "length"
    if paths.reasoning:
        cut = len(words) * 3 // 4
        message["reasoning_content"] = "".join(words[:cut])
        message["content"] = "".join(words[cut:])
    if tool is None or not paths.tool_calls:
        return message, "length"
    message["content"] = None
    message["tool_calls"] = [
        {
            "id": call_id,
            "type": "function",
            "function": {"name": tool.name, "arguments": json.dumps(_arguments(words, tool))},
        }
    ]
    return message, "tool_calls"


def _arguments(words: Sequence[str], tool: OfferedTool) -> dict[str, str]:
    """One value a required parameter: the answer's words in turn."""
    return {n: words[i % len(words)].strip() if words else "" for i, n in enumerate(tool.required)}


def _call_json(words: Sequence[str], tool: OfferedTool) -> str:
    return json.dumps({"name": tool.name, "arguments": _arguments(words, tool)})
