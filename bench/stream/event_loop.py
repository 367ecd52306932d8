"""The event loop the measuring side runs on: uvloop where it is installed.

uvloop reads sockets and calls `data_received` from C; with bench.stream.http1 parsing in
`data_received`, the per-read cost of a stream is mostly ours, not the loop's
(docs/performance.md has the figures). Without uvloop, asyncio's own loop is used.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


def factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """A loop factory for `asyncio.Runner`, or None for asyncio's default loop."""
    try:
        import uvloop
    except ImportError:
        return None
    new: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return new
