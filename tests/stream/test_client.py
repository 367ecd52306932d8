"""Stream timing on a scripted clock: each read of the clock advances it by 1 s."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

import httpx
import pytest

from bench.stream import sse
from bench.stream.client import Client
from bench.stream.records import RequestRecord
from tests.support.scripted import DONE, ScriptedClock, chat_chunk, transport


def _run(parts: Sequence[bytes | Exception], status: int = 200) -> tuple[RequestRecord, float]:
    clock = ScriptedClock(start_s=100.0, step_s=1.0)

    async def go() -> RequestRecord:
        client = Client("http://server", clock=clock, transport=transport(parts, status))
        record = RequestRecord(worker=0, start_s=clock())  # 101
        await client.stream("/v1/chat/completions", {"stream": True}, record)
        await client.aclose()
        return record

    return asyncio.run(go()), clock.now_s


def _one(handler: Callable[[httpx.Request], httpx.Response], clock: ScriptedClock) -> RequestRecord:
    """One streamed request against a handler that answers it in memory."""

    async def go() -> RequestRecord:
        client = Client("http://s", clock=clock, transport=httpx.MockTransport(handler))
        record = RequestRecord(worker=0, start_s=clock())
        await client.stream("/v1/chat/completions", {}, record)
        await client.aclose()
        return record

    return asyncio.run(go())


def test_ttft_is_the_first_text_chunk_not_the_role_chunk() -> None:
    record, _ = _run(
        [
            chat_chunk(role=True, completion_tokens=0),  # read at 102
            chat_chunk("Hel", completion_tokens=1),  # 103
            chat_chunk("lo", completion_tokens=2),  # 104
            DONE,  # 105
        ]
    )
    assert record.error is None
    assert record.first_token_s == 103.0
    assert record.ttft_s == 2.0
    assert record.prompt_tokens == 100
    assert record.tokens == 2


def test_reasoning_text_counts_as_first_token() -> None:
    record, _ = _run(
        [
            chat_chunk(role=True, completion_tokens=0),
            chat_chunk(reasoning="hm", completion_tokens=1),
            DONE,
        ]
    )
    assert record.first_token_s == 103.0 and record.error is None


def test_multi_token_chunks_weigh_by_tokens_not_chunks() -> None:
    # MTP: chunks carry 1, 3, 3, 2 tokens (cumulative 1, 4, 7, 9) at 103, 104, 105, 106.
    record, _ = _run(
        [
            chat_chunk(role=True, completion_tokens=0),
            chat_chunk("a", completion_tokens=1),
            chat_chunk("bcd", completion_tokens=4),
            chat_chunk("efg", completion_tokens=7),
            chat_chunk("hi", completion_tokens=9),
            chat_chunk(completion_tokens=9),  # final usage-only chunk: no new token
            DONE,
        ]
    )
    assert record.tokens == 9
    assert list(record.chunk_s) == [103.0, 104.0, 105.0, 106.0]
    # (t_last - t_first) / (tokens - 1) = (106 - 103) / 8, not 3 / 3 chunk gaps.
    assert record.tbt_s == 3.0 / 8
    assert record.gaps_s() == [1.0, 1.0, 1.0]
    assert record.tokens_between(104.0, 105.0) == (6, 105.0)


def test_several_events_in_one_read_share_one_timestamp() -> None:
    record, _ = _run(
        [
            chat_chunk(role=True, completion_tokens=0) + chat_chunk("a", completion_tokens=1),
            chat_chunk("b", completion_tokens=2) + DONE,
        ]
    )
    assert record.first_token_s == 102.0
    assert list(record.chunk_s) == [102.0, 103.0]


def test_usage_only_stream_is_a_failure() -> None:
    record, _ = _run([chat_chunk(completion_tokens=1), chat_chunk(completion_tokens=2), DONE])
    assert record.error is not None and record.error.startswith("usage-only stream")


def test_text_without_usage_is_a_failure_never_counted_from_chunks() -> None:
    record, _ = _run([chat_chunk("a"), chat_chunk("b"), DONE])
    assert record.tokens == 0
    assert record.error is not None and "no usage" in record.error


def test_error_event_inside_a_200_stream_is_a_failure() -> None:
    record, _ = _run(
        [
            chat_chunk("a", completion_tokens=1),
            b'data: {"error": {"object": "error", "message": "engine died", "code": 500}}\n\n',
            DONE,
        ]
    )
    assert record.http_status == 200
    assert record.error == "error event: engine died"


def test_error_word_inside_generated_text_is_not_an_error_event() -> None:
    record, _ = _run(
        [
            chat_chunk('say "error": x', completion_tokens=1),
            chat_chunk("b", completion_tokens=2),
            DONE,
        ]
    )
    assert record.error is None and record.tokens == 2


def test_non_200_is_an_error_record() -> None:
    record, _ = _run([b'{"error": "too many requests"}'], status=429)
    assert record.http_status == 429
    assert record.error is not None and record.error.startswith("HTTP 429")
    assert record.tokens == 0


def test_read_time_out_is_an_error_record() -> None:
    record, _ = _run([chat_chunk("a", completion_tokens=1), httpx.ReadTimeout("timed out")])
    assert record.error is not None and record.error.startswith("read time-out")
    assert record.tokens == 1
    assert record.end_s is not None


def test_stream_cut_before_done_is_a_failure() -> None:
    record, _ = _run(
        [chat_chunk("a", completion_tokens=1), httpx.RemoteProtocolError("peer closed")]
    )
    assert record.error is not None and record.error.startswith("transport error")


def test_cancellation_marks_the_record_and_propagates() -> None:
    clock = ScriptedClock()
    gate = asyncio.Event

    class _Hang(httpx.AsyncByteStream):
        async def __aiter__(self):  # type: ignore[no-untyped-def]
            yield chat_chunk("a", completion_tokens=1)
            await gate().wait()
            yield DONE

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, stream=_Hang())

    async def go() -> RequestRecord:
        client = Client("http://s", clock=clock, transport=httpx.MockTransport(handler))
        record = RequestRecord(worker=0, start_s=clock())
        task = asyncio.create_task(client.stream("/v1/chat/completions", {}, record))
        while record.tokens == 0:
            await asyncio.sleep(0)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await client.aclose()
        return record

    record = asyncio.run(go())
    assert record.cancelled and record.error is None and record.tokens == 1


def test_malformed_chunk_is_a_failure() -> None:
    record, _ = _run(
        [
            chat_chunk("a", completion_tokens=1),
            b'data: {"id":"x","choices":[{"delta":{"content":"\n\n',
            DONE,
        ]
    )
    assert record.error is not None and record.error.startswith("malformed chunk")


def test_an_encoded_stream_is_refused_at_its_head_as_on_bench_http1() -> None:
    """The stream asks for identity; a server that gzips it anyway is refused at once with
    bench.stream.http1's words (decoding it would inflate each read whole in memory)."""
    import gzip

    body = gzip.compress(
        chat_chunk("a", completion_tokens=1) + chat_chunk("b", completion_tokens=2) + DONE
    )
    clock = ScriptedClock()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body, headers={"content-encoding": "gzip"})

    record = _one(handler, clock)
    assert record.error == "transport error: the response is content-encoding 'gzip', not identity"
    assert record.tokens == 0 and not record.finished


def test_a_get_on_a_connection_the_server_closed_is_sent_once_more() -> None:
    from bench.errors import ServerUnreachable

    calls: list[str] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, text="ok")

    def dead(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        raise httpx.RemoteProtocolError("Server disconnected without sending a response.")

    async def get(handler: object) -> tuple[int, str]:
        transport = httpx.MockTransport(handler)  # type: ignore[arg-type]
        client = Client("http://s", clock=ScriptedClock(), transport=transport)
        try:
            return await client.get("/metrics")
        finally:
            await client.aclose()

    assert asyncio.run(get(flaky)) == (200, "ok") and calls == ["/metrics", "/metrics"]
    calls.clear()
    with pytest.raises(ServerUnreachable, match="Server disconnected"):
        asyncio.run(get(dead))  # a server that keeps closing is unreachable
    assert calls == ["/metrics", "/metrics"]  # once more, not forever


def test_an_idempotent_post_on_a_connection_the_server_closed_is_sent_once_more() -> None:
    """A /tokenize after an error answer that closed the connection unannounced (seen in
    `tests/hostile/test_https.py`: the fingerprint's HTTP 500s, then the row's /tokenize)
    is sent again on a fresh one; a completion, which is not idempotent, is not."""
    from bench.errors import ServerUnreachable

    calls: list[str] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        calls.append(request.url.path)
        if len(calls) == 1:
            raise httpx.RemoteProtocolError("Server disconnected without sending a response.")
        return httpx.Response(200, json={"count": 3})

    async def post(path: str, idempotent: bool) -> tuple[int, object]:
        transport = httpx.MockTransport(flaky)
        client = Client("http://s", clock=ScriptedClock(), transport=transport)
        try:
            return await client.post_json(path, {"prompt": "a b c"}, idempotent=idempotent)
        finally:
            await client.aclose()

    assert asyncio.run(post("/tokenize", True)) == (200, {"count": 3})
    assert calls == ["/tokenize", "/tokenize"]
    calls.clear()
    with pytest.raises(ServerUnreachable, match="Server disconnected"):
        asyncio.run(post("/v1/completions", False))
    assert calls == ["/v1/completions"]


def test_text_without_usage_is_counted_as_unattributed_on_both_read_paths() -> None:
    # Usage only in the last chunk (no continuous usage): all 3 tokens arrive at 106.
    parts = [
        chat_chunk(role=True),
        chat_chunk("a"),
        chat_chunk("b"),
        chat_chunk("c", completion_tokens=3),
        DONE,
    ]
    record, _ = _run(parts)
    assert record.error is None and record.first_token_s == 103.0
    assert record.unattributed == 2 and list(record.chunk_s) == [105.0]
    record, _ = _run([b"".join(parts)])  # one read: the fast path must notice too
    assert record.unattributed == 2 and record.tokens == 3
    continuous = [chat_chunk("a", completion_tokens=1), chat_chunk("b", completion_tokens=2), DONE]
    assert _run(continuous)[0].unattributed == 0
    assert _run([b"".join(continuous)])[0].unattributed == 0


def test_a_usage_count_of_2_to_the_63_is_one_line_on_the_record_not_a_traceback() -> None:
    for count in (b"%d" % 2**63, b"9" * 5000):  # an int64 overflow; int()'s digit limit
        line = chat_chunk("a", completion_tokens=1).replace(
            b'"completion_tokens": 1', b'"completion_tokens": ' + count
        )
        for parts in (
            [chat_chunk("x", completion_tokens=1), line, DONE],
            [chat_chunk("x", completion_tokens=1) + line + DONE],
        ):
            record, _ = _run(parts)
            assert record.error is not None
            assert record.error.startswith("implausible usage: completion_tokens 9")
            assert record.error.endswith("(over 12 digits)") and "\n" not in record.error


def test_an_error_response_made_whole_in_memory_is_read_like_a_streamed_one() -> None:
    clock = ScriptedClock()

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, content=b"x" * 1000, headers={"location": "/elsewhere"})

    record = _one(handler, clock)
    assert record.error == "HTTP 503: (Location: /elsewhere) " + "x" * 300


def test_chunk_times_never_go_back_whatever_the_stamps_say() -> None:
    # A receive stamp is moved onto the client's clock from two readings; preempted between
    # them, a loaded machine dated a read 1.5 ms before the one it followed, a negative gap
    # that made a llama.cpp cell implausible. The record keeps its times in order.
    record = RequestRecord(worker=0, start_s=0.0)
    record.add_usage(1.0, 1)
    record.add_usage(0.9985, 2)
    record.add_usage(1.01, 3)
    assert list(record.chunk_s) == [1.0, 1.0, 1.01]
    assert min(record.gaps_s()) == 0.0
    assert record.tokens_between(1.0, 1.0) == (2, 1.0)


def test_a_first_token_stamped_before_the_request_went_out_counts_from_the_send() -> None:
    # A twin under a CPU hog measured a TTFT of -0.57 ms: the first token's receive stamp,
    # moved onto the client's clock, came out before the request's own send time. Neither
    # the TTFT nor a time between tokens may go below zero, whatever a stamp says.
    record = RequestRecord(worker=0, start_s=0.9, sent_s=1.0)
    events = sse.Events(record)
    events.feed(b"data: " + chat_chunk(role=True, completion_tokens=0) + b"\n\n", 0.99)
    events.feed(b"data: " + chat_chunk("a", completion_tokens=1) + b"\n\n", 0.9994)
    events.feed(b"data: " + chat_chunk("b", completion_tokens=2) + b"\n\n", 0.9996)
    assert record.ttft_s == 0.0
    assert list(record.chunk_s) == [1.0, 1.0]
    assert record.tbt_s == 0.0
