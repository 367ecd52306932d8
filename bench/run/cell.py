"""One decode cell: drain barrier, C looping workers, readiness gate, fixed window.

All durations here are client seconds: the sweep has already divided server-time
settings (window, 3 s hold) by the speed factor.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from bench.stream import metrics, tokens
from bench.stream.client import Client, Clock
from bench.stream.metrics import Snapshot
from bench.stream.records import RequestRecord

Sleep = Callable[[float], Awaitable[None]]
HOLD_SLACK_S = 1e-6
OnCellDone = Callable[["CellRun"], None]


@dataclass(slots=True)
class CellTiming:
    window_s: float
    hold_s: float
    ready_timeout_s: float
    drain_timeout_s: float
    sample_every_s: float


@dataclass
class CellRun:
    """What one cell produced; `figures.cell_figures` turns it into numbers."""

    concurrency: int
    t0_s: float
    records: list[RequestRecord] = field(default_factory=list)
    samples: list[Snapshot] = field(default_factory=list)
    client_active: list[tuple[float, int]] = field(default_factory=list)
    first: Snapshot | None = None
    last: Snapshot | None = None
    ready_after_s: float | None = None
    not_ready: str | None = None  # why the readiness gate never held
    w0_s: float | None = None
    w1_s: float | None = None
    drain_note: str | None = None
    # /metrics just before the C workers start, and once each has its first token: the
    # prefix-cache counters between them are those of the C requests launched together.
    before_launch: Snapshot | None = None
    launched: Snapshot | None = None
    launched_requests: int = 0  # requests started by the time of `launched`

    @property
    def error(self) -> str | None:
        """The first failed request's message (the cell's reason), None when none failed."""
        for r in self.records:
            if r.failure is not None:
                return r.failure.message
        return None

    def tokens_since(self, t_s: float) -> int:
        return sum(r.tokens_between(t_s, float("inf"))[0] for r in self.records)


class Server:
    """The sweep's view of the server: the client, the clock, whether /metrics works, how
    its engine's /metrics reads (bench.engines) and its text tokenizer, if any."""

    def __init__(
        self,
        client: Client,
        clock: Clock,
        sleep: Sleep,
        *,
        has_metrics: bool,
        parse: Callable[[str, float], Snapshot] = metrics.parse,
        tokenize: tokens.Tokenize | None = None,
    ) -> None:
        self.client = client
        self.clock = clock
        self.sleep = sleep
        self.has_metrics = has_metrics
        self.parse = parse
        self.tokenize = tokenize

    async def scrape(self) -> Snapshot | None:
        if not self.has_metrics:
            return None
        status, text = await self.client.get("/metrics")
        return self.parse(text, self.clock()) if status == 200 else None

    async def drain(self, timeout_s: float, poll_s: float) -> str | None:
        """Wait until nothing runs or waits; the reason if that never happens."""
        if not self.has_metrics:
            return None
        deadline = self.clock() + timeout_s
        snap: Snapshot | None = None
        while self.clock() < deadline:
            snap = await self.scrape()
            if snap is None or (
                (snap.get(metrics.RUNNING) or 0) == 0 and (snap.get(metrics.WAITING) or 0) == 0
            ):
                return None
            await self.sleep(poll_s)
        running = snap.get(metrics.RUNNING) if snap else None
        return f"server not drained after {timeout_s:.0f} s ({running} running)"


def launch_prefix_hit_rate(run: CellRun) -> float | None:
    """Prefix-cache hit rate of the first C requests, or None when the counters between
    the two snapshots may include other requests (a worker already on its second one)."""
    if run.launched is None or run.launched_requests != run.concurrency:
        return None
    hits = metrics.delta(run.before_launch, run.launched, metrics.PREFIX_HITS)
    queries = metrics.delta(run.before_launch, run.launched, metrics.PREFIX_QUERIES)
    if hits is None or queries is None or queries <= 0:
        return None
    return hits / queries


def gate_pause_s(now_s: float, poll_s: float, held_since_s: float | None, hold_s: float) -> float:
    """Seconds until the gate's next check: the poll interval, but never past the moment
    the hold completes, so the gate opens at that check rather than up to a poll later."""
    if held_since_s is None:
        return poll_s
    return max(0.0, min(poll_s, held_since_s + hold_s - now_s))


def token_poll_s(poll_s: float) -> float:
    """How often the gate looks at its own records while a worker waits for a first token."""
    return min(max(poll_s / 10, 0.002), 0.01)


async def wait_until(
    done: Callable[[], bool], clock: Clock, sleep: Sleep, limit_s: float, every_s: float
) -> None:
    """Return as soon as `done()` holds (checked every `every_s`), or after `limit_s`."""
    end_s = clock() + limit_s
    while not done():
        left_s = end_s - clock()
        if left_s <= 0:
            return
        await sleep(min(every_s, left_s))


async def run_cell(
    server: Server,
    path: str,
    body: dict[str, Any] | bytes,
    concurrency: int,
    timing: CellTiming,
    *,
    progress: OnCellDone | None = None,
    on_window: Callable[[bool], None] | None = None,
) -> CellRun:
    """Drain, start C looping workers, hold the readiness gate, measure the window."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()  # once per cell, not once per request
    poll_s = max(0.01, min(0.25, timing.hold_s / 6))
    drain_note = await server.drain(timing.drain_timeout_s, poll_s)
    before_launch = await server.scrape()
    run = CellRun(concurrency=concurrency, t0_s=server.clock(), drain_note=drain_note)
    run.before_launch = before_launch
    cell = _Cell(server, run, timing, poll_s, progress)
    tasks = [asyncio.create_task(cell.worker(i, path, body)) for i in range(concurrency)]
    try:
        await cell.gate()
        if not cell.failed.is_set():
            await cell.window(on_window)
        return run
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t


class _Cell:
    """The C looping workers of one cell, and the gate and window that watch them."""

    def __init__(
        self,
        server: Server,
        run: CellRun,
        timing: CellTiming,
        poll_s: float,
        progress: OnCellDone | None,
    ) -> None:
        self.server, self.run, self.timing, self.poll_s = server, run, timing, poll_s
        self.progress = progress
        self.current: list[RequestRecord | None] = [None] * run.concurrency
        self.had_token = [False] * run.concurrency
        self.failed = asyncio.Event()  # a request failed: the cell ends
        self.in_flight = 0

    async def worker(self, i: int, path: str, body: bytes) -> None:
        """One request after another until the cell ends or one of them fails."""
        clock = self.server.clock
        while True:
            record = RequestRecord(worker=i, start_s=clock())
            self.run.records.append(record)
            self.current[i] = record
            self.in_flight += 1
            try:
                await self.server.client.stream(path, body, record)
            finally:
                self.in_flight -= 1
            if record.first_token_s is not None:
                self.had_token[i] = True
            if record.failure is not None:
                self.failed.set()
                return

    def restarting(self) -> int:
        """Workers between two requests after the ramp: the previous request delivered
        tokens, the next one has none yet. Looping workers restart all the time in steady
        state; the server may not count such a request as running for a moment, and that
        dip must not reset the gate (with short outputs it would reset it forever)."""
        return sum(
            self.had_token[i] and r is not None and r.first_token_s is None
            for i, r in enumerate(self.current)
        )

    def workers_without_a_token(self) -> int:
        return sum(
            not (self.had_token[i] or (r is not None and r.first_token_s is not None))
            for i, r in enumerate(self.current)
        )

    async def gate(self) -> None:
        """Readiness gate: >= C running and none waiting on the server (our own in-flight
        count without /metrics), every worker has a token, all held for hold_s. Sets
        `ready_after_s`, or `not_ready` when the time-out comes first; returns early when
        a request fails."""
        run, timing, poll_s = self.run, self.timing, self.poll_s
        clock, sleep = self.server.clock, self.server.sleep
        deadline = run.t0_s + timing.ready_timeout_s
        held_since: float | None = None
        while not self.failed.is_set():
            now, server_ok, without, missing = await self._check()
            if without == 0:
                await self._launched()
            if server_ok and without == 0:
                held_since = now if held_since is None else held_since
                # Within a microsecond counts as held: the pause before this check was
                # held_since + hold_s - now, which rounding can leave a hair short (and a
                # virtual clock cannot advance by less than its resolution).
                if now - held_since >= timing.hold_s - HOLD_SLACK_S:
                    run.ready_after_s = now - run.t0_s
                    return
            else:
                held_since = None
            if self.progress is not None:
                self.progress(run)
            if now >= deadline:
                why = f"readiness gate not reached in {timing.ready_timeout_s:.0f} s ({missing})"
                run.not_ready = why
                return
            if without:
                # Look at our own records often (no request to the server) and check the
                # server again as soon as every worker has a token: the hold then starts
                # at the check right after the last first token, not up to a poll later.
                await wait_until(
                    lambda: self.workers_without_a_token() == 0 or self.failed.is_set(),
                    clock, sleep, poll_s, token_poll_s(poll_s),
                )  # fmt: skip
            else:
                await sleep(gate_pause_s(now, poll_s, held_since, timing.hold_s))

    async def _check(self) -> tuple[float, bool, int, str]:
        """One look: (when, the server side holds, workers without a token, what is missing)."""
        c = self.run.concurrency
        snap = await self.server.scrape()
        now = self.server.clock()
        if snap is not None:
            running = snap.get(metrics.RUNNING) or 0
            waiting = snap.get(metrics.WAITING) or 0
            server_ok = running + self.restarting() >= c and waiting == 0
            missing = f"server had {running:g} running, {waiting:g} waiting"
        else:
            server_ok = self.in_flight >= c
            missing = f"{self.in_flight} of {c} requests in flight"
        without = self.workers_without_a_token()
        if without:
            missing += f"; {without} of {c} workers without a token"
        return now, server_ok, without, missing

    async def _launched(self) -> None:
        """/metrics once every worker has its first token (the launch's prefix-cache hits)."""
        run = self.run
        if run.launched is None and run.before_launch is not None:
            run.launched_requests = len(run.records)
            run.launched = await self.server.scrape()

    async def window(self, on_window: Callable[[bool], None] | None) -> None:
        """The fixed window, sampling /metrics (or our in-flight count) all along."""
        run, timing = self.run, self.timing
        clock, sleep, scrape = self.server.clock, self.server.sleep, self.server.scrape
        run.w0_s = clock()
        if on_window is not None:  # GPU telemetry covers exactly the window
            on_window(True)
        run.first = await scrape()
        end_s = run.w0_s + timing.window_s
        next_sample_s = run.w0_s
        while not self.failed.is_set():
            now = clock()
            if now >= end_s:
                break
            if now >= next_sample_s:
                run.client_active.append((now, self.in_flight))
                snap = await scrape()
                if snap is not None:
                    run.samples.append(snap)
                next_sample_s += timing.sample_every_s
                if self.progress is not None:
                    self.progress(run)
            await sleep(max(0.0, min(next_sample_s, end_s) - clock()))
        run.w1_s = min(clock(), end_s)
        if on_window is not None:
            on_window(False)
        run.client_active.append((run.w1_s, self.in_flight))
        run.last = await scrape()
