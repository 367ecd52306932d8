"""A point's requests sent as scheduled, each one stamped, within one bound.

Open loop (`run_open`): request i is due at t0 + at_s / speed (client seconds); a dispatcher
sleeps until each due time and starts it then, whatever the server is doing (an open loop:
a slow server gets a queue, not fewer requests). With `cap` > 0 a request that finds `cap`
in flight waits for one to end (vLLM's --max-concurrency); the wait is recorded apart from
the client's own lateness (dispatched - due). Closed count (`run_closed`): C streams take
the next prompt as soon as their previous request ends, until every prompt has been sent.

The bound: a point ends `bound_s` client seconds after its last due send (the run's request
time-out by default); requests still running then are cancelled and counted unfinished, and
their workers must be gone within WORKER_STOP_S. Each request also has the client's own
read time-out (bench.stream.client). No wait here is unbounded.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from bench.stream.client import Client, Clock
from bench.stream.records import RequestRecord
from bench.stream.waker import MONOTONIC_CLOCKS, Waker

WORKER_STOP_S = 5.0
MAX_WAKES = 8
# Without a timerfd (bench.stream.waker: not Linux, or a clock of the caller's own), the last
# stretch before a due time is spent yielding: the loop's millisecond timers wake up to 1 ms
# after the time asked for, so asking 1.1 ms early is never late on their account. Each turn
# costs CPU (an epoll round): 1.1 ms of it made up about 5 % of a core at 100 requests/s, a
# fifth of the client's CPU (tools/perf's open-loop part); the timerfd wakes once instead.
SPIN_S = 0.0011
SPIN_TURNS = 100_000
LEAD_S = 0.02  # client seconds between planning the point and its first due send


@dataclass
class PointRun:
    """What one point produced: `bench.workload.figures.point_result` reads it."""

    due_s: list[float]  # client clock; nan for closed-count
    t0_s: float
    records: list[RequestRecord] = field(default_factory=list)  # in schedule order
    dispatched_s: list[float] = field(default_factory=list)  # nan: never dispatched
    held_s: list[float] = field(default_factory=list)  # waiting for the cap
    unfinished: int = 0
    stopped: str | None = None  # why the point ended before every request did


async def run_open(
    client: Client,
    path: str,
    bodies: Sequence[bytes],
    at_s: Sequence[float],
    *,
    speed: float,
    cap: int,
    clock: Clock,
    bound_s: float,
) -> PointRun:
    """Send bodies[i] at at_s[i] server seconds after the start (module docstring)."""
    n = len(bodies)
    t0 = clock() + LEAD_S
    due = [t0 + (0.0 if math.isinf(a) else a) / speed for a in at_s]
    run = PointRun(due_s=due, t0_s=t0)
    run.records = [RequestRecord(worker=i, start_s=math.nan) for i in range(n)]
    run.dispatched_s = [math.nan] * n
    run.held_s = [0.0] * n
    gate = asyncio.Semaphore(cap) if cap > 0 else None

    async def one(i: int) -> None:
        record = run.records[i]
        if gate is None:
            record.start_s = clock()
            await client.stream(path, bodies[i], record)
            return
        async with gate:
            record.start_s = clock()
            run.held_s[i] = record.start_s - run.dispatched_s[i]
            await client.stream(path, bodies[i], record)

    tasks: list[asyncio.Task[None]] = []
    waker = Waker.open() if clock in MONOTONIC_CLOCKS else None

    async def dispatch() -> None:
        for i in range(n):
            await _until(due[i], clock, waker)
            run.dispatched_s[i] = clock()
            tasks.append(asyncio.create_task(one(i)))

    dispatcher = asyncio.create_task(dispatch())
    deadline = (due[-1] if due else t0) + bound_s
    try:
        await asyncio.wait({dispatcher}, timeout=max(deadline - clock(), 0.0))
        if not dispatcher.done():
            run.stopped = "the client could not dispatch its schedule within the point's bound"
        await _finish(run, tasks, deadline, clock, dispatcher)
    finally:
        if waker is not None:
            dispatcher.cancel()  # done by now, unless this point itself was cancelled
            waker.close()
    return run


async def _until(due_s: float, clock: Clock, waker: Waker | None = None) -> None:
    """Return at `due_s` on `clock`, never before it. With a waker (a timerfd on `clock`'s
    own CLOCK_MONOTONIC) one precise sleep does it. Otherwise: the loop's timers are coarse
    (uvloop rounds to the millisecond, and may fire early): it sleeps until SPIN_S before the
    due time, at most MAX_WAKES times, then yields to the loop until the time has come (at
    most SPIN_S of turns: under a millisecond of CPU a request)."""
    if waker is not None:
        await waker.sleep(due_s - clock())
    for _ in range(MAX_WAKES):
        wait = due_s - clock() - SPIN_S
        if wait <= 0:
            break
        await asyncio.sleep(wait)
    # Yield until due: a bounded count of loop turns (each at least a few microseconds),
    # never an unbounded wait.
    for _ in range(SPIN_TURNS):
        if clock() >= due_s:
            return
        await asyncio.sleep(0)


async def run_closed(
    client: Client,
    path: str,
    bodies: Sequence[bytes],
    concurrency: int,
    *,
    clock: Clock,
    bound_s: float,
) -> PointRun:
    """C streams through every body in order (module docstring)."""
    n = len(bodies)
    run = PointRun(due_s=[math.nan] * n, t0_s=clock())
    run.records = [RequestRecord(worker=i, start_s=math.nan) for i in range(n)]
    run.dispatched_s = [math.nan] * n
    run.held_s = [0.0] * n
    queue = iter(range(n))

    async def stream_worker(w: int) -> None:
        for i in queue:
            record = run.records[i]
            record.worker = w
            record.start_s = run.dispatched_s[i] = clock()
            await client.stream(path, bodies[i], record)

    tasks = [asyncio.create_task(stream_worker(w)) for w in range(min(concurrency, n))]
    await _finish(run, tasks, run.t0_s + bound_s, clock, None)
    return run


async def _finish(
    run: PointRun,
    tasks: list[asyncio.Task[None]],
    deadline: float,
    clock: Clock,
    dispatcher: asyncio.Task[None] | None,
) -> None:
    """Wait for every request until `deadline`; cancel what still runs then."""
    pending: set[asyncio.Task[None]] = set(tasks)
    while pending:
        left = deadline - clock()
        if left <= 0:
            break
        _, pending = await asyncio.wait(pending, timeout=left)
    stray = [t for t in (*pending, dispatcher) if t is not None and not t.done()]
    if stray:
        run.unfinished = sum(
            1 for r in run.records if not math.isnan(r.start_s) and r.end_s is None
        )
        run.stopped = run.stopped or (
            f"{run.unfinished} request(s) still running at the point's bound; cancelled"
        )
        for t in stray:
            t.cancel()
        _, still = await asyncio.wait(stray, timeout=WORKER_STOP_S)
        if still:
            run.stopped += f"; {len(still)} did not stop within {WORKER_STOP_S:g} s"
    for t in tasks:
        if t.done() and not t.cancelled() and t.exception() is not None:
            raise t.exception()  # type: ignore[misc]
