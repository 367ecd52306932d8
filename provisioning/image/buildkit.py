"""Progress lines from the Docker engine's BuildKit build stream, as `docker build` prints them.

A BuildKit build through the Engine API (`POST /build?version=2`) answers with JSON lines;
its progress comes as `{"id": "moby.buildkit.trace", "aux": "<base64>"}`, each a protobuf
`moby.buildkit.v1.StatusResponse` (buildkit's api/services/control/control.proto). Only the
fields shown here are read, with a minimal reader of the protobuf wire format:

    StatusResponse  1: Vertex (repeated)   3: VertexLog (repeated)
    Vertex          1: digest  3: name  4: cached  5: started  6: completed  7: error
    VertexLog       1: vertex digest    4: msg (bytes)
    Timestamp       1: seconds  2: nanos

The result is the plain progress of the CLI: `#3 [bench 2/7] RUN ...`, its output lines,
`#3 DONE 4.2s` / `#3 CACHED` / `#3 ERROR: ...`, one step number per vertex.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator
from dataclasses import dataclass, field

TRACE_ID = "moby.buildkit.trace"
IMAGE_ID = "moby.image.id"

_VARINT, _I64, _LEN, _I32 = 0, 1, 2, 5


class MalformedTrace(ValueError):
    pass


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value, shift = 0, 0
    while True:
        if pos >= len(data) or shift > 63:
            raise MalformedTrace("truncated varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of one message: ints for varints, bytes for the rest."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == _LEN:
            size, pos = _varint(data, pos)
            if pos + size > len(data):
                raise MalformedTrace("truncated field")
            yield number, data[pos : pos + size]
            pos += size
        elif wire in (_I64, _I32):
            width = 8 if wire == _I64 else 4
            yield number, data[pos : pos + width]
            pos += width
        else:
            raise MalformedTrace(f"wire type {wire}")


def _seconds(timestamp: bytes) -> float:
    parts = {n: v for n, v in fields(timestamp) if isinstance(v, int)}
    return parts.get(1, 0) + parts.get(2, 0) / 1e9


@dataclass
class _Vertex:
    number: int
    name: str = ""
    started: float | None = None
    announced: bool = False
    finished: bool = False


@dataclass
class BuildProgress:
    """Turns trace messages into lines; keeps the step numbers of one build."""

    vertices: dict[str, _Vertex] = field(default_factory=dict)
    _partial: dict[str, str] = field(default_factory=dict)

    def _vertex(self, digest: str) -> _Vertex:
        if digest not in self.vertices:
            self.vertices[digest] = _Vertex(number=len(self.vertices) + 1)
        return self.vertices[digest]

    def lines(self, aux: str) -> list[str]:
        """The progress lines of one `moby.buildkit.trace` message (base64 protobuf)."""
        try:
            raw = base64.b64decode(aux, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise MalformedTrace(f"not base64: {exc}") from None
        out: list[str] = []
        for number, value in fields(raw):
            if not isinstance(value, bytes):
                continue
            if number == 1:
                out += self._on_vertex(value)
            elif number == 3:
                out += self._on_log(value)
        return out

    def _on_vertex(self, data: bytes) -> list[str]:
        got: dict[int, int | bytes] = dict(fields(data))
        digest = _text(got.get(1))
        if not digest:
            return []
        v = self._vertex(digest)
        v.name = _text(got.get(3)) or v.name
        cached, started, completed = got.get(4), got.get(5), got.get(6)
        out: list[str] = []
        if not v.announced and (started is not None or cached):
            v.announced = True
            out.append(f"#{v.number} {v.name}")
        if isinstance(started, bytes):
            v.started = _seconds(started)
        if v.finished:
            return out
        if got.get(7):
            v.finished = True
            out.append(f"#{v.number} ERROR: {_text(got.get(7))}")
        elif cached:
            v.finished = True
            out.append(f"#{v.number} CACHED")
        elif isinstance(completed, bytes):
            v.finished = True
            took = f" {_seconds(completed) - v.started:.1f}s" if v.started is not None else ""
            out.append(f"#{v.number} DONE{took}")
        return out

    def _on_log(self, data: bytes) -> list[str]:
        got: dict[int, int | bytes] = dict(fields(data))
        digest = _text(got.get(1))
        msg = got.get(4)
        if not digest or not isinstance(msg, bytes):
            return []
        v = self._vertex(digest)
        text = self._partial.pop(digest, "") + msg.decode(errors="replace")
        *complete, rest = text.split("\n")
        if rest:
            self._partial[digest] = rest
        return [f"#{v.number} {line.rstrip(chr(13))}" for line in complete]


def _text(value: int | bytes | None) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else ""
