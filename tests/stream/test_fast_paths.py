"""The measured stream's per-read fast paths give exactly what the full parse gives.

Issue 43: the client's CPU per token. The usual read of a stream under way is one HTTP
chunk holding one `data:` event with a usage count; `Exchange.received` and `Events.feed`
take it in a few scans, and hand anything else to the full parse (`Exchange._received`,
`Events._feed_all`). Here both ways read the same bytes from the same state, for the
usual shape, that shape bent in every way a hostile server could bend it, and arbitrary
bytes; the records, the parse state and the answers must be the same. `rxstamp`'s
written-out first clock bracket is checked against the loop it replaced. No sockets.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import json
import socket
import struct
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from bench.stream import rxstamp
from bench.stream.records import RequestRecord
from bench.stream.response import Exchange
from bench.stream.sse import Events, one_count
from tests.support.budget import fixed_budget
from tests.support.scripted import paused_clocks

BUDGET = fixed_budget(400)

# Pieces a hostile (or just different) server could put anywhere in an event.
TRICKY = [
    b"\r", b"\n", b"\r\n", b"\n\n", b'"error"', b'"error":{"message":"no"}', b'"object":"error"',
    b'"completion_tokens":', b'"completion_tokens": 12', b'"completion_tokens":\n3',
    b'"completion_tokens":"7"', b'"completion_tokens":1234567890123', b"[DONE]",
    b"data: [DONE]", b"\ndata: [DONE]\n", b"data:", b"\ndata: {}", b"\ndata: {\"x\":1}\n", b"}",
    b"}\n", b"{", b" ", b"\t", b'"', b"\\", b'"prompt_tokens":3', b'"content":"x"', b"\x00",
    b"\xff", b":", b"event: x\n", b": keep-alive\n",
]  # fmt: skip


def usual(count: int, text: str, prompt: int, chat: bool) -> bytes:
    """One event as vLLM (and the perf streamer) sends it with continuous usage stats."""
    body = {"delta": {"content": text}} if chat else {"text": text}
    obj = {
        "id": "cmpl-1",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "choices": [{"index": 0, **body, "finish_reason": None}],
        "usage": {"prompt_tokens": prompt, "total_tokens": prompt + count,
                  "completion_tokens": count},
    }  # fmt: skip
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


@st.composite
def payloads(draw: st.DrawFn) -> bytes:
    """The usual event, or arbitrary bytes, then bent a few times."""
    base = draw(
        st.one_of(
            st.builds(
                usual,
                st.one_of(st.integers(0, 300), st.integers(0, 10**15)),
                st.text(max_size=12),
                st.integers(0, 10**6),
                st.booleans(),
            ),
            st.binary(max_size=400),
        )
    )
    for _ in range(draw(st.sampled_from([0, 0, 1, 2, 3]))):
        at = draw(st.integers(0, len(base)))
        piece = draw(st.one_of(st.sampled_from(TRICKY), st.binary(max_size=4)))
        cut = draw(st.integers(0, 3))
        base = base[:at] + piece + base[at + cut :]
    return base


def fields(record: RequestRecord) -> dict[str, Any]:
    out = {}
    for f in dataclasses.fields(record):
        value = getattr(record, f.name)
        out[f.name] = list(value) if f.name in ("chunk_s", "chunk_tokens") else value
    return out


def a_record(steady: int, prior: int) -> RequestRecord:
    """A stream under way (steady 0), or one the fast path must leave alone."""
    record = RequestRecord(worker=0, start_s=0.0, sent_s=0.5)
    if steady != 1:
        record.first_token_s = 1.0
        record.add_usage(1.0, prior)
    if steady != 2:
        record.prompt_tokens = 16
    return record


def events_state(reader: Events) -> tuple[Any, ...]:
    return (list(reader.parts), reader.held, fields(reader.record))


@BUDGET
@given(payload=payloads(), steady=st.integers(0, 3), prior=st.integers(0, 200))
def test_the_sse_fast_path_reads_any_payload_as_the_full_parse_does(
    payload: bytes, steady: int, prior: int
) -> None:
    fast, full = Events(a_record(steady, prior)), Events(a_record(steady, prior))
    if steady == 3:  # the start of a line held from an earlier read
        fast.parts, fast.held = [b"data: {"], 7
        full.parts, full.held = [b"data: {"], 7
    assert fast.feed(payload, 2.0) == full._feed_all(payload, 2.0)
    assert events_state(fast) == events_state(full)


@BUDGET
@given(count=st.integers(0, 10**12 - 1), text=st.text(max_size=20), chat=st.booleans())
def test_the_usual_event_takes_the_fast_path(count: int, text: str, chat: bool) -> None:
    assert one_count(usual(count, text, 16, chat)) == count


def test_what_the_fast_path_leaves_to_the_full_parse() -> None:
    event = usual(5, "hi", 16, True)
    assert one_count(event) == 5
    for bent in (
        event.replace(b"\n\n", b"\r\n\r\n"),  # CR LF line ends
        event + event,  # two events in one read
        event[:-1],  # no blank line yet
        event.replace(b'"id"', b'"error"'),
        event.replace(b"data: {", b"data:{"),
        event.replace(b"5}}", b"null}}"),
        event.replace(b":5}", b":1234567890123}"),  # implausible: the full parse fails it
        b": keep-alive\n" + event,
    ):
        assert one_count(bent) == -1, bent


# -- the exchange: one whole chunk a read --------------------------------------------------


@st.composite
def reads(draw: st.DrawFn) -> bytes:
    """One read: the payload framed as one chunk, often right, sometimes bent."""
    payload = draw(payloads())
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=300))
    if draw(st.booleans()):  # framed right, as nearly every read is
        return b"%x\r\n%b\r\n" % (len(payload), payload)
    size = len(payload) + draw(st.sampled_from([0, 1, -1, 2]))
    head = b"%x" % max(size, 0)
    head = draw(st.sampled_from([head, head.upper(), b"0" + head, head + b";x=y", head + b" "]))
    tail = draw(st.sampled_from([b"\r\n", b"\n", b"", b"\r\n0\r\n\r\n"]))
    frame = head + b"\r\n" + payload + tail
    return frame + frame if draw(st.integers(0, 4)) == 0 else frame


def exchange_state(ex: Exchange) -> tuple[Any, ...]:
    slots = [s for s in Exchange.__slots__ if s not in ("done", "ended", "reader", "record")]
    return (
        tuple(getattr(ex, s) for s in slots),
        ex.done.done(),
        events_state(ex.reader) if isinstance(ex.reader, Events) else None,
    )


def a_stream_under_way(steady: int, prior: int, cbuf: bytes) -> Exchange:
    record = a_record(steady, prior)
    record.http_status = 200
    ex = Exchange(record, Events(record))
    ex.status, ex.chunked, ex.cbuf = 200, True, cbuf
    return ex


@BUDGET
@given(
    data=reads(),
    steady=st.integers(0, 2),
    prior=st.integers(0, 200),
    cbuf=st.sampled_from([b"", b"", b"", b"1", b"f1\r"]),
)
def test_the_exchange_fast_path_reads_any_read_as_the_full_parse_does(
    data: bytes, steady: int, prior: int, cbuf: bytes
) -> None:
    async def both() -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        fast = a_stream_under_way(steady, prior, cbuf)
        full = a_stream_under_way(steady, prior, cbuf)
        fast.received(data, 2.0)
        full.reads += 1  # what `received` counts before either way
        full._received(data, 2.0)
        return exchange_state(fast), exchange_state(full)

    fast, full = asyncio.run(both())
    assert fast == full


# -- rxstamp: the first bracket written out ------------------------------------------------


def reference_to_clock(
    wall: float | None, clock: Callable[[], float], wall_now: Callable[[], float]
) -> float:
    """bench.stream.rxstamp.to_clock as it was, one loop for every try."""
    if wall is None:
        return clock()
    best_width, best_now, best_wall = float("inf"), 0.0, 0.0
    for _ in range(rxstamp.TRIES):
        before = clock()
        at_wall = wall_now()
        after = clock()
        if after - before < best_width:
            best_width, best_now, best_wall = after - before, (before + after) / 2, at_wall
        if best_width <= rxstamp.TIGHT_S:
            break
    return best_now - max(0.0, best_wall - wall)


@BUDGET
@given(
    pauses=st.lists(st.sampled_from([0.0, 5e-6, 2e-5, 1e-4, 3e-3]), max_size=6),
    age=st.one_of(st.none(), st.floats(-1.0, 1.0)),
)
def test_to_clock_gives_what_its_loop_gave(pauses: list[float], age: float | None) -> None:
    wall = None if age is None else 1005.0 - age
    got = rxstamp.to_clock(wall, *paused_clocks(pauses))
    assert got == reference_to_clock(wall, *paused_clocks(pauses))


class FakeSock:
    """recvmsg's answer, scripted: (data, ancillary, flags, address)."""

    def __init__(self, ancillary: list[tuple[int, int, bytes]]) -> None:
        self.ancillary = ancillary

    def recvmsg(self, size: int, ancsize: int) -> tuple[bytes, list[Any], int, None]:
        return b"abc", copy.copy(self.ancillary), 0, None


@BUDGET
@given(
    item=st.one_of(
        st.just(None),
        st.tuples(
            st.sampled_from([socket.SOL_SOCKET, 6]),
            st.sampled_from([rxstamp.SO_TIMESTAMPNS, 29]),
            st.one_of(
                st.tuples(st.integers(0, 2**40), st.integers(0, 999_999_999)).map(
                    lambda t: struct.pack("@qq", *t)
                ),
                st.binary(max_size=20),
            ),
        ),
    )
)
def test_read_takes_the_stamp_recv_takes(item: tuple[int, int, bytes] | None) -> None:
    """`read` parses the ancillary data itself: the same stamp as `recv`'s (`_wall`), handed
    to `to_clock`, or none (the clock's now)."""
    sock = FakeSock([] if item is None else [item])
    put: list[float] = []
    real = rxstamp.to_clock

    def to_clock(wall: float | None, clock: Callable[[], float]) -> float:
        assert wall is not None  # `read` reads the clock itself when there is no stamp
        put.append(wall)
        return -2.0

    rxstamp.to_clock = to_clock  # type: ignore[assignment]
    try:
        data, stamp = rxstamp.read(sock, 100, lambda: -1.0)  # type: ignore[arg-type]
    finally:
        rxstamp.to_clock = real
    _, wall = rxstamp.recv(sock, 100)  # type: ignore[arg-type]
    assert data == b"abc"
    assert (stamp, put) == ((-1.0, []) if wall is None else (-2.0, [wall]))


def test_the_usual_read_takes_the_fast_paths() -> None:
    """The perf streamer's read, in a stream under way, never reaches the full parses."""

    class Exchange1(Exchange):
        def _received(self, data: bytes, now: float) -> None:
            raise AssertionError("the exchange's full parse ran")

    class Events1(Events):
        def _feed_all(self, data: bytes, now: float) -> bool:
            raise AssertionError("the SSE reader's full parse ran")

    async def one_read() -> RequestRecord:
        record = a_record(0, 4)
        ex = Exchange1(record, Events1(record))
        ex.status, ex.chunked = 200, True
        payload = usual(5, " tok", 16, True)
        ex.received(b"%x\r\n%b\r\n" % (len(payload), payload), 2.0)
        return record

    record = asyncio.run(one_read())
    assert list(record.chunk_tokens) == [4, 5] and list(record.chunk_s) == [1.0, 2.0]
