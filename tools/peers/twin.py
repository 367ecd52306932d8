"""The twin over HTTP: the words-to-tokens line fitted through its /tokenize, and its prefix
cache reset.

The twin's prefix cache is reset before every run (the tools send the same prompts).
"""

from __future__ import annotations

import asyncio

import httpx

from bench.run import prompts
from bench.run.workload_text import TokenLine, fit_line
from tools.peers.traffic import ApiName

MODEL = "tiny"  # the twin's profile and served model


def fit_words(
    url: str, api: ApiName, transport: httpx.AsyncBaseTransport | None = None
) -> TokenLine:
    """tokens = a + b x words through the server's /tokenize, as `bench run` fits it (the
    chat template counted on chat: bench.run.presize)."""

    async def fit() -> TokenLine:
        async with httpx.AsyncClient(base_url=url, timeout=60, transport=transport) as client:

            async def count(text: str) -> int:
                body = prompts.message_body(api, MODEL, text)
                if api == "chat":
                    body["add_generation_prompt"] = True
                got = await client.post("/tokenize", json=body)
                got.raise_for_status()
                return int(got.json()["count"])

            return await fit_line(count)

    return asyncio.run(fit())


def reset_prefix_cache(url: str) -> None:
    """Every run starts with an empty prefix cache: the tools send the same prompts."""
    httpx.post(f"{url}/reset_prefix_cache", timeout=30).raise_for_status()
