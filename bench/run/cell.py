"""One decode cell: drain barrier, C looping workers, readiness gate, fixed window.

All durations here are client seconds: the sweep has already divided server-time
settings (window, 3 s hold) by the speed factor.

Every wait of a cell is bounded, by construction (docs/faults.md, "Bounds"):

    one /metrics answer        SCRAPE_BOUND_S; past it the cell ends `invalid`
                               ("no /metrics answer within 30 s (during the readiness gate)")
    the whole control loop     CellTiming.budget_s: drain time-out + gate time-out + window
                               + CELL_SLACK_S; past it the cell ends `invalid`, naming what
                               it was waiting for
    the workers' end           WORKER_STOP_S after they are told to stop and cancelled; a
                               worker still running then makes the cell `invalid` too

A worker stops on its own at its next request once the cell is over (`_CellWorkers.stopping`),
whatever became of its cancellation: on Python 3.11 `asyncio.wait_for` swallows a
cancellation that arrives as the awaited future completes (CPython gh-86296), and a
looping worker that lost it ran on for 24 minutes against llama.cpp's server while
`run_cell` waited for it.
"""

from __future__ import annotations

import asyncio
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
# Client seconds. One /metrics answer inside a cell (a busy vLLM answers in well under a
# second; the client's own bound for a small call, 2 x 30 s, would come later).
SCRAPE_BOUND_S = 30.0
# Beyond drain, gate and window: the scrapes around them (before the launch, the launch's,
# the window's first and last, one in flight at each phase's end), each within
# SCRAPE_BOUND_S, and the time-outs' own polling.
CELL_SLACK_S = 6 * SCRAPE_BOUND_S + 10.0
# After the cell is over, its workers are cancelled and must be gone within this.
WORKER_STOP_S = 5.0


class CellStopped(Exception):
    """The cell's control loop cannot go on (a wait past its bound); the reason is the
    cell's."""


@dataclass(slots=True)
class CellTiming:
    window_s: float
    hold_s: float
    ready_timeout_s: float
    drain_timeout_s: float
    sample_every_s: float

    @property
    def budget_s(self) -> float:
        """The wall-clock bound of the cell's control loop, in client seconds."""
        return self.drain_timeout_s + self.ready_timeout_s + self.window_s + CELL_SLACK_S


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
    # Why the cell was ended before its window closed (a wait past its bound), if it was.
    stopped: str | None = None

    @property
    def error(self) -> str | None:
        """The first failed request's message (the cell's reason), None when none failed."""
        for r in self.records:
            if r.failure is not None:
                return r.failure.message
        return None

    def tokens_since(self, t_s: float) -> int:
        return sum(r.tokens_between(t_s, float("inf"))[0] for r in self.records)


class ServerView:
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
        # Below the client's own bound for a small call (twice its read time-out), so that a
        # silent /metrics ends the cell rather than the run.
        self.scrape_bound_s = min(SCRAPE_BOUND_S, client.read_timeout_s)

    async def scrape(self) -> Snapshot | None:
        if not self.has_metrics:
            return None
        status, text = await self.client.get("/metrics")
        return self.parse(text, self.clock()) if status == 200 else None

    async def scrape_within(self, during: str) -> Snapshot | None:
        """`scrape`, ended with CellStopped when no answer comes within `scrape_bound_s`
        (SCRAPE_BOUND_S, or the client's read time-out when that is shorter)."""
        try:
            async with asyncio.timeout(self.scrape_bound_s):
                return await self.scrape()
        except TimeoutError:
            raise CellStopped(
                f"no /metrics answer within {self.scrape_bound_s:g} s (during {during})"
            ) from None

    async def drain(self, timeout_s: float, poll_s: float) -> str | None:
        """Wait until nothing runs or waits; the reason if that never happens."""
        if not self.has_metrics:
            return None
        deadline = self.clock() + timeout_s
        snap: Snapshot | None = None
        while self.clock() < deadline:
            snap = await self.scrape_within("the drain barrier")
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
    server: ServerView,
    path: str,
    body: dict[str, Any] | bytes,
    concurrency: int,
    timing: CellTiming,
    *,
    progress: OnCellDone | None = None,
    on_window: Callable[[bool], None] | None = None,
) -> CellRun:
    """Drain, start C looping workers, hold the readiness gate, measure the window.

    Ends within `timing.budget_s` + WORKER_STOP_S whatever the server does: a wait past its
    bound ends the cell with `stopped` set (its reason), and the sweep goes on."""
    if not isinstance(body, bytes):
        body = json.dumps(body).encode()  # once per cell, not once per request
    poll_s = max(0.01, min(0.25, timing.hold_s / 6))
    run = CellRun(concurrency=concurrency, t0_s=server.clock())
    cell = _CellWorkers(server, run, timing, poll_s, progress)
    tasks: list[asyncio.Task[None]] = []
    try:
        async with asyncio.timeout(timing.budget_s):
            run.drain_note = await server.drain(timing.drain_timeout_s, poll_s)
            cell.waiting_for = "/metrics before the launch"
            run.before_launch = await server.scrape_within("the launch")
            run.t0_s = server.clock()
            tasks += [asyncio.create_task(cell.worker(i, path, body)) for i in range(concurrency)]
            await cell.gate()
            if not cell.failed.is_set():
                await cell.window(on_window)
    except CellStopped as exc:
        run.stopped = str(exc)
    except TimeoutError:
        run.stopped = (
            f"the cell did not finish within its bound of {timing.budget_s:.0f} s "
            f"(drain + gate + window + {CELL_SLACK_S:.0f} s; waiting for {cell.waiting_for})"
        )
    finally:
        await _stop_workers(cell, tasks)
    return run


async def _stop_workers(cell: _CellWorkers, tasks: list[asyncio.Task[None]]) -> None:
    """Tell the workers the cell is over, cancel them, and wait at most WORKER_STOP_S.

    `stopping` ends a worker at its next request even if its cancellation was lost
    (see the module docstring); one still running after the wait is named on the cell and
    left cancelled (its stream is bounded by the client's read time-out)."""
    cell.stopping = True
    for t in tasks:
        t.cancel()
    if not tasks:
        return
    _, pending = await asyncio.wait(tasks, timeout=WORKER_STOP_S)
    if pending:
        why = f"{len(pending)} worker(s) still running {WORKER_STOP_S:g} s after the cell ended"
        cell.run.stopped = f"{cell.run.stopped}; {why}" if cell.run.stopped else why
    for t in tasks:
        if t.done() and not t.cancelled():
            t.exception()  # retrieved: a worker's own error is on its record already


class _CellWorkers:
    """The C looping workers of one cell, and the gate and window that watch them."""

    def __init__(
        self,
        server: ServerView,
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
        self.stopping = False  # the cell is over: no worker starts another request
        self.waiting_for = "the drain barrier"  # said when the cell's bound runs out

    async def worker(self, i: int, path: str, body: bytes) -> None:
        """One request after another until the cell ends or one of them fails."""
        clock = self.server.clock
        while not self.stopping:
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
            self.waiting_for = "the readiness gate"
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
        snap = await self.server.scrape_within("the readiness gate")
        now = self.server.clock()
        if snap is not None and snap.get(metrics.RUNNING) is not None:
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
            run.launched = await self.server.scrape_within("the readiness gate")

    async def window(self, on_window: Callable[[bool], None] | None) -> None:
        """The fixed window, sampling /metrics (or our in-flight count) all along."""
        run, timing = self.run, self.timing
        clock, sleep = self.server.clock, self.server.sleep

        async def scrape() -> Snapshot | None:
            return await self.server.scrape_within("the window")

        self.waiting_for = "the window"
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
