"""Rendering one response: OpenAI-style SSE chunks (pre-rendered around the numbers) or JSON.

A `Stream` is the sink the engine loop feeds with emitted token counts; it writes chunks
straight to the connection, applies this request's faults, and records ground truth.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

from bench.twin import answers, paths
from bench.twin.faults import StreamFaults
from bench.twin.http import TwinConnection

# Each generated "token" is one piece of the twin's tokenizer.
WORDS = [
    " lorem",
    " ipsum",
    " dolor",
    " sit",
    " amet",
    " consectetur",
    " adipiscing",
    " elit",
    " sed",
    " do",
    " eiusmod",
    " tempor",
    " incididunt",
    " ut",
    " labore",
    " et",
]


def _text(start: int, n: int) -> str:
    return "".join(WORDS[(start + i) % len(WORDS)] for i in range(n))


# Pre-rendered (JSON-safe) text of n tokens starting at word i, for the streaming hot path.
_TEXT = [[_text(i, n).encode() for n in range(9)] for i in range(len(WORDS))]


@dataclass
class StreamSpec:
    rid: str
    created: int
    model: str
    chat: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool
    prompt_tokens: int
    max_tokens: int
    engine: str = "vllm"  # the twin's flavor (bench.twin.flavors)
    timings: bool = False  # llama.cpp's timings_per_token was asked
    # A non-streamed answer's words (indices into WORDS, bench.twin.answers), and whether
    # their logprob entries were asked for (with vLLM's "token_id:N" names).
    answer: tuple[int, ...] | None = None
    logprobs: bool = False
    token_ids_named: bool = False
    tool: paths.OfferedTool | None = None  # the tool a non-streamed chat request offers
    parsers: paths.Paths = field(default_factory=paths.Paths)  # the launch's parsers

    @property
    def usage_every_chunk(self) -> bool:
        """vLLM needs include_usage and continuous_usage_stats; SGLang continuous_usage_stats
        alone; llama.cpp never sends usage before the end."""
        if self.engine == "sglang":
            return self.continuous_usage
        return self.engine == "vllm" and self.include_usage and self.continuous_usage

    @property
    def timings_every_chunk(self) -> bool:
        return self.engine == "llamacpp" and self.timings


@dataclass
class Stream:
    spec: StreamSpec
    conn: TwinConnection
    faults: StreamFaults
    stall_s: float = 0.0
    arrival: float = 0.0
    log_chunks: bool = False
    pending: int = 0  # tokens emitted by the engine, not yet written
    pending_done: bool = False
    done: asyncio.Future[None] | None = None
    output_tokens: int = 0
    chunk_log: list[tuple[float, int]] = field(default_factory=list)
    _held: list[bytes] = field(default_factory=list)
    _stall_until: float = 0.0
    _text_parts: list[str] = field(default_factory=list)
    _role_due: bool = False  # a chat stream's role chunk, not yet written (`_role_chunk`)
    outcome: str = "running"
    # The request's timeline on the wall clock, for its trace span (bench.twin.tracing):
    # into the engine's queue, first scheduled, first output written; 0.0: not yet.
    queued: float = 0.0
    scheduled: float = 0.0
    first_output: float = 0.0
    traceparent: str | None = None  # the request's W3C trace context header, as it came

    def __post_init__(self) -> None:
        s = self.spec
        obj = "chat.completion.chunk" if s.chat else "text_completion"
        self._head = (
            f'data: {{"id":"{s.rid}","object":"{obj}","created":{s.created},'
            f'"model":"{s.model}","choices":[{{"index":0,'
        ).encode()
        self._usage_tail = s.usage_every_chunk
        self._timings = s.timings_every_chunk
        if s.chat:
            self._pre = self._head + b'"delta":{"content":"'
            self._mid = b'"},"logprobs":null,"finish_reason":null}]'
        else:
            self._pre = self._head + b'"text":"'
            self._mid = b'","logprobs":null,"stop_reason":null,"finish_reason":null}]'
        if self._usage_tail:
            p = s.prompt_tokens
            self._tail = (
                f',"usage":{{"prompt_tokens":{p},"total_tokens":%d,"completion_tokens":%d}}}}\n\n'
            ).encode()
        elif self._timings:
            self._tail = (
                f',"timings":{{"prompt_n":{s.prompt_tokens},"predicted_n":%d}}}}\n\n'.encode()
            )
        else:
            self._tail = b"}\n\n"
        f = self.faults
        self._plain = s.stream and not (f.malformed or f.stall or f.cut_at_tokens is not None)

    # -- streaming -------------------------------------------------------------------------
    def begin(self) -> None:
        """The response's headers, at once (vLLM's StreamingResponse sends them before the
        engine's first output). A chat stream's role chunk waits for the first output: see
        `_role_chunk`."""
        if not self.spec.stream:
            return
        self.conn.start_chunked()
        self._role_due = self.spec.chat

    def _role_chunk(self) -> bytes:
        """The chat role chunk, sent with the engine's first output right before its token
        chunk (in the same flush), as both engines do: vLLM's chat server writes it on the
        first iteration over the engine's outputs (with continuous usage, completion_tokens
        0), llama.cpp's on the first decoded token's result (content null, and its timings
        ride on the token's delta, the last of the two)."""
        llama = self.spec.engine == "llamacpp"
        empty = "null" if llama else '""'
        body = f'"delta":{{"role":"assistant","content":{empty}}},"logprobs":null'
        tail = ',"finish_reason":null}]'
        if self._usage_tail:
            tail += "," + self._usage_json()
        return self._head + f"{body}{tail}}}\n\n".encode()

    def emit(self, tokens: int, finished: bool, now: float) -> None:
        if not self.first_output:
            self.first_output = now
        if self._role_due:
            self._role_due = False
            self._send(self._role_chunk())
        if self._plain and not finished and tokens < 9:
            start = self.output_tokens
            n = start + tokens
            self.output_tokens = n
            if self.log_chunks:
                self.chunk_log.append((now, tokens))
            if self._usage_tail:
                tail = self._tail % (self.spec.prompt_tokens + n, n)
            else:
                tail = self._tail % n if self._timings else self._tail
            self.conn.chunk(self._pre + _TEXT[start % len(WORDS)][tokens] + self._mid + tail)
            return
        self._emit_slow(tokens, finished, now)

    def _emit_slow(self, tokens: int, finished: bool, now: float) -> None:
        start = self.output_tokens
        self.output_tokens += tokens
        if self.log_chunks:
            self.chunk_log.append((now, tokens))
        text = self._words(start, tokens)
        if not self.spec.stream:
            self._text_parts.append(text)
            if finished:
                self._finish_json()
            return
        quoted = json.dumps(text)
        if self.spec.chat:
            body = f'"delta":{{"content":{quoted}}},"logprobs":null'
        else:
            body = f'"text":{quoted},"logprobs":null,"stop_reason":null'
        self._send(self._choice(body, "null"))
        if self.faults.malformed and start == 0:
            self._send(self._head + b'"delta":{"content":"\n\n')
        if self.faults.stall and start == 0:
            self._stall_until = time.monotonic() + self.stall_s
            asyncio.get_running_loop().call_later(self.stall_s, self._release)
        cut = self.faults.cut_at_tokens
        if cut is not None and self.output_tokens >= cut and not finished:
            self._flush_held()
            self.outcome = "cut"
            self.conn.cut()
            self._resolve()
            return
        if finished:
            self._send(self._choice(self._finish_delta(), '"length"', final=True))
            if self.spec.include_usage and not self._usage_on_finish():
                self._send(self._usage_only())
            self._send(b"data: [DONE]\n\n")
            self.outcome = "finished"
            if not self._held:
                self.conn.end_chunked()
                self._resolve()

    def _words(self, start: int, tokens: int) -> str:
        """The text of tokens start.. : a non-streamed answer's own, else the word cycle."""
        answer = self.spec.answer
        if answer is not None and not self.spec.stream:
            return "".join(WORDS[w] for w in answer[start : start + tokens])
        return _text(start, tokens)

    def _finish_delta(self) -> str:
        if self.spec.chat:
            return '"delta":{},"logprobs":null'
        return '"text":"","logprobs":null,"stop_reason":null'

    def _usage_on_finish(self) -> bool:
        """llama.cpp's completions put usage on the finish chunk, asked for or not."""
        return self.spec.engine == "llamacpp" and not self.spec.chat

    def _choice(self, body: str, finish: str, final: bool = False) -> bytes:
        tail = f',"finish_reason":{finish}}}]'
        llama = self.spec.engine == "llamacpp"
        if self._usage_tail or (final and self._usage_on_finish()):
            tail += "," + self._usage_json()
        if self._timings or (
            final and llama and (not self.spec.chat or not self.spec.include_usage)
        ):
            tail += "," + self._timings_json()
        return self._head + f"{body}{tail}}}\n\n".encode()

    def _usage_json(self) -> str:
        p, n = self.spec.prompt_tokens, self.output_tokens
        return f'"usage":{{"prompt_tokens":{p},"total_tokens":{p + n},"completion_tokens":{n}}}'

    def _timings_json(self) -> str:
        p, n = self.spec.prompt_tokens, self.output_tokens
        return f'"timings":{{"prompt_n":{p},"predicted_n":{n}}}'

    def _usage_only(self) -> bytes:
        s = self.spec
        obj = "chat.completion.chunk" if s.chat else "text_completion"
        extra = "," + self._timings_json() if s.engine == "llamacpp" else ""
        return (
            f'data: {{"id":"{s.rid}","object":"{obj}","created":{s.created},'
            f'"model":"{s.model}","choices":[],{self._usage_json()}{extra}}}\n\n'
        ).encode()

    def _send(self, data: bytes) -> None:
        if self._stall_until and time.monotonic() < self._stall_until:
            self._held.append(data)
            return
        self.conn.chunk(data)

    def _flush_held(self) -> None:
        held, self._held = self._held, []
        for data in held:
            self.conn.chunk(data)

    def _release(self) -> None:
        self._stall_until = 0.0
        self._flush_held()
        if self.outcome == "finished":
            self.conn.end_chunked()
            self._resolve()

    def _resolve(self) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_result(None)

    def lost(self) -> None:
        if self.outcome == "running":
            self.outcome = "cancelled"
        self._resolve()

    # -- non-streaming ---------------------------------------------------------------------
    def _finish_json(self) -> None:
        s = self.spec
        text = "".join(self._text_parts)
        pieces = [WORDS[w] for w in (s.answer or ())[: self.output_tokens]]
        logprobs = None
        if s.logprobs:
            logprobs = answers.logprobs(pieces, s.engine, s.chat, s.token_ids_named)
        if s.chat:
            message, finish = paths.chat_message(
                pieces, s.tool, s.parsers, f"chatcmpl-tool-{s.rid}"
            )
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "logprobs": logprobs,
                "finish_reason": finish,
            }
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": "length",
                "stop_reason": None,
            }
        body = {
            "id": s.rid,
            "object": "chat.completion" if s.chat else "text_completion",
            "created": s.created,
            "model": s.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": s.prompt_tokens,
                "total_tokens": s.prompt_tokens + self.output_tokens,
                "completion_tokens": self.output_tokens,
            },
        }
        self.outcome = "finished"
        self.conn.respond_json(200, body)
        self._resolve()
