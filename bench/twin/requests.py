"""Validation of the OpenAI-style request bodies: bad input becomes a 400, never a 500."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from bench.twin.tokenizer import VOCAB_SIZE, Tokenizer


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.param = param

    def body(self) -> dict[str, Any]:
        kind = {400: "BadRequestError", 401: "AuthenticationError", 404: "NotFoundError"}
        return {
            "error": {
                "message": self.message,
                "type": kind.get(self.status, "BadRequestError"),
                "param": self.param,
                "code": self.status,
            }
        }


@dataclass(frozen=True)
class Completion:
    chat: bool
    prompt_ids: list[int]
    max_tokens: int
    stream: bool
    include_usage: bool
    continuous_usage: bool
    timings: bool = False  # llama.cpp's timings_per_token
    logprobs: bool = False  # the sampled tokens' logprob entries were asked for
    token_ids_named: bool = False  # vLLM's return_tokens_as_token_ids: "token_id:N"


def parse_json(body: bytes) -> dict[str, Any]:
    try:
        obj = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadRequest(f"malformed JSON body: {exc}") from None
    if not isinstance(obj, dict):
        raise BadRequest("the JSON body must be an object")
    return obj


def _bool(obj: dict[str, Any], name: str, default: bool) -> bool:
    value = obj.get(name, default)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise BadRequest(f"'{name}' must be a boolean", param=name)
    return value


def _check_number(obj: dict[str, Any], name: str, lo: float, hi: float) -> None:
    value = obj.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo <= value <= hi:
        raise BadRequest(f"'{name}' must be a number in [{lo}, {hi}]", param=name)


def _messages(obj: dict[str, Any]) -> list[dict[str, Any]]:
    msgs = obj.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest("'messages' must be a non-empty list", param="messages")
    for m in msgs:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise BadRequest(
                "each message must be an object with a string 'role'", param="messages"
            )
        content = m.get("content")
        if content is not None and not isinstance(content, str | list):
            raise BadRequest(
                "message 'content' must be a string or a list of parts", param="messages"
            )
    return msgs


def prompt_ids(obj: dict[str, Any], tok: Tokenizer, chat: bool) -> list[int]:
    if chat:
        gen = _bool(obj, "add_generation_prompt", True)
        return tok.encode(tok.render_chat(_messages(obj), gen))
    prompt = obj.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return tok.encode(prompt)
    if isinstance(prompt, list) and prompt:
        if all(type(t) is int and 0 <= t < VOCAB_SIZE for t in prompt):
            return list(prompt)
        raise BadRequest(f"token ids must be integers in [0, {VOCAB_SIZE})", param="prompt")
    raise BadRequest("'prompt' must be a string or a non-empty list of token ids", param="prompt")


def check_model(obj: dict[str, Any], served: str) -> None:
    model = obj.get("model")
    if model is not None and model != served:
        raise BadRequest(f"The model `{model}` does not exist.", param="model")


def completion(
    obj: dict[str, Any], tok: Tokenizer, chat: bool, model: str, max_len: int
) -> Completion:
    check_model(obj, model)
    for name in ("temperature", "top_p", "presence_penalty", "frequency_penalty"):
        _check_number(obj, name, -2.0 if "penalty" in name else 0.0, 2.0)
    n = obj.get("n", 1)
    if n != 1:
        raise BadRequest("the twin serves n=1 only", param="n")
    stream = _bool(obj, "stream", False)
    _bool(obj, "ignore_eos", False)
    opts = obj.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict):
            raise BadRequest("'stream_options' must be an object", param="stream_options")
        if not stream:
            raise BadRequest(
                "Stream options can only be defined when `stream=True`.", param="stream_options"
            )
    opts = opts or {}
    ids = prompt_ids(obj, tok, chat)
    max_tokens = obj.get("max_completion_tokens") if chat else None
    if max_tokens is None:
        max_tokens = obj.get("max_tokens")
    if max_tokens is None:
        max_tokens = max(1, max_len - len(ids))
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest("'max_tokens' must be a positive integer", param="max_tokens")
    if len(ids) + max_tokens > max_len:
        raise BadRequest(
            f"This model's maximum context length is {max_len} tokens. However, you requested "
            f"{len(ids) + max_tokens} tokens ({len(ids)} in the messages, {max_tokens} in the "
            "completion). Please reduce the length of the messages or completion.",
            param="messages" if chat else "prompt",
        )
    return Completion(
        chat=chat,
        prompt_ids=ids,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=_bool(opts, "include_usage", False),
        continuous_usage=_bool(opts, "continuous_usage_stats", False),
        timings=_bool(obj, "timings_per_token", False),
        logprobs=_logprobs(obj, chat),
        token_ids_named=_bool(obj, "return_tokens_as_token_ids", False),
    )


def _logprobs(obj: dict[str, Any], chat: bool) -> bool:
    """chat: `logprobs` true; completions: `logprobs` a count 0..20 (as vLLM checks them)."""
    value = obj.get("logprobs")
    if value is None:
        return False
    if chat:
        if not isinstance(value, bool):
            raise BadRequest("'logprobs' must be a boolean", param="logprobs")
        return value
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 20:
        raise BadRequest("'logprobs' must be an integer from 0 to 20", param="logprobs")
    return True
