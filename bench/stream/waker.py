"""A sub-millisecond wake-up on the running loop: a Linux timerfd on CLOCK_MONOTONIC.

The loop's own timers are coarse (uvloop rounds a delay to whole milliseconds and may fire
up to one early), so the open-loop dispatcher (bench.workload.runner) used to sleep to a
millisecond before each due time and then turn the loop (`sleep(0)`) until it came: about
5 % of a core at 100 requests/s, a fifth of the client's CPU (tools/perf's open-loop part,
7 December 2026). A timerfd fires on the kernel's high-resolution timer instead; the loop
wakes once, when it is readable. CLOCK_MONOTONIC is time.perf_counter's and
time.monotonic's clock on Linux, so a wait of `s` seconds armed now ends no earlier than
`s` later on either.

Linux only (glibc's timerfd_create, through ctypes): `Waker.open()` is None elsewhere, or
where the call fails, and callers keep their own way.
"""

from __future__ import annotations

import asyncio
import ctypes
import functools
import math
import os
import sys
import time
from collections.abc import Callable

_CLOCK_MONOTONIC = 1
_TFD_NONBLOCK = os.O_NONBLOCK
_TFD_CLOEXEC = os.O_CLOEXEC
# The clocks whose readings a timerfd on CLOCK_MONOTONIC keeps (Linux: both read it).
MONOTONIC_CLOCKS: tuple[Callable[[], float], ...] = (time.perf_counter, time.monotonic)


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """libc with its timerfd calls typed, once (None: no timerfd here)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        # The process's own symbols (libc's among them): find_library would run ldconfig.
        libc = ctypes.CDLL(None, use_errno=True)
        libc.timerfd_create.argtypes = (ctypes.c_int, ctypes.c_int)
        libc.timerfd_settime.argtypes = (
            ctypes.c_int,
            ctypes.c_int,
            ctypes.POINTER(_Itimerspec),
            ctypes.c_void_p,
        )
    except (OSError, AttributeError):
        return None
    return libc


class Waker:
    """One timerfd watched by the running loop; one `sleep` at a time."""

    def __init__(self, fd: int, libc: ctypes.CDLL) -> None:
        self.fd = fd
        self._libc = libc
        self._spec = _Itimerspec()
        self._loop = asyncio.get_running_loop()
        self._waiter: asyncio.Future[None] | None = None
        self._loop.add_reader(fd, self._fired)

    @classmethod
    def open(cls) -> Waker | None:
        """A waker on the running loop, or None where there is no timerfd."""
        libc = _libc()
        if libc is None:
            return None
        fd = libc.timerfd_create(_CLOCK_MONOTONIC, _TFD_NONBLOCK | _TFD_CLOEXEC)
        if fd < 0:
            return None
        try:
            return cls(fd, libc)
        except NotImplementedError:  # a loop that cannot watch a file descriptor
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise

    async def sleep(self, seconds: float) -> None:
        """Return no earlier than `seconds` from now on CLOCK_MONOTONIC (at once for <= 0)."""
        if not seconds > 0:
            return
        if self._waiter is not None:
            raise RuntimeError("Waker.sleep: another sleep is waiting")
        ns = math.ceil(seconds * 1e9)
        value = self._spec.it_value
        value.tv_sec, value.tv_nsec = divmod(ns, 1_000_000_000)
        if self._libc.timerfd_settime(self.fd, 0, ctypes.byref(self._spec), None) < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self._waiter = waiter = self._loop.create_future()
        try:
            await waiter
        finally:
            self._waiter = None
            if waiter.cancelled() or not waiter.done():
                # Cancelled: disarm (which also clears an expiry not read yet), so that no
                # stale one ends the next sleep early.
                value.tv_sec = value.tv_nsec = 0
                self._libc.timerfd_settime(self.fd, 0, ctypes.byref(self._spec), None)

    def _drain(self) -> bool:
        try:
            os.read(self.fd, 8)
        except (BlockingIOError, InterruptedError):
            return False
        return True

    def _fired(self) -> None:
        if self._drain():
            waiter = self._waiter
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    def close(self) -> None:
        if self.fd < 0:
            return
        self._loop.remove_reader(self.fd)
        os.close(self.fd)
        self.fd = -1
