"""Did the answer keep the launch's promise? The reasoning field and the tool call of a
chat completion, read from hostile JSON (bench.run.answer_body reads its text and ids).

Every field may be missing, of another type, huge or absurd; each case is a `PathRead`
whose `held` says whether the promise held and `detail` what was found, never an exception:

    reasoning: `reasoning_content` or `reasoning` a non-empty string   -> held
               neither field, or not a string, or only white space      -> broken, saying which
    tool call: `tool_calls[0].function` with `name` the offered tool's
               and `arguments` a string holding a JSON object            -> held
               no tool_calls, an empty list, an entry of another type    -> broken
               another function's name, a name over MAX_NAME_CHARS       -> broken
               arguments not a string, over MAX_ARGUMENTS_CHARS, not
               JSON, nested deeper than Python's parser goes, not an
               object                                                    -> broken

A held tool call's `text` is the call written out, `name(arguments)` with the arguments as
canonical JSON (keys sorted, ASCII), cut to MAX_ANSWER_CHARS: what is compared when the
server returns no token ids (a tool-call answer has no content).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bench.answers import MAX_ANSWER_CHARS
from bench.run.answer_body import clean_text

MAX_NAME_CHARS = 128
MAX_ARGUMENTS_CHARS = 65_536  # a JSON text longer than this is not parsed (nor kept)
_SHOWN = 60  # characters of a hostile value quoted in a detail


@dataclass(frozen=True)
class PathRead:
    held: bool
    detail: str
    text: str | None = None  # a held tool call written out


def _message(answer: Any) -> dict[str, Any] | None:
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None
    message = choices[0].get("message")
    return message if isinstance(message, dict) else None


def _shown(value: str) -> str:
    cut = value[:_SHOWN]
    return repr(clean_text(cut)) + ("..." if len(value) > _SHOWN else "")


def reasoning(answer: Any) -> PathRead:
    """Whether the answer's thinking came back in its reasoning field."""
    message = _message(answer)
    if message is None:
        return PathRead(False, "no message in the answer")
    for name in ("reasoning_content", "reasoning"):
        value = message.get(name)
        if isinstance(value, str) and value.strip():
            return PathRead(True, f"{len(value)} characters in `{name}`")
    present = [n for n in ("reasoning_content", "reasoning") if message.get(n) is not None]
    if present:
        return PathRead(False, f"`{present[0]}` is empty or not a string")
    return PathRead(False, "no reasoning field in the answer (the reasoning is not parsed)")


def tool_call(answer: Any, offered: str) -> PathRead:
    """Whether the answer's first tool call is a call of OFFERED with JSON arguments."""
    function = _function(_message(answer))
    if isinstance(function, PathRead):
        return function
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return PathRead(False, "the tool call names no function")
    if len(name) > MAX_NAME_CHARS or name != offered:
        return PathRead(False, f"the tool call names {_shown(name)}, not the offered {offered}")
    parsed = _arguments(function.get("arguments"))
    if isinstance(parsed, PathRead):
        return parsed
    text = clean_text(f"{name}({parsed})")[:MAX_ANSWER_CHARS]
    return PathRead(True, f"a call of {name} with JSON arguments", text)


def _function(message: dict[str, Any] | None) -> dict[str, Any] | PathRead:
    """The first tool call's `function` object, or why there is none."""
    if message is None:
        return PathRead(False, "no message in the answer")
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls:
        return PathRead(False, "no tool call in the answer (the tool call does not parse)")
    function = calls[0].get("function") if isinstance(calls[0], dict) else None
    if not isinstance(function, dict):
        return PathRead(False, "the tool call has no `function` object")
    return function


def _arguments(arguments: Any) -> str | PathRead:
    """The arguments as canonical JSON (keys sorted, ASCII), or why they are none."""
    if not isinstance(arguments, str):
        kind = type(arguments).__name__
        return PathRead(False, f"the tool call's arguments are a {kind}, not a JSON string")
    if len(arguments) > MAX_ARGUMENTS_CHARS:
        return PathRead(
            False, f"the tool call's arguments are {len(arguments):,} characters (over the limit)"
        )
    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return PathRead(False, f"the tool call's arguments are not JSON: {_shown(arguments)}")
    if not isinstance(parsed, dict):
        kind = type(parsed).__name__
        return PathRead(False, f"the tool call's arguments are a JSON {kind}, not an object")
    try:
        return json.dumps(parsed, sort_keys=True, ensure_ascii=True)
    except (ValueError, RecursionError):
        return PathRead(False, "the tool call's arguments are JSON nested too deep to keep")
