"""bench.stream.waker: a timerfd's sleep ends no earlier than asked on perf_counter, costs one
wake-up instead of a millisecond of loop turns, and a cancelled sleep leaves nothing armed.
And bench.workload.runner's `_until` with one: never before its due time. A timerfd is
no socket: these run in the unit tier."""

from __future__ import annotations

import asyncio
import sys
import time

import pytest

from bench.stream.waker import MONOTONIC_CLOCKS, Waker
from bench.workload import runner

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="timerfd: Linux")


def test_a_sleep_ends_no_earlier_than_asked() -> None:
    async def go() -> list[float]:
        waker = Waker.open()
        assert waker is not None
        late = []
        try:
            for wait in (0.0003, 0.0007, 0.0011, 0.002, 1e-9):
                t0 = time.perf_counter()
                await waker.sleep(wait)
                late.append(time.perf_counter() - t0 - wait)
        finally:
            waker.close()
        return late

    late = asyncio.run(go())
    assert min(late) >= 0.0, late


def test_a_sleep_of_nothing_returns_at_once_and_two_at_once_are_refused() -> None:
    async def go() -> None:
        waker = Waker.open()
        assert waker is not None
        try:
            await waker.sleep(0.0)
            await waker.sleep(-1.0)
            first = asyncio.create_task(waker.sleep(0.05))
            await asyncio.sleep(0)
            with pytest.raises(RuntimeError, match="another sleep"):
                await waker.sleep(0.01)
            first.cancel()
        finally:
            waker.close()
            waker.close()  # twice is harmless

    asyncio.run(go())


def test_a_cancelled_sleep_leaves_no_expiry_for_the_next() -> None:
    async def go() -> float:
        waker = Waker.open()
        assert waker is not None
        try:
            task = asyncio.create_task(waker.sleep(0.001))
            await asyncio.sleep(0)
            task.cancel()
            time.sleep(0.003)  # the cancelled timer would have expired by now
            with pytest.raises(asyncio.CancelledError):
                await task
            t0 = time.perf_counter()
            await waker.sleep(0.02)
            return time.perf_counter() - t0
        finally:
            waker.close()

    assert asyncio.run(go()) >= 0.02


def test_until_with_a_waker_is_never_early_and_costs_no_loop_turns() -> None:
    """With the timerfd the dispatcher's wait is one wake-up: the old last millisecond of
    `sleep(0)` turns cost about that much CPU a request (tools/perf's open-loop part)."""
    assert time.perf_counter in MONOTONIC_CLOCKS

    async def go() -> tuple[list[float], float]:
        waker = Waker.open()
        assert waker is not None
        clock = time.perf_counter
        early = []
        cpu = time.process_time()
        try:
            for _ in range(40):
                due = clock() + 0.002
                await runner._until(due, clock, waker)
                early.append(due - clock())
        finally:
            waker.close()
        return early, time.process_time() - cpu

    early, cpu_s = asyncio.run(go())
    assert max(early) <= 0.0, f"returned {max(early) * 1e3:.3f} ms early"
    # 40 waits: 40 ms of turns the old way (when it had the CPU); a few wake-ups now.
    assert cpu_s < 0.02, f"{cpu_s * 1e3:.1f} ms of CPU for 40 waits"
