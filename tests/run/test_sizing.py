"""Prompt sizing without /tokenize: a line fitted to usage.prompt_tokens of two probes."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx

from bench.results import (
    KvCapacity,
    Plan,
    PlannedContext,
    Results,
    RunSettings,
    ServerInfo,
)
from bench.run import prompts
from bench.run.cell import ServerView
from bench.run.progress import SweepProgress
from bench.run.rundir import RunDir
from bench.run.sweep import SweepRunner
from bench.stream.client import Client
from tests.support.scripted import DONE, Body, ScriptedClock, chat_chunk

OVERHEAD = 9  # what a chat template adds


def _tokens(text: str) -> int:
    return OVERHEAD + len(re.findall(r"\w+|[^\w\s]", text))


def _server_without_tokenize() -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            return httpx.Response(404)
        body = json.loads(request.content)
        n = _tokens(body["messages"][0]["content"])
        chunks = [chat_chunk("x", completion_tokens=1, prompt_tokens=n), DONE]
        return httpx.Response(200, stream=Body(chunks))

    return httpx.MockTransport(handler)


def test_without_tokenize_prompts_are_sized_from_usage(tmp_path: Path) -> None:
    clock = ScriptedClock(step_s=0.001)
    client = Client("http://s", clock=clock, transport=_server_without_tokenize())
    ctx = PlannedContext(
        label="8K",
        nominal_tokens=8192,
        prompt_tokens=8192,
        trimmed=False,
        decode=True,
        max_tokens=16,
    )
    results = Results(
        bench_version="t", run_id="r", created_at="t",
        settings=RunSettings(url="http://s", contexts=(8192,), concurrencies=(1,),
                             duration_s=1, max_tokens=16),
        server=ServerInfo(url="http://s", model="m", max_model_len=32768, has_tokenize=False),
        plan=Plan(contexts=(ctx,), cells=(), kv=KvCapacity(tokens=None, source="unknown",
                  detail="-"), estimated_duration_s=0, prompt_sizing="usage_calibrated"),
    )  # fmt: skip

    async def no_sleep(seconds: float) -> None:
        await asyncio.sleep(0)

    sweep = SweepRunner(
        server=ServerView(client, clock, no_sleep, has_metrics=False),
        rundir=RunDir(tmp_path),
        progress=SweepProgress(clock, total_cells=0, estimated_s=0, tty=False),
        anchor_s=0.0,
    )

    async def go() -> tuple[str, int]:
        text = prompts.PromptText("r", 0, "8K", 0)
        got = await sweep._presize.size(results, ctx, text)
        await client.aclose()
        return got

    text, planned = asyncio.run(go())
    assert planned == 8192
    # The fitted line is exact for a linear tokenizer: within one word of the target.
    assert abs(_tokens(text) - 8192) <= 2
