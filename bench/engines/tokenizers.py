"""An engine's text tokenizer, for counting streamed tokens when chunks carry no usage
(`bench.stream.tokens` does the counting): the server's own `/tokenize`, or another
server's that the user points at (`bench run --tokenizer-url`), probed once before use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.engines.base import EngineKind
from bench.errors import ServerError
from bench.stream.client import Client
from bench.stream.tokens import Counting, Tokenize, read_tokenize


def uses_text_tokenizer(engine: EngineKind) -> bool:
    """Whether streamed text is ever tokenized on this engine. vLLM: never (it counts by
    usage on every chunk only, as always), so no tokenizer is probed for it, not even
    `--tokenizer-url`. Other engines: as a safety net behind their own per-chunk count
    (an SGLang too old for continuous_usage_stats), or as the count itself."""
    return engine.name != "vllm"


def counting_for(engine: EngineKind, can_tokenize: bool) -> Counting | None:
    """vLLM: None (usage on every chunk, as always: a chunk without it makes its cell
    invalid). Other engines: their own per-chunk count, and the text kept for the
    tokenizer as a safety net (an SGLang too old for continuous_usage_stats)."""
    if not uses_text_tokenizer(engine):
        return None
    return Counting(chunk_count=engine.chunk_count, capture_text=can_tokenize)


async def server_tokenizer(client: Client, engine: EngineKind, model: str) -> Tokenize | None:
    """The server's text tokenizer, when a probe of it answers; else None."""
    return await _probed(
        client, engine.tokenize_path, lambda text: engine.tokenize_body(model, text)
    )


async def url_tokenizer(client: Client) -> Tokenize | None:
    """A tokenizer the user points at (`bench run --tokenizer-url`): another server's
    /tokenize, in llama.cpp's shape (`content`) or vLLM's and SGLang's (`prompt`, the
    server's default model)."""
    bodies: tuple[Callable[[str], dict[str, Any]], ...] = (
        lambda text: {"content": text, "add_special": False, "with_pieces": True},
        lambda text: {"prompt": text, "add_special_tokens": False},
    )
    for body in bodies:
        got = await _probed(client, "/tokenize", body)
        if got is not None:
            return got
    return None


async def _probed(
    client: Client, path: str, body: Callable[[str], dict[str, Any]]
) -> Tokenize | None:
    async def tokenize(text: str) -> tuple[int, list[bytes] | None] | None:
        try:
            status, answer = await client.post_json(path, body(text), idempotent=True)
        except ServerError:  # an answer over the size limit: this text stays uncounted
            return None
        return read_tokenize(answer) if status == 200 else None

    got = await tokenize("hello world")
    return tokenize if got is not None and got[0] > 0 else None
