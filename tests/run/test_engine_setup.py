"""`bench run`'s engine set-up (bench.run.server_info.engine_setup) over scripted
transports: the text tokenizer is probed only where it will be used."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from bench.engines.base import Capacity
from bench.results import EngineName, KvCapacity, ServerInfo
from bench.run.server_info import engine_setup
from bench.stream import tokens
from bench.stream.client import Client

IGNORED = (
    "bench: --tokenizer-url ignored: the server (vllm) reports token counts in usage on "
    "every chunk\n"
)


def _setup(
    engine: EngineName, tokenizer_answer: object
) -> tuple[ServerInfo, tokens.Tokenize | None, list[str], list[str]]:
    """engine_setup for a server of `engine` and a `--tokenizer-url` whose /tokenize
    answers `tokenizer_answer`; the paths each of the two was asked."""
    asked_server: list[str] = []
    asked_tokenizer: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        asked_server.append(request.url.path)
        return httpx.Response(404)

    def tokenizer(request: httpx.Request) -> httpx.Response:
        asked_tokenizer.append(request.url.path)
        return httpx.Response(200, text=json.dumps(tokenizer_answer))

    info = ServerInfo(url="http://s", model="m", max_model_len=4096, engine=engine)
    kv = KvCapacity(tokens=2048, source="engine_metrics", detail="d")
    engine_kv = Capacity(tokens=2048, source="metrics:x", detail="d")

    async def go() -> tuple[ServerInfo, tokens.Tokenize | None]:
        client = Client("http://s", clock=lambda: 0.0, transport=httpx.MockTransport(server))
        by_url = Client("http://t", clock=lambda: 0.0, transport=httpx.MockTransport(tokenizer))
        try:
            got, _, tokenize = await engine_setup(client, info, kv, engine_kv, by_url)
            return got, tokenize
        finally:
            await client.aclose()
            await by_url.aclose()

    got, tokenize = asyncio.run(go())
    return got, tokenize, asked_server, asked_tokenizer


def test_tokenizer_url_is_not_probed_against_vllm_and_stderr_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # A tokenizer that does not count: probing it would stop the run (UsageError).
    info, tokenize, asked_server, asked_tokenizer = _setup("vllm", {"error": "no"})
    assert (tokenize, asked_server, asked_tokenizer) == (None, [], [])
    assert capsys.readouterr().err == IGNORED
    assert "output_tokens_fallback" not in info.facts_source
    assert info.facts_source["output_tokens"].startswith("endpoint:stream usage on every chunk")


def test_tokenizer_url_is_probed_where_streamed_text_is_counted(
    capsys: pytest.CaptureFixture[str],
) -> None:
    info, tokenize, asked_server, asked_tokenizer = _setup("llamacpp", {"tokens": [1, 2]})
    assert tokenize is not None and asked_tokenizer == ["/tokenize"] and asked_server == []
    assert capsys.readouterr().err == ""
    assert info.facts_source["output_tokens_fallback"] == (
        "fallback:streamed text tokenized by http://t/tokenize (--tokenizer-url)"
    )
