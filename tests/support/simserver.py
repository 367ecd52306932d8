"""A vLLM-like server in virtual time, as an httpx transport (no sockets, no sleeping).

Run it on `tests.support.virtual`'s loop: prefill takes prompt tokens / `prefill_tok_s`,
requests that arrive together reach the engine one `frontend_s` apart (as the API process
renders and tokenizes them one by one), then a token comes every `tbt_s`. `/tokenize`
costs `tokenize_fixed_s` + `tokenize_per_char_s` per character. A request whose client
goes away keeps counting as running for `linger_s` (vLLM aborts it a few steps later).
Every request is logged with its virtual times, and every change of the running count
(`running_log`), so tests can check what ran beside what.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx

from tests.support.scripted import DONE, chat_chunk

TEMPLATE_TOKENS = 9  # what the chat template adds


def count_tokens(text: str) -> int:
    return TEMPLATE_TOKENS + len(re.findall(r"\w+|[^\w\s]", text))


@dataclass
class Call:
    kind: str  # "tokenize", "warmup", "scout", "decode"
    start_s: float
    end_s: float | None = None
    first_token_s: float | None = None
    text: str = ""


@dataclass
class SimServer:
    prefill_tok_s: float = 5000.0
    frontend_s: float = 0.05
    tbt_s: float = 0.02
    tokenize_fixed_s: float = 0.001
    tokenize_per_char_s: float = 1e-7
    linger_s: float = 0.0
    # Prefix caching: a prompt seen before hits all but this many tokens (counted per token
    # on /metrics when the request reaches the engine, as vLLM's prefix_cache_* counters).
    recompute_tokens: int = 16
    prefix_queries: int = 0
    prefix_hits: int = 0
    _seen: set[str] = field(default_factory=set)
    calls: list[Call] = field(default_factory=list)
    running: int = 0
    running_log: list[tuple[float, int]] = field(default_factory=list)
    _frontend_free_s: float = 0.0
    # Faults: the n-th /metrics request (counted from 1) never answers; every /tokenize
    # never answers; a decode stream stops after this many tokens and sends nothing more.
    hang_metrics: frozenset[int] = frozenset()
    hang_tokenize: bool = False
    stall_after_tokens: int | None = None
    # Requests of these kinds ("warmup", "scout", "decode") stream tokens for ever, whatever
    # max_tokens says; usage=False: chunks carry text only (a count must come from /tokenize).
    endless: frozenset[str] = frozenset()
    usage: bool = True
    metrics_calls: list[float] = field(default_factory=list)

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._handle)

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    def add_running(self, n: int) -> None:
        self.running += n
        self.running_log.append((self.now(), self.running))

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/metrics":
            self.metrics_calls.append(self.now())
            if len(self.metrics_calls) in self.hang_metrics:
                await asyncio.Event().wait()
            text = (
                f"vllm:num_requests_running {self.running}\nvllm:num_requests_waiting 0\n"
                f"vllm:prefix_cache_queries_total {self.prefix_queries}\n"
                f"vllm:prefix_cache_hits_total {self.prefix_hits}\n"
            )
            return httpx.Response(200, text=text)
        body = json.loads(request.content)
        text = body.get("messages", [{}])[0].get("content", "")
        if path == "/tokenize":
            call = Call("tokenize", self.now(), text=text)
            self.calls.append(call)
            if self.hang_tokenize:
                await asyncio.Event().wait()
            await asyncio.sleep(self.tokenize_fixed_s + self.tokenize_per_char_s * len(text))
            call.end_s = self.now()
            return httpx.Response(200, json={"count": count_tokens(text)})
        if path == "/v1/chat/completions":
            kind = "scout" if body["max_tokens"] == 1 else "decode"
            if "context warm-up]" in text:
                kind = "warmup"
            call = Call(kind, self.now(), text=text)
            self.calls.append(call)
            return httpx.Response(200, stream=_Stream(self, call, body["max_tokens"]))
        return httpx.Response(404)

    def cell_spans(self) -> list[tuple[float, float]]:
        """[first decode request, last decode end] of each burst of decode requests."""
        spans: list[tuple[float, float]] = []
        decode = (c for c in self.calls if c.kind == "decode")
        for c in sorted(decode, key=lambda c: c.start_s):
            end = c.end_s if c.end_s is not None else c.start_s
            if spans and c.start_s <= spans[-1][1]:
                spans[-1] = (spans[-1][0], max(spans[-1][1], end))
            else:
                spans.append((c.start_s, end))
        return spans


class _Stream(httpx.AsyncByteStream):
    def __init__(self, sim: SimServer, call: Call, max_tokens: int) -> None:
        self.sim = sim
        self.call = call
        self.max_tokens = max_tokens
        self.counted = False
        self.closed = False
        self.finished = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        sim, call = self.sim, self.call
        prompt = count_tokens(call.text)
        try:
            # The API process takes arrivals one at a time (the stagger of a burst); only
            # then does the engine count the request as running.
            ready = max(sim.now(), sim._frontend_free_s) + sim.frontend_s
            sim._frontend_free_s = ready
            await asyncio.sleep(ready - sim.now())
            sim.add_running(1)
            sim.prefix_queries += prompt
            if call.text in sim._seen:
                sim.prefix_hits += max(prompt - sim.recompute_tokens, 0)
            sim._seen.add(call.text)
            self.counted = True
            if call.kind == "scout":
                await asyncio.sleep(prompt / sim.prefill_tok_s)
            else:
                await asyncio.sleep(sim.tbt_s)
            last = 10**9 if call.kind in sim.endless else self.max_tokens
            for n in range(1, last + 1):
                if n > 1:
                    await asyncio.sleep(sim.tbt_s)
                stall = sim.stall_after_tokens
                if call.kind == "decode" and stall is not None and n == stall + 1:
                    await asyncio.Event().wait()
                if call.first_token_s is None:
                    call.first_token_s = sim.now()
                count = n if sim.usage else None
                yield chat_chunk("x", completion_tokens=count, prompt_tokens=prompt)
            self.finished = True
            yield DONE
        finally:
            self._end()

    def _end(self) -> None:
        if not self.closed:
            self.closed = True
            if self.counted and (self.finished or self.sim.linger_s <= 0):
                self.sim.add_running(-1)
            elif self.counted:  # the client went away: the server notices later
                asyncio.get_running_loop().call_later(self.sim.linger_s, self.sim.add_running, -1)
            self.call.end_s = self.sim.now()

    async def aclose(self) -> None:
        self._end()
