"""The twin as a server: routes, API-key check, and the real-time loop driving the engine.

The loop keeps an ideal timeline: each step is due `duration / speed` after the previous
one was due, so time spent writing chunks is absorbed instead of accumulating; how late
each step actually completes is the step lag reported on /metrics.
"""

from __future__ import annotations

import asyncio
import heapq
import hmac
import itertools
import json
import os
import sys
import time
import uuid
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from bench.twin import flavors, metrics, paths, requests
from bench.twin.answers import DEFAULT_DTYPE, Answerer
from bench.twin.engine import Request, StepResult, TwinScheduler
from bench.twin.faults import FaultDice, Faults, echoed
from bench.twin.frontend import Frontend
from bench.twin.http import HttpRequest, TwinConnection
from bench.twin.paths import Paths
from bench.twin.profile import Profile
from bench.twin.requests import BadRequest
from bench.twin.streams import WORDS, Stream, StreamSpec
from bench.twin.tokenizer import Tokenizer

if TYPE_CHECKING:  # imported by `bench twin serve` only with --otlp-traces-endpoint
    from bench.twin.tracing import TwinTracer

RESYNC_S = 0.25  # further behind than this, the loop stops trying to catch up
SPIN_S = 0.003
MAX_HOLD_STEPS = 3
MERGE_MIN_STREAMS = 16  # with fewer streams, writing is never what makes the loop late


@dataclass(frozen=True)
class TwinConfig:
    profile: Profile
    speed: float = 1.0
    seed: int = 0  # of noise, faults and answers
    api_key: str | None = None
    faults: Faults = field(default_factory=Faults)
    ground_truth: IO[str] | None = None
    engine: flavors.Flavor = "vllm"  # which engine's endpoints and streams (bench.twin.flavors)
    # False: continuous_usage_stats and timings_per_token are ignored (a server that counts
    # only at the end, such as an SGLang older than continuous usage)
    per_chunk_counts: bool = True
    dtype: str = DEFAULT_DTYPE  # another answers differently (bench.twin.answers)
    paths: Paths = field(default_factory=Paths)  # the launch's reasoning and tool-call parsers
    # --otlp-traces-endpoint: a span per completed request (bench.twin.tracing); None: none
    tracer: TwinTracer | None = None


class Twin:
    def __init__(self, config: TwinConfig) -> None:
        self.config = config
        self.profile = config.profile
        self.engine = TwinScheduler(config.profile, config.seed)
        self.frontend: Frontend[Request] = Frontend(config.profile)
        self._frontend_timer: asyncio.TimerHandle | None = None
        # Requests past the frontend, by the loop time they reach the engine (`_admit_due`).
        self._ready: list[tuple[float, int, Request]] = []
        self._ready_seq = itertools.count()
        self._ready_timer: asyncio.TimerHandle | None = None
        self.tokenizer = Tokenizer()
        self.lag = metrics.StepLag()
        self.dice = FaultDice(config.faults, config.seed)
        self.answerer = Answerer(config.seed, config.dtype)
        self.streams: dict[Request, Stream] = {}
        # Cancelled streams whose requests still run until the engine takes the abort.
        self._lingering: dict[Request, Stream] = {}
        self.requests_total = 0
        self._wake = asyncio.Event()
        self._ids = itertools.count()
        self._loop_task: asyncio.Task[None] | None = None
        self._dirty: dict[Request, Stream] = {}
        self._write_cost_s = 20e-6

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
        """Step the engine on the profile's timeline and write what each step emitted.

        The next step is planned as soon as one ends (as vLLM schedules), which tells how
        long writing may take. When writing every stream would make the next step late
        (an overloaded machine: each loopback send costs the kernel's receive path too),
        the chunks are held and merged into the next write, up to MAX_HOLD_STEPS, the way
        vLLM's output collector merges deltas for a slow consumer; the engine's timeline,
        and so every token's due time, stays put."""
        loop = asyncio.get_running_loop()
        speed = self.config.speed
        due = loop.time()
        step_s = 0.0
        held = 0
        woke = loop.time()
        result: StepResult | None = None
        while True:
            if result is None:
                self._flush()
                held = 0
                if self.engine.idle:
                    self._wake.clear()
                    await self._wake.wait()
                due = woke = loop.time()
                self._admit_due(due)
                result = self._step()
                step_s = result.duration_s / speed
                due += step_s
            self.lag.busy_s += loop.time() - woke
            await self._sleep_until(loop, due)
            now = woke = loop.time()
            self.lag.record(max(0.0, now - due), step_s)
            self._collect(result)
            if now - due > RESYNC_S:
                due = now
            # The step that starts at `due` takes every request that reached the engine by
            # then, even one whose timer this process ran late (a loaded machine).
            self._admit_due(due)
            result = None if self.engine.idle else self._step()
            if result is None:
                continue
            step_s = result.duration_s / speed
            due += step_s
            cost_s, spare_s = self._flush_cost_s(), due - loop.time()
            if (
                step_s == 0
                or held >= MAX_HOLD_STEPS
                or len(self._dirty) < MERGE_MIN_STREAMS
                or cost_s < max(0.8 * spare_s, 0.1 * step_s)
            ):
                self._flush()
                held = 0
            else:
                held += 1
                self.lag.deferred += 1
                self._flush(first_only=True)  # a few streams: time to first token unheld

    def _step(self) -> StepResult:
        """Plan the next step; aborts the engine took at its start end their lingering.
        With tracing, the requests it admits are scheduled now (the step starts)."""
        result = self.engine.step()
        for req in result.aborted:
            self._release(req)
        if self.config.tracer is not None and result.admitted:
            now = time.time()
            for req in result.admitted:
                stream = self.streams.get(req)
                if stream is not None and not stream.scheduled:  # a preemption: kept
                    stream.scheduled = now
        return result

    def _collect(self, result: StepResult) -> None:
        dirty = self._dirty
        for em in result.emissions:
            stream = self.streams.get(em.request)
            if stream is None:
                if em.finished:  # a cancelled request ran to its end before the abort
                    self._release(em.request)
                continue
            stream.pending += em.tokens
            stream.pending_done = stream.pending_done or em.finished
            dirty[em.request] = stream

    def _flush_cost_s(self) -> float:
        return len(self._dirty) * self._write_cost_s

    def _flush(self, *, first_only: bool = False) -> None:
        """Write every stream's pending chunk (FIRST_ONLY: only first outputs, the rest stay
        held). First outputs are written first: with hundreds of streams a flush takes
        milliseconds, and a new stream's first token would otherwise wait behind them
        (vLLM's time to first token ends when its first output is sent, not a flush later)."""
        if not self._dirty:
            return
        started = time.perf_counter()
        wall = time.time
        firsts = {r: s for r, s in self._dirty.items() if not s.output_tokens}
        if first_only:
            if not firsts:
                return
            for req in firsts:
                del self._dirty[req]
            dirty = firsts
        else:
            dirty = {**firsts, **self._dirty}  # first outputs first, then the rest in order
            self._dirty = {}
        ended: list[tuple[Request, Stream]] = []
        for req, stream in dirty.items():
            if self.streams.get(req) is not stream:
                continue
            tokens, stream.pending = stream.pending, 0
            # Each stream's own write time (a flush of 128 streams takes milliseconds).
            stream.emit(tokens, stream.pending_done, wall())
            if stream.outcome == "cut":
                self.engine.abort(req)
            if stream.pending_done or stream.outcome != "running":
                ended.append((req, stream))
        # Closing logs the ground truth; done after every stream got its chunk, so that
        # the last streams' final tokens are not written late behind the log lines.
        for req, stream in ended:
            self._close(req, stream)
        per_write = (time.perf_counter() - started) / len(dirty)
        self._write_cost_s += 0.2 * (per_write - self._write_cost_s)

    @staticmethod
    async def _sleep_until(loop: asyncio.AbstractEventLoop, due: float) -> None:
        """Sleep until `due` to within ~0.1 ms: the selector's timeout is rounded to whole
        milliseconds, so the last stretch is spent yielding to the loop (I/O keeps flowing)."""
        delay = due - loop.time()
        if delay > SPIN_S:
            await asyncio.sleep(delay - SPIN_S)
        await asyncio.sleep(0)  # even a free step lets I/O in
        # A deliberate spin: an Event would wake no sooner than the selector's millisecond.
        while loop.time() < due:  # noqa: ASYNC110
            await asyncio.sleep(0)

    def _close(self, req: Request, stream: Stream) -> None:
        if self.streams.pop(req, None) is None:
            return
        self._log(stream)
        tracer = self.config.tracer
        if tracer is not None and stream.outcome == "finished":
            tracer.finished(stream, time.time())

    def _linger(self, req: Request, stream: Stream) -> None:
        """A client went away: its request keeps running (and holding its KV blocks) until
        the engine takes the abort, `abort_delay_s` of server time later and then at the
        next step boundary, as in vLLM, where the API server notices the disconnect and
        the engine core reads the abort between steps."""
        if self.streams.pop(req, None) is None:
            return
        if req.finished:
            self._log(stream)
            return
        self._lingering[req] = stream
        delay_s = self.profile.abort_delay_s / self.config.speed
        asyncio.get_running_loop().call_later(delay_s, self._abort_lingering, req)

    def _abort_lingering(self, req: Request) -> None:
        if req.running or req in self.engine.waiting:
            self.engine.abort_soon(req)
            self._wake.set()
        else:  # still in the frontend (or already finished): nothing to wait for
            self.engine.abort(req)
            self._release(req)

    def _release(self, req: Request) -> None:
        stream = self._lingering.pop(req, None)
        if stream is not None:
            self._log(stream, released=time.time())

    def _log(self, stream: Stream, released: float | None = None) -> None:
        gt = self.config.ground_truth
        if gt is not None:
            record: dict[str, Any] = {
                "request_id": stream.spec.rid,
                "arrival": round(stream.arrival, 6),
                "outcome": stream.outcome,
                "prompt_tokens": stream.spec.prompt_tokens,
                "output_tokens": stream.output_tokens,
                "chunks": [[round(t, 6), n] for t, n in stream.chunk_log],
            }
            if released is not None:  # when the engine dropped a cancelled request
                record["released"] = round(released, 6)
            gt.write(json.dumps(record) + "\n")
            gt.flush()

    def _pump_frontend(self) -> None:
        """Start the frontend's due requests (the server holds every open stream) and wake
        up again when the next one's turn comes."""
        loop = asyncio.get_running_loop()
        speed = self.config.speed
        for ready_s, req in self.frontend.start_due(loop.time() * speed, len(self.streams)):
            heapq.heappush(self._ready, (ready_s / speed, next(self._ready_seq), req))
        self._arm_ready_timer()
        if self._frontend_timer is not None:
            self._frontend_timer.cancel()
            self._frontend_timer = None
        nxt = self.frontend.next_start_s()
        if nxt is not None:
            self._frontend_timer = loop.call_at(nxt / speed, self._pump_frontend)

    def _arm_ready_timer(self) -> None:
        if self._ready_timer is not None:
            self._ready_timer.cancel()
            self._ready_timer = None
        if self._ready:
            loop = asyncio.get_running_loop()
            self._ready_timer = loop.call_at(self._ready[0][0], self._admit_now)

    def _admit_now(self) -> None:
        self._ready_timer = None
        self._admit_due(asyncio.get_running_loop().time())

    def _admit_due(self, upto: float) -> None:
        """Hand the engine every request due to reach it at or before loop time `upto`.

        Its timer usually does so on time; when this process ran it late (the loop busy
        writing streams on a loaded machine), the step planned at the boundary it was due
        before still takes it, as vLLM's scheduler would, instead of one step later."""
        ready = self._ready
        taken = False
        while ready and ready[0][0] <= upto:
            self._enqueue(heapq.heappop(ready)[2])
            taken = True
        if taken or self._ready_timer is None:
            self._arm_ready_timer()

    def _enqueue(self, req: Request) -> None:
        if req.finished:
            return
        if self.config.tracer is not None and (stream := self.streams.get(req)) is not None:
            stream.queued = time.time()
        self.engine.add(req)
        self._wake.set()

    # -- HTTP ------------------------------------------------------------------------------
    async def handle(self, http: HttpRequest, conn: TwinConnection) -> None:
        try:
            await self._route(http, conn)
        except BadRequest as exc:
            conn.respond_json(exc.status, exc.body())

    async def _route(self, http: HttpRequest, conn: TwinConnection) -> None:
        m, path = http.method, http.path
        if path.startswith("/v1/"):
            self._check_key(http)
        flavor = self.config.engine
        if m == "GET" and path in ("/health", "/ping"):
            body, ctype = flavors.health(flavor)
            conn.respond(200, body, content_type=ctype)
        elif m == "GET" and path in flavors.GET_ROUTES[flavor]:
            conn.respond_json(
                200, flavors.get_json(flavor, path, self.profile, self._engine_version())
            )
        elif m == "GET" and path == "/v1/models":
            conn.respond_json(
                200, {"object": "list", "data": [flavors.model_card(flavor, self.profile)]}
            )
        elif m == "GET" and path == "/version":
            conn.respond_json(200, self._version())
        elif m == "GET" and path == "/metrics":
            self._metrics(conn)
        elif m == "POST" and path == "/tokenize":
            self._tokenize_route(http, conn)
        elif m == "POST" and path == "/reset_prefix_cache":
            self.engine.reset_prefix_cache()
            conn.respond(200, b"", content_type="text/plain")
        elif m == "POST" and path in ("/v1/chat/completions", "/v1/completions"):
            await self._complete(http, conn, chat=path == "/v1/chat/completions")
        elif path in ROUTES or path in flavors.GET_ROUTES[flavor]:
            raise BadRequest(f"Method {m} not allowed on {path}", status=405)
        else:
            raise BadRequest("Not Found", status=404)

    def _metrics(self, conn: TwinConnection) -> None:
        if self.config.faults.no_metrics:
            raise BadRequest("Not Found", status=404)
        text = metrics.render(
            self.engine, self.lag, self.config.speed, self.requests_total, self.config.engine
        )
        conn.respond(200, text.encode(), content_type="text/plain; version=0.0.4")

    def _tokenize_route(self, http: HttpRequest, conn: TwinConnection) -> None:
        obj = requests.parse_json(http.body)
        if self.config.engine == "llamacpp":
            conn.respond_json(200, flavors.tokenize_llamacpp(obj, self.tokenizer))
        else:
            conn.respond_json(200, self._tokenize(obj))

    def _check_key(self, http: HttpRequest) -> None:
        key = self.config.api_key
        if key is None:
            return
        given = http.headers.get("authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {key}".encode()):
            raise BadRequest("Unauthorized: a valid API key is required", status=401)

    def _engine_version(self) -> str:
        return self.profile.vllm_version

    def _version(self) -> dict[str, Any]:
        c = self.config
        return {
            "version": self._engine_version(),
            "twin": {
                "profile": self.profile.name,
                "speed": c.speed,
                "seed": c.seed,
                "dtype": c.dtype,
            },
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

    async def _complete(self, http: HttpRequest, conn: TwinConnection, chat: bool) -> None:
        # The frontend delay counts from the request's first byte, so receiving, parsing and
        # tokenizing it (real CPU time, not divided by the speed factor) is absorbed
        # instead of added to the profile's latencies.
        loop = asyncio.get_running_loop()
        first_byte = http.started_at or loop.time()
        arrival_s = first_byte * self.config.speed
        # The ground truth's arrival is the first byte too (wall clock), not after parsing.
        arrival_wall = time.time() - (loop.time() - first_byte)
        obj = requests.parse_json(http.body)
        p = self.profile
        spec = requests.completion(obj, self.tokenizer, chat, p.model, p.max_model_len)
        self.requests_total += 1
        fate = self.dice.roll(spec.max_tokens)
        if fate.error:
            status = self.config.faults.error_status
            if self.config.faults.echo_auth:
                said = echoed(http.headers.get("authorization", ""))
                print(f"twin: refusing a request from {said}", file=sys.stderr, flush=True)
                raise BadRequest(f"injected fault: HTTP {status} for {said}", status=status)
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
                spec.continuous_usage and self.config.per_chunk_counts,
                len(spec.prompt_ids),
                spec.max_tokens,
                engine=self.config.engine,
                timings=spec.timings and self.config.per_chunk_counts,
                answer=None
                if spec.stream
                else self.answerer.words(spec.prompt_ids, spec.max_tokens, len(WORDS)),
                logprobs=spec.logprobs,
                token_ids_named=spec.token_ids_named,
                tool=paths.offered_tool(obj) if chat and not spec.stream else None,
                parsers=self.config.paths,
            ),
            conn,
            fate,
            stall_s=self.config.faults.stall_s,
            log_chunks=self.config.ground_truth is not None,
        )
        stream.arrival = arrival_wall
        if self.config.tracer is not None:
            stream.traceparent = http.headers.get("traceparent")
        stream.done = loop.create_future()
        self.streams[req] = stream

        def lost() -> None:
            stream.lost()
            self._linger(req, stream)

        conn.on_lost.append(lost)
        stream.begin()
        self.frontend.submit(arrival_s, len(spec.prompt_ids), req)
        self._pump_frontend()
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
