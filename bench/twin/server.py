"""The twin as a server: routes, API-key check, and the real-time loop driving the engine.

The loop keeps an ideal timeline: each step is due `duration / speed` after the previous
one was due, so time spent writing chunks is absorbed instead of accumulating; how late
each step actually completes is the step lag reported on /metrics.
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import IO, Any

from bench.twin import metrics, requests
from bench.twin.engine import Engine, Request, StepResult
from bench.twin.faults import FaultDice, Faults
from bench.twin.http import Connection, HttpRequest
from bench.twin.profile import Profile
from bench.twin.requests import BadRequest
from bench.twin.streams import Stream, StreamSpec
from bench.twin.tokenizer import Tokenizer

RESYNC_S = 0.25  # further behind than this, the loop stops trying to catch up


@dataclass(frozen=True)
class TwinConfig:
    profile: Profile
    speed: float = 1.0
    seed: int = 0
    api_key: str | None = None
    faults: Faults = field(default_factory=Faults)
    ground_truth: IO[str] | None = None


class Twin:
    def __init__(self, config: TwinConfig) -> None:
        self.config = config
        self.profile = config.profile
        self.engine = Engine(config.profile, config.seed)
        self.tokenizer = Tokenizer()
        self.lag = metrics.StepLag()
        self.dice = FaultDice(config.faults, config.seed)
        self.streams: dict[Request, Stream] = {}
        self.requests_total = 0
        self._wake = asyncio.Event()
        self._ids = itertools.count()
        self._loop_task: asyncio.Task[None] | None = None

    # -- engine loop -----------------------------------------------------------------------
    def start(self) -> None:
        self._loop_task = asyncio.get_running_loop().create_task(self._run())
        crash = self.config.faults.crash_after_s
        if crash is not None:
            asyncio.get_running_loop().call_later(crash, self._crash)

    def _crash(self) -> None:
        print("twin: crashing as asked by --fault-crash-after", file=sys.stderr, flush=True)
        os._exit(70)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        speed = self.config.speed
        due = loop.time()
        while True:
            if self.engine.idle:
                self._wake.clear()
                await self._wake.wait()
                due = loop.time()
            now = loop.time()
            if now - due > RESYNC_S:
                due = now
            result = self.engine.step()
            step_s = result.duration_s / speed
            due += step_s
            delay = due - loop.time()
            await asyncio.sleep(delay if delay > 0 else 0)
            now = loop.time()
            self.lag.record(max(0.0, now - due), step_s)
            self._deliver(result)

    def _deliver(self, result: StepResult) -> None:
        now = time.time()
        for em in result.emissions:
            stream = self.streams.get(em.request)
            if stream is None:
                continue
            stream.emit(em.tokens, em.finished, now)
            if stream.outcome == "cut":
                self.engine.abort(em.request)
            if em.finished or stream.outcome != "running":
                self._close(em.request, stream)

    def _close(self, req: Request, stream: Stream) -> None:
        if self.streams.pop(req, None) is None:
            return
        gt = self.config.ground_truth
        if gt is not None:
            record = {
                "request_id": stream.spec.rid,
                "outcome": stream.outcome,
                "prompt_tokens": stream.spec.prompt_tokens,
                "output_tokens": stream.output_tokens,
                "chunks": [[round(t, 6), n] for t, n in stream.chunk_log],
            }
            gt.write(json.dumps(record) + "\n")
            gt.flush()

    def _enqueue(self, req: Request) -> None:
        if req.finished:
            return
        self.engine.add(req)
        self._wake.set()

    # -- HTTP ------------------------------------------------------------------------------
    async def handle(self, http: HttpRequest, conn: Connection) -> None:
        try:
            await self._route(http, conn)
        except BadRequest as exc:
            conn.respond_json(exc.status, exc.body())

    async def _route(self, http: HttpRequest, conn: Connection) -> None:
        m, path = http.method, http.path
        if path.startswith("/v1/"):
            self._check_key(http)
        if m == "GET" and path in ("/health", "/ping"):
            conn.respond(200, b"", content_type="text/plain")
        elif m == "GET" and path == "/v1/models":
            conn.respond_json(200, self._models())
        elif m == "GET" and path == "/version":
            conn.respond_json(200, self._version())
        elif m == "GET" and path == "/metrics":
            if self.config.faults.no_metrics:
                raise BadRequest("Not Found", status=404)
            text = metrics.render(self.engine, self.lag, self.config.speed, self.requests_total)
            conn.respond(200, text.encode(), content_type="text/plain; version=0.0.4")
        elif m == "POST" and path == "/tokenize":
            conn.respond_json(200, self._tokenize(requests.parse_json(http.body)))
        elif m == "POST" and path == "/reset_prefix_cache":
            self.engine.reset_prefix_cache()
            conn.respond(200, b"", content_type="text/plain")
        elif m == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            await self._complete(http, conn, chat=path == "/v1/chat/completions")
        elif path in ROUTES:
            raise BadRequest(f"Method {m} not allowed on {path}", status=405)
        else:
            raise BadRequest("Not Found", status=404)

    def _check_key(self, http: HttpRequest) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = http.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            raise BadRequest("Unauthorized: a valid API key is required", status=401)

    def _models(self) -> dict[str, Any]:
        p = self.profile
        card = {
            "id": p.model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "vllm",
            "root": p.model,
            "parent": None,
            "max_model_len": p.max_model_len,
            "permission": [],
        }
        return {"object": "list", "data": [card]}

    def _version(self) -> dict[str, Any]:
        c = self.config
        return {
            "version": self.profile.vllm_version,
            "twin": {"profile": self.profile.name, "speed": c.speed, "seed": c.seed},
        }

    def _tokenize(self, obj: dict[str, Any]) -> dict[str, Any]:
        requests.check_model(obj, self.profile.model)
        ids = requests.prompt_ids(obj, self.tokenizer, chat="messages" in obj)
        return {
            "count": len(ids),
            "max_model_len": self.profile.max_model_len,
            "tokens": ids,
            "token_strs": None,
        }

    async def _complete(self, http: HttpRequest, conn: Connection, chat: bool) -> None:
        obj = requests.parse_json(http.body)
        p = self.profile
        spec = requests.completion(obj, self.tokenizer, chat, p.model, p.max_model_len)
        self.requests_total += 1
        fate = self.dice.roll(spec.max_tokens)
        if fate.error:
            status = self.config.faults.error_status
            raise BadRequest(f"injected fault: HTTP {status}", status=status)
        prefix = "chatcmpl" if chat else "cmpl"
        rid = f"{prefix}-{uuid.uuid4().hex[:24]}"
        req = self.engine.make_request(spec.prompt_ids, spec.max_tokens, rid)
        stream = Stream(
            StreamSpec(
                rid,
                int(time.time()),
                p.model,
                chat,
                spec.stream,
                spec.include_usage,
                spec.continuous_usage,
                len(spec.prompt_ids),
                spec.max_tokens,
            ),
            conn,
            fate,
            stall_s=self.config.faults.stall_s,
        )
        loop = asyncio.get_running_loop()
        stream.done = loop.create_future()
        self.streams[req] = stream

        def lost() -> None:
            stream.lost()
            self.engine.abort(req)
            self._close(req, stream)

        conn.on_lost.append(lost)
        stream.begin()
        loop.call_later(p.request_overhead_s / self.config.speed, self._enqueue, req)
        await stream.done


ROUTES = (
    "/health",
    "/ping",
    "/v1/models",
    "/version",
    "/metrics",
    "/tokenize",
    "/reset_prefix_cache",
    "/v1/chat/completions",
    "/v1/completions",
)
