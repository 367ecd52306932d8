"""The twin's stream rendering without sockets: what a `Stream` writes to its connection, and
when. The headers go out as the request arrives; a chat stream's role chunk only with the
engine's first output, right before that output's token chunk, as vLLM's and llama.cpp's
servers send it (docs/engines/llamacpp-observed.md; vLLM's chat server writes it on its first
iteration over the engine's outputs)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from bench.twin.faults import StreamFaults
from bench.twin.http import TwinConnection
from bench.twin.streams import Stream, StreamSpec


class RecordingTransport(asyncio.Transport):
    """A transport that keeps what is written to it."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self.aborted = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.data += bytes(data)

    def abort(self) -> None:
        self.aborted = True

    def is_closing(self) -> bool:
        return self.aborted


def _stream(
    chat: bool = True,
    engine: str = "vllm",
    usage: bool = True,
    timings: bool = False,
    faults: StreamFaults | None = None,
) -> tuple[Stream, RecordingTransport]:
    transport = RecordingTransport()
    spec = StreamSpec(
        "chatcmpl-1" if chat else "cmpl-1",
        1_800_000_000,
        "tiny",
        chat,
        stream=True,
        include_usage=usage,
        continuous_usage=usage,
        prompt_tokens=7,
        max_tokens=4,
        engine=engine,
        timings=timings,
    )
    return Stream(spec, TwinConnection(transport), faults or StreamFaults()), transport


def _events(data: bytes | bytearray) -> list[Any]:
    """The SSE data lines of a chunked response body (headers skipped): JSON objects, or the
    string "[DONE]"."""
    _, _, body = bytes(data).partition(b"\r\n\r\n")
    payload = bytearray()
    while body:
        size, _, rest = body.partition(b"\r\n")
        n = int(size, 16)
        if n == 0:
            break
        payload += rest[:n]
        body = rest[n + 2 :]
    out: list[Any] = []
    for line in payload.decode().split("\n\n"):
        if line.startswith("data: "):
            text = line[len("data: ") :]
            out.append(text if text == "[DONE]" else json.loads(text))
    return out


def _deltas(events: list[Any]) -> list[dict[str, Any]]:
    return [e["choices"][0]["delta"] for e in events if isinstance(e, dict) and e["choices"]]


def test_the_headers_go_at_once_the_role_chunk_with_the_first_token() -> None:
    stream, transport = _stream()
    stream.begin()
    assert transport.data.startswith(b"HTTP/1.1 200 OK\r\n")
    assert transport.data.endswith(b"\r\n\r\n")  # headers only: nothing before the first output
    assert _events(transport.data) == []
    headers = len(transport.data)
    stream.emit(2, False, 1.0)  # the engine's first output: role, then its tokens, one flush
    first = _events(transport.data)
    assert _deltas(first) == [
        {"role": "assistant", "content": ""},
        {"content": " lorem ipsum"},
    ]
    assert [e["usage"]["completion_tokens"] for e in first] == [0, 2]  # vLLM's continuous usage
    assert len(transport.data) > headers
    stream.emit(2, True, 1.1)  # no second role chunk
    deltas = _deltas(_events(transport.data))
    assert [d for d in deltas if "role" in d] == [{"role": "assistant", "content": ""}]
    assert _events(transport.data)[-1] == "[DONE]"
    assert stream.chunk_log == []  # log_chunks off; the role chunk is never a token chunk


def test_the_role_chunk_rides_on_the_slow_path_too() -> None:
    """The slow path (a fault on the stream, or a large output): role first there as well."""
    stream, transport = _stream(usage=False, faults=StreamFaults(cut_at_tokens=3))
    stream.begin()
    assert _events(transport.data) == []
    stream.emit(1, False, 1.0)
    assert _deltas(_events(transport.data)) == [
        {"role": "assistant", "content": ""},
        {"content": " lorem"},
    ]
    assert all("usage" not in e for e in _events(transport.data))


def test_no_role_chunk_when_the_client_leaves_before_the_first_token() -> None:
    stream, transport = _stream()
    stream.begin()
    stream.lost()
    assert stream.outcome == "cancelled"
    assert _events(transport.data) == []


@pytest.mark.parametrize("timings", [False, True])
def test_llamacpp_role_chunk_comes_with_the_first_token_without_timings(timings: bool) -> None:
    """llama.cpp's role delta (content null) comes in the first decoded token's result; its
    timings ride on the last delta of that result, the token's."""
    stream, transport = _stream(engine="llamacpp", timings=timings)
    stream.begin()
    assert _events(transport.data) == []
    stream.emit(3, False, 1.0)
    role, text = _events(transport.data)
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": None}
    assert "timings" not in role and "usage" not in role
    assert text["choices"][0]["delta"] == {"content": " lorem ipsum dolor"}
    assert ("timings" in text) == timings
    if timings:
        assert text["timings"]["predicted_n"] == 3


def test_completions_have_no_role_chunk() -> None:
    stream, transport = _stream(chat=False)
    stream.begin()
    assert _events(transport.data) == []
    stream.emit(1, False, 1.0)
    (only,) = _events(transport.data)
    assert only["choices"][0]["text"] == " lorem"
