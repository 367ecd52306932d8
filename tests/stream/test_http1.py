"""bench.stream.http1's response parsing, fed bytes by hand (no sockets): framing split anywhere."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from bench.stream.records import RequestRecord
from bench.stream.response import MAX_CHUNK_LINE, Exchange, chunk_size


class Collect:
    def __init__(self, stop_at: bytes | None = None) -> None:
        self.data = b""
        self.times: list[float] = []
        self.stop_at = stop_at

    def feed(self, data: bytes, now: float) -> bool:
        self.data += data
        self.times.append(now)
        return self.stop_at is not None and self.stop_at in self.data


def _chunked(*events: bytes) -> bytes:
    return b"".join(b"%x\r\n%b\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"


HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _feed(
    parts: Sequence[bytes], reader: Collect | None = None
) -> tuple[Exchange, RequestRecord, Collect]:
    record = RequestRecord(worker=0, start_s=0.0)
    reader = reader or Collect()
    ticks = iter(range(1, 1000))

    async def go() -> Exchange:
        ex = Exchange(record, reader)
        for p in parts:
            ex.received(p, float(next(ticks)))
        return ex

    return asyncio.run(go()), record, reader


def test_chunked_body_split_at_every_byte_gives_the_payload_back() -> None:
    body = _chunked(b"data: one\n\n", b"data: two\n\n")
    raw = HEAD + body
    ex, record, reader = _feed([raw[i : i + 1] for i in range(len(raw))])
    assert reader.data == b"data: one\n\ndata: two\n\n"
    assert ex.complete and not ex.close and ex.done.done()
    assert record.http_status == 200 and record.error is None


def test_one_read_with_head_and_body_reads_the_clock_once() -> None:
    _, _, reader = _feed([HEAD + _chunked(b"data: a\n\n", b"data: b\n\n")])
    assert reader.data == b"data: a\n\ndata: b\n\n"
    assert reader.times == [1.0]  # both events share the one timestamp of that read


def test_each_read_gets_its_own_timestamp() -> None:
    body = _chunked(b"data: a\n\n", b"data: b\n\n")
    cut = len(HEAD) + body.index(b"9\r\ndata: b")
    _, _, reader = _feed([(HEAD + body)[:cut], (HEAD + body)[cut:]])
    assert reader.times == [1.0, 2.0]


def test_reader_stop_resolves_before_the_end_chunk() -> None:
    raw = HEAD + b"b\r\ndata: [D]\n\n\r\n"
    ex, _, _ = _feed([raw], Collect(stop_at=b"[D]"))
    assert ex.done.done() and ex.stopped and not ex.complete


def test_non_200_is_an_http_error_with_the_body_start() -> None:
    body = b'{"error":{"message":"slow down"}}'
    raw = b"HTTP/1.1 429 Too Many Requests\r\ncontent-length: %d\r\n\r\n%b" % (len(body), body)
    ex, record, reader = _feed([raw])
    assert record.http_status == 429
    assert record.error == 'HTTP 429: {"error":{"message":"slow down"}}'
    assert reader.data == b"" and ex.close


def test_malformed_chunk_size_is_a_transport_error() -> None:
    ex, record, _ = _feed([HEAD + b"zz\r\nhello\r\n"])
    assert record.error == "transport error: malformed chunked body: chunk size 'zz'"
    assert ex.done.done() and ex.close


def test_content_length_body_completes_at_its_length() -> None:
    raw = b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\ndata: x\n\n\nEXTRA"
    ex, _, reader = _feed([raw])
    assert reader.data == b"data: x\n\n\n" and ex.complete


def test_end_of_connection_mid_stream_is_a_transport_error() -> None:
    ex, record, _ = _feed([HEAD + b"9\r\ndata: a\n\n\r\n"])
    ex.eof(None)
    assert record.error == (
        "transport error: connection closed by the server (incomplete chunked read)"
    )


def test_whole_chunks_one_per_read_and_chunk_extensions_give_the_payload() -> None:
    events = [b"data: %d\n\n" % i for i in range(20)]  # sizes 10 and 11: one and two digits
    reads = [b"%x\r\n%b\r\n" % (len(e), e) for e in events]
    reads[5] = b"%x;name=value\r\n%b\r\n" % (len(events[5]), events[5])  # an extension
    reads.append(b"0\r\n\r\n")
    ex, _, reader = _feed([HEAD, *reads])
    assert reader.data == b"".join(events)
    assert ex.complete


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "size",
    [b"-6", b"+6", b"0x6", b"1_0", b" 6", b"6 ", b"-0", b"", b"1" * 17, b"\xff"],
    ids=["minus", "plus", "0x", "underscore", "space-before", "space-after", "minus-zero",
         "empty", "17-digits", "non-ascii"],
)  # fmt: skip
def test_a_chunk_size_that_is_not_hex_digits_ends_the_request_in_one_line(size: bytes) -> None:
    # int(b"-6", 16) is -6: the parse stepped back to the same size line forever (issue 15).
    for parts in (
        [HEAD + size + b"\r\ndata: x\n\n\r\n"],
        [HEAD, size + b"\r\n", b"data: x\n\n\r\n"],
    ):
        ex, record, reader = _feed(parts)
        assert record.error is not None
        assert record.error.startswith("transport error: malformed chunked body: chunk size ")
        assert "\n" not in record.error and ex.done.done() and ex.close
        assert reader.data == b""


def test_a_chunk_size_line_without_its_crlf_is_refused_once_over_the_limit() -> None:
    ex, record, _ = _feed([HEAD, b"a" * 1000, b"b" * (MAX_CHUNK_LINE + 10)])
    assert record.error == (
        f"transport error: malformed chunked body: chunk-size line over {MAX_CHUNK_LINE} "
        "bytes (MAX_CHUNK_LINE)"
    )
    assert ex.done.done()


@pytest.mark.parametrize("split", [False, True])
def test_chunk_data_not_followed_by_crlf_is_malformed(split: bool) -> None:
    raw = HEAD + b"5\r\nhelloXY5\r\nworld\r\n"
    parts = [raw[i : i + 1] for i in range(len(raw))] if split else [raw]
    ex, record, reader = _feed(parts)
    assert record.error == "transport error: malformed chunked body: no CRLF after a chunk"
    assert ex.done.done() and b"world" not in reader.data


def test_chunk_size_reads_only_hex_digits_and_extensions() -> None:
    assert chunk_size(b"1a") == 26
    assert chunk_size(b"A;name=value") == 10
    assert chunk_size(b"A \t;ext") == 10  # BWS before the extension
    assert chunk_size(b"f" * 16) == 2**64 - 1
    for bad in (b"-6", b"0x6", b"1_0", b"+1", b" 1", b"", b";x", b"g", b"f" * 17):
        assert chunk_size(bad) is None, bad


@pytest.mark.parametrize(
    ("header", "error"),
    [
        (b"content-encoding: gzip", "content-encoding 'gzip', not identity"),
        (b"content-type: text/html", "'text/html', not text/event-stream"),
    ],
    ids=["gzip", "html"],
)
def test_an_encoded_or_non_sse_200_fails_at_its_head_not_at_its_end(
    header: bytes, error: str
) -> None:
    raw = b"HTTP/1.1 200 OK\r\n%b\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n" % header
    ex, record, reader = _feed([raw])
    assert record.error == "transport error: the response is " + error
    assert ex.done.done() and reader.data == b""


def test_a_redirect_names_its_location() -> None:
    raw = b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://elsewhere:1/v1\r\n"
    raw += b"content-length: 0\r\n\r\n"
    _, record, _ = _feed([raw])
    assert record.error == "HTTP 307: (Location: http://elsewhere:1/v1)"
