"""When bytes reached this host: the kernel's receive stamps on TCP sockets (Linux).

A time taken in Python when data is handed over is late by whatever the event loop did
first. When 256 first tokens arrive at once, the last ones are read milliseconds after
they came; when 1,024 requests reach a server at once, tens of milliseconds
(docs/performance.md). With SO_TIMESTAMPNS the kernel stamps every segment as it arrives,
and `recvmsg` hands back, with the data, the stamp of the last segment it read. Both ends
of a measured stream use it: the client's reader (`bench.stream.http1`) for when each read
arrived, and the twin (its ground truth and its simulated clock) for when each request did.

Stamps are on time.time()'s scale; `to_clock` puts one on another clock. Where the kernel
gives none (not Linux), callers use their own clock.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from collections.abc import Callable

# Linux's value; Python 3.11's socket module does not export it. SCM_TIMESTAMPNS is the same.
SO_TIMESTAMPNS = 35
_TIMESPEC = struct.Struct("@qq")  # struct timespec on 64-bit Linux
_unpack_timespec = _TIMESPEC.unpack_from
_TIMESPEC_SIZE = _TIMESPEC.size
_SOL_SOCKET = socket.SOL_SOCKET
_ANC_SIZE = socket.CMSG_SPACE(_TIMESPEC.size)
SUPPORTED = sys.platform.startswith("linux")


def enable(sock: socket.socket) -> None:
    """Ask the kernel to stamp what this socket receives (accepted sockets inherit it)."""
    if SUPPORTED:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)


def keeper() -> socket.socket | None:
    """A socket that only holds stamping on, for as long as it is open.

    The kernel starts stamping (for every socket that asked) a moment after the first
    socket asks, from a deferred work item, and stops when the last one closes; a client
    that asks early, before it connects, gets stamps on its first reads too.
    """
    if not SUPPORTED:
        return None
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    enable(sock)
    return sock


def _wall(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The receive stamp in a read's ancillary data (the kernel sends one item), or None."""
    if ancillary:
        level, kind, raw = ancillary[0]
        if kind == SO_TIMESTAMPNS and level == socket.SOL_SOCKET and len(raw) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(raw)
            return float(sec + nsec * 1e-9)
    return None


def recv(sock: socket.socket, size: int) -> tuple[bytes, float | None]:
    """Up to `size` bytes and the wall-clock time the last of them reached this host."""
    data, ancillary, _, _ = sock.recvmsg(size, _ANC_SIZE)
    return data, _wall(ancillary)


def read(sock: socket.socket, size: int, clock: Callable[[], float]) -> tuple[bytes, float]:
    """`recv` with the stamp put on `clock`'s scale at once (the client's hot path: `_wall`
    written out here, one call less a read)."""
    data, ancillary, _, _ = sock.recvmsg(size, _ANC_SIZE)
    if ancillary:
        level, kind, raw = ancillary[0]
        if kind == SO_TIMESTAMPNS and level == _SOL_SOCKET and len(raw) >= _TIMESPEC_SIZE:
            sec, nsec = _unpack_timespec(raw)
            return data, to_clock(float(sec + nsec * 1e-9), clock)
    return data, clock()


# Two clock readings this close are one instant for a stamp: a preemption between them
# (milliseconds on a loaded machine) is a hundred times wider.
TIGHT_S = 20e-6
TRIES = 4


def to_clock(
    wall: float | None, clock: Callable[[], float], wall_now: Callable[[], float] = time.time
) -> float:
    """A receive stamp on `clock`'s scale (now on that clock when there is no stamp).

    The stamp's age is read from the wall clock and taken off `clock`'s now, so the two
    nows must be one instant. A process preempted between the two readings dated the stamp
    early by the whole preemption (a time of -0.57 ms in a twin's trial under load, issue 28),
    so the wall reading is bracketed by two of `clock` and taken again, up to TRIES times,
    while the bracket is wider than TIGHT_S; the tightest bracket's midpoint is the now,
    wrong by at most half its width.
    """
    if wall is None:
        return clock()
    # The first try, written out: nearly every bracket is tight at once.
    before = clock()
    at_wall = wall_now()
    after = clock()
    if after - before > TIGHT_S:
        return _tighter(wall, clock, wall_now, (after - before, (before + after) / 2, at_wall))
    age = at_wall - wall
    return (before + after) / 2 - (age if age > 0.0 else 0.0)  # max(0.0, age), nan -> 0.0


def _tighter(
    wall: float,
    clock: Callable[[], float],
    wall_now: Callable[[], float],
    first: tuple[float, float, float],
) -> float:
    """`to_clock`'s other TRIES - 1 tries, after a `first` bracket (width, midpoint, wall
    reading) wider than TIGHT_S."""
    best_width, best_now, best_wall = first
    for _ in range(TRIES - 1):
        before = clock()
        at_wall = wall_now()
        after = clock()
        if after - before < best_width:
            best_width, best_now, best_wall = after - before, (before + after) / 2, at_wall
        if best_width <= TIGHT_S:
            break
    return best_now - max(0.0, best_wall - wall)


# -- the twin's side: asyncio's selector loop reads through the socket object ---------------

_last_wall: list[float] = []  # the stamp of the last read on a stamped server socket


def take() -> float | None:
    """The receive stamp of the data a stamped server socket has just returned, once.

    asyncio's selector loop (what the twin runs on) reads through the socket object's
    `recv` and calls `data_received` with the result at once, nothing in between, so
    `take()` inside `data_received` is the stamp of exactly those bytes.
    """
    return _last_wall.pop() if _last_wall else None


class _StampedSocket(socket.socket):
    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data, wall = recv(self, bufsize)
        _last_wall.clear()
        if wall is not None:
            _last_wall.append(wall)
        return data


class _StampedListener(socket.socket):
    def accept(self) -> tuple[socket.socket, object]:
        fd, addr = self._accept()  # type: ignore[attr-defined]
        conn = _StampedSocket(self.family, self.type, self.proto, fileno=fd)
        if socket.getdefaulttimeout() is None and self.gettimeout():
            conn.setblocking(True)  # what socket.accept does; asyncio sets non-blocking
        return conn, addr


def listen(host: str, port: int, backlog: int) -> socket.socket:
    """A bound, listening TCP socket for `loop.create_server(sock=...)` whose connections
    carry receive stamps (on Linux) for `take()`."""
    family, kind, proto, _, addr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = (_StampedListener if SUPPORTED else socket.socket)(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        enable(sock)
        sock.bind(addr)
        sock.listen(backlog)
    except OSError:
        sock.close()
        raise
    return sock
