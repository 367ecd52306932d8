"""An asyncio loop on virtual time: `asyncio.sleep` and `loop.time()` advance instantly.

When every task waits, the loop jumps its clock to the next timer instead of blocking, so
scheduling code runs exactly as written (same awaits, same order) with no real sleeping.
Only for code without sockets or threads.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _Selector(selectors.DefaultSelector):
    def __init__(self) -> None:
        super().__init__()
        self.loop: VirtualLoop | None = None

    def select(self, timeout: float | None = None) -> list[Any]:
        assert self.loop is not None
        ready = super().select(0)  # the loop's own wake-up pipe only
        if not ready and timeout is not None and timeout > 0:
            self.loop.now_s += timeout
        elif not ready and timeout is None:
            raise RuntimeError("virtual loop: every task waits and no timer is due (deadlock)")
        return ready


class VirtualLoop(asyncio.SelectorEventLoop):
    def __init__(self, start_s: float = 1000.0) -> None:
        self.now_s = start_s
        selector = _Selector()
        super().__init__(selector)
        selector.loop = self

    def time(self) -> float:
        return self.now_s


def run(coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=VirtualLoop) as runner:
        return runner.run(coro)


def clock() -> float:
    return asyncio.get_running_loop().time()
