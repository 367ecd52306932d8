"""A fast OpenAI-style streaming server for measuring clients, not servers.

The twin simulates vLLM's scheduler and costs tens of microseconds per chunk, so at
1,024 streams it, not the client, would be the limit. This server does the least a
vLLM-shaped stream needs: every chunk is pre-rendered once per (cumulative count,
tokens per chunk) with `usage` on it (continuous usage stats), and one ticker writes the
next chunk of every open stream per tick: every `interval_s` (paced, all streams in step
like a batched decode) or as fast as the loop turns (unpaced; a stream whose socket
buffer is full is skipped until it drains). It counts what it sent; `GET /perf/stats`
returns the counters so the harness can line them up with the client's CPU time.

`usage.prompt_tokens` is the prompt's count of whitespace-separated words (the messages'
text for chat), so a client that sizes its prompts from usage (`bench run --workload`
against a server without /tokenize) finds a count that grows with the text.

    python -m tools.perf.streamer --port 0 --interval-ms 10 --tokens-per-chunk 1 --cpu 0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
from dataclasses import dataclass
from typing import Any

MODEL = "perf"
_WORD = " tok"


@dataclass
class StreamerCounters:
    requests: int = 0
    active: int = 0
    tokens: int = 0
    chunks: int = 0


class _Chunks:
    """Pre-rendered HTTP chunks (size line + SSE event) keyed by cumulative tokens."""

    def __init__(self, chat: bool, prompt_tokens: int) -> None:
        self.chat = chat
        self.prompt_tokens = prompt_tokens
        self.cache: dict[tuple[int, int], bytes] = {}
        obj = "chat.completion.chunk" if chat else "text_completion"
        self.head = f'data: {{"id":"perf-0","object":"{obj}","created":0,"model":"{MODEL}",'

    def _usage(self, n: int) -> str:
        p = self.prompt_tokens
        return f'"usage":{{"prompt_tokens":{p},"total_tokens":{p + n},"completion_tokens":{n}}}'

    def _frame(self, event: str) -> bytes:
        data = (event + "\n\n").encode()
        return b"%x\r\n%b\r\n" % (len(data), data)

    def _choice(self, delta: str, n: int, finish: str = "null") -> bytes:
        if self.chat:
            body = f'"delta":{delta}'
        else:
            body = f'"text":{json.dumps(json.loads(delta).get("content", ""))}'
        return self._frame(
            f'{self.head}"choices":[{{"index":0,{body},"logprobs":null,'
            f'"finish_reason":{finish}}}],{self._usage(n)}}}'
        )

    def role(self) -> bytes:
        return self._choice('{"role":"assistant","content":""}', 0)

    def tokens(self, cumulative: int, k: int) -> bytes:
        key = (cumulative, k)
        got = self.cache.get(key)
        if got is None:
            got = self.cache[key] = self._choice(json.dumps({"content": _WORD * k}), cumulative)
        return got

    def tail(self, n: int) -> bytes:
        finish = self._choice("{}", n, '"length"')
        usage = self._frame(f'{self.head}"choices":[],{self._usage(n)}}}')
        return finish + usage + self._frame("data: [DONE]") + b"0\r\n\r\n"


class _Stream:
    __slots__ = ("chunks", "max_tokens", "proto", "sent")

    def __init__(self, proto: _Proto, chunks: _Chunks, max_tokens: int) -> None:
        self.proto = proto
        self.chunks = chunks
        self.max_tokens = max_tokens
        self.sent = 0


class Streamer:
    def __init__(self, interval_s: float, tokens_per_chunk: int) -> None:
        self.interval_s = interval_s
        self.k = tokens_per_chunk
        self.counters = StreamerCounters()
        self.streams: list[_Stream] = []
        self.rendered: dict[tuple[bool, int], _Chunks] = {}
        self._ticking = False

    def open(self, proto: _Proto, chat: bool, max_tokens: int, prompt_tokens: int) -> None:
        c = self.counters
        c.requests += 1
        c.active += 1
        chunks = self.rendered.get((chat, prompt_tokens))
        if chunks is None:
            chunks = self.rendered[chat, prompt_tokens] = _Chunks(chat, prompt_tokens)
        proto.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
            b"transfer-encoding: chunked\r\n\r\n" + chunks.role()
        )
        self.streams.append(_Stream(proto, chunks, max(1, max_tokens)))
        if not self._ticking:
            self._ticking = True
            loop = asyncio.get_running_loop()
            loop.call_soon(self._tick, loop.time())

    def _tick(self, due: float) -> None:
        k, c = self.k, self.counters
        keep: list[_Stream] = []
        for s in self.streams:
            p = s.proto
            if p.lost:
                c.active -= 1
                continue
            if p.paused:
                keep.append(s)
                continue
            n = min(k, s.max_tokens - s.sent)
            s.sent += n
            data = s.chunks.tokens(s.sent, n)
            c.tokens += n
            c.chunks += 1
            if s.sent >= s.max_tokens:
                p.transport.write(data + s.chunks.tail(s.sent))
                c.active -= 1
                p.busy = False
                if p.buf:
                    p.data_received(b"")  # a request that came in behind this one
            else:
                p.transport.write(data)
                keep.append(s)
        self.streams = keep
        loop = asyncio.get_running_loop()
        if not keep:
            self._ticking = False
        elif self.interval_s > 0:
            due += self.interval_s
            now = loop.time()
            if due < now - 0.25:  # far behind: stop trying to catch up
                due = now
            loop.call_at(due, self._tick, due)
        else:
            loop.call_soon(self._tick, due)

    def stats(self) -> dict[str, Any]:
        return vars(self.counters) | {"streams": len(self.streams)}


class _Proto(asyncio.Protocol):
    def __init__(self, server: Streamer) -> None:
        self.server = server
        self.buf = b""
        self.lost = False
        self.paused = False
        self.busy = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while not self.busy:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self.buf[:end].decode("latin-1").split("\r\n")
            length = 0
            for line in head[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if len(self.buf) < end + 4 + length:
                return
            body = self.buf[end + 4 : end + 4 + length]
            self.buf = self.buf[end + 4 + length :]
            method, path = head[0].split(" ")[:2]
            self._route(method, path, body)

    def _route(self, method: str, path: str, body: bytes) -> None:
        if method == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            obj = json.loads(body or b"{}")
            max_tokens = obj.get("max_completion_tokens") or obj.get("max_tokens") or 16
            self.busy = True
            chat = path.endswith("chat/completions")
            self.server.open(self, chat, int(max_tokens), prompt_words(obj))
        elif path == "/perf/stats":
            self._json(self.server.stats())
        elif path == "/v1/models":
            self._json({"object": "list", "data": [{"id": MODEL, "max_model_len": 1 << 20}]})
        elif path in ("/health", "/ping"):
            self._json({})
        else:
            self._json({"error": f"no route {path}"}, "404 Not Found")

    def _json(self, obj: Any, status: str = "200 OK") -> None:
        body = json.dumps(obj).encode()
        self.transport.write(
            b"HTTP/1.1 %b\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%b"
            % (status.encode(), len(body), body)
        )


def prompt_words(obj: dict[str, Any]) -> int:
    """A request's prompt length as the streamer counts it: whitespace-separated words of
    its messages' text (a string or text parts) or of its prompt; at least 1."""
    texts: list[str] = []
    for m in obj.get("messages") or ():
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [p["text"] for p in content if isinstance(p, dict) and "text" in p]
    prompt = obj.get("prompt")
    if isinstance(prompt, str):
        texts.append(prompt)
    return max(1, sum(len(t.split()) for t in texts if isinstance(t, str)))


async def serve(host: str, port: int, streamer: Streamer) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Proto(streamer), host, port, backlog=4096)
    bound = server.sockets[0].getsockname()
    print(f"streamer: listening on http://{bound[0]}:{bound[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.perf.streamer")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--interval-ms", type=float, default=10.0, help="0: as fast as possible")
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--cpu", type=int, default=None, help="pin this process to one core")
    args = p.parse_args(argv)
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    streamer = Streamer(args.interval_ms / 1000.0, args.tokens_per_chunk)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, streamer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
