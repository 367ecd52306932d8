"""Reading one answer of the fingerprint (a non-streamed completion) from hostile JSON.

Every field may be missing, of another type, huge or absurd; what cannot be read is a
reason on the answer, never an exception:

    not a JSON object, no `choices[0]`          -> failed: "no choices in the answer"
    no text (content, reasoning, text) at all   -> failed: "no text in the answer"
    a text over MAX_ANSWER_CHARS                -> kept cut to it
    logprobs entries without an id for each     -> no ids (the text is tokenized instead)
    an id that is no int in [0, 2**31)          -> no ids
    more entries than asked                     -> the first `max_tokens`
    NaN / inf logprobs                          -> never read (only ids are)
    a lone surrogate in the text (JSON "\\udc80") -> replaced, so results.json stays UTF-8

Ids: OpenAI-style `choices[0].logprobs.content[i]` (chat; llama.cpp's entries carry `id`,
vLLM's `token` is "token_id:N" with return_tokens_as_token_ids), `choices[0].logprobs.tokens`
(completions: strings), or llama.cpp's own `completion_probabilities`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from bench.answers import MAX_ANSWER_CHARS, MAX_ANSWER_TOKENS

_TOKEN_ID = re.compile(r"token_id:([0-9]{1,10})")
_ID_LIMIT = 1 << 31


@dataclass(frozen=True)
class ReadAnswer:
    text: str
    token_ids: tuple[int, ...] | None
    output_tokens: int | None
    failure: str | None = None


def clean_text(text: str) -> str:
    """TEXT without lone surrogates (replaced by '?') and cut to MAX_ANSWER_CHARS."""
    return text[:MAX_ANSWER_CHARS].encode("utf-8", "replace").decode("utf-8")


def read(answer: Any, max_tokens: int) -> ReadAnswer:
    """The text, the ids (None unless every token has one) and usage of ANSWER."""
    choice = _first_choice(answer)
    if choice is None:
        return ReadAnswer("", None, None, "no choices in the answer")
    parts = []
    message = choice.get("message")
    if isinstance(message, dict):
        # A reasoning parser moves the start of the answer into its own field.
        for name in ("reasoning_content", "reasoning", "content"):
            if isinstance(value := message.get(name), str):
                parts.append(value)
    if isinstance(value := choice.get("text"), str):
        parts.append(value)
    if isinstance(value := answer.get("content"), str):  # llama.cpp's /completion
        parts.append(value)
    if not parts:
        return ReadAnswer("", None, _usage(answer), "no text in the answer")
    ids = _ids(choice, answer, max_tokens)
    return ReadAnswer(clean_text("".join(parts)), ids, _usage(answer))


def _first_choice(answer: Any) -> dict[str, Any] | None:
    if not isinstance(answer, dict):
        return None
    choices = answer.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        return choices[0]
    if isinstance(answer.get("content"), str):  # llama.cpp's /completion: no choices
        return {}
    return None


def _usage(answer: dict[str, Any]) -> int | None:
    usage = answer.get("usage")
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(n, bool) or not isinstance(n, int) or not 0 <= n < _ID_LIMIT:
        return None
    return n


def _entries(choice: dict[str, Any], answer: dict[str, Any]) -> list[Any] | None:
    logprobs = choice.get("logprobs")
    if isinstance(logprobs, dict):
        for name in ("content", "tokens"):
            if isinstance(found := logprobs.get(name), list) and found:
                return found
    probs = answer.get("completion_probabilities")
    return probs if isinstance(probs, list) and probs else None


def _ids(choice: dict[str, Any], answer: dict[str, Any], max_tokens: int) -> tuple[int, ...] | None:
    entries = _entries(choice, answer)
    if entries is None:
        return None
    out = []
    for entry in entries[: min(max_tokens, MAX_ANSWER_TOKENS)]:
        got = _entry_id(entry)
        if got is None:
            return None
        out.append(got)
    return tuple(out)


def _entry_id(entry: Any) -> int | None:
    if isinstance(entry, dict):
        value = entry.get("id")
        if isinstance(value, int) and not isinstance(value, bool):
            return value if 0 <= value < _ID_LIMIT else None
        entry = entry.get("token")
    if isinstance(entry, str) and (m := _TOKEN_ID.fullmatch(entry)):
        value = int(m.group(1))
        return value if value < _ID_LIMIT else None
    return None


def tokenize_ids(answer: Any) -> tuple[int, ...] | None:
    """The ids of a /tokenize answer: vLLM's `tokens` of ints, llama.cpp's of ints or of
    {"id", "piece"}; None when it is neither (or longer than MAX_ANSWER_TOKENS)."""
    toks = answer.get("tokens") if isinstance(answer, dict) else None
    if not isinstance(toks, list) or not toks or len(toks) > MAX_ANSWER_TOKENS:
        return None
    out = []
    for t in toks:
        value = t.get("id") if isinstance(t, dict) else t
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _ID_LIMIT:
            return None
        out.append(value)
    return tuple(out)
