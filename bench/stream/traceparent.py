"""The W3C trace context every measured request carries (W3C Trace Context, level 1).

    traceparent: 00-<trace id>-<parent id>-01

trace id   32 lowercase hex digits: 16 bytes from os.urandom, new for every request (an
           all-zero id, which the standard calls invalid, is drawn again). The request's
           record keeps it (`RequestRecord.trace_id`, samples.jsonl's `trace_id`): a
           server's span of the request names it, and that is what joins the two
           (bench.live.span_join).
parent id  16 lowercase hex digits: 8 random bytes, the client's side of the call; bench
           exports no span of its own, so nothing else names it.
flags      01: sampled, so a server that samples by its parent's decision exports its span.

No OpenTelemetry on the request path: one urandom call and a format per request.

SentTraces remembers the trace ids drawn while a run receives the server's spans
(bench.live.span_receiver): a span whose trace id is not among them is for a request this
run never sent. It remembers at most MAX_REMEMBERED ids; past that, later requests still
carry a traceparent but their spans count as unknown (a card run sends far fewer).
"""

from __future__ import annotations

import os
import re
import threading

VERSION = "00"
SAMPLED = "01"
HEADER = "traceparent"
MAX_REMEMBERED = 1_000_000
_ZERO_TRACE = "0" * 32
TRACE_ID = re.compile(r"[0-9a-f]{32}")


def new_trace_id() -> str:
    """16 random bytes as 32 lowercase hex digits, never all zero."""
    while True:
        trace_id = os.urandom(16).hex()
        if trace_id != _ZERO_TRACE:
            return trace_id


def header(trace_id: str) -> str:
    """The traceparent value of a request with `trace_id`, under a new random parent id."""
    parent = os.urandom(8).hex()
    if parent == "0" * 16:  # invalid as well; one in 2^64
        parent = "0" * 15 + "1"
    return f"{VERSION}-{trace_id}-{parent}-{SAMPLED}"


class SentTraces:
    """The trace ids of the requests a run sent, when it listens for spans (`remember`).

    Drawn on the event loop's thread, looked up from the span receiver's: a lock keeps the
    set consistent between the two (held for one set operation)."""

    def __init__(self, *, remember: bool = False) -> None:
        self.remember = remember
        self.forgotten = 0  # ids drawn past MAX_REMEMBERED
        self._ids: set[str] = set()
        self._lock = threading.Lock()

    def draw(self) -> str:
        """A new request's trace id, remembered when the run listens for spans."""
        trace_id = new_trace_id()
        if self.remember:
            with self._lock:
                if len(self._ids) < MAX_REMEMBERED:
                    self._ids.add(trace_id)
                else:
                    self.forgotten += 1
        return trace_id

    def __contains__(self, trace_id: object) -> bool:
        with self._lock:
            return trace_id in self._ids

    def __len__(self) -> int:
        with self._lock:
            return len(self._ids)
