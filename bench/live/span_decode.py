"""An OTLP/HTTP trace export's body (protobuf `ExportTraceServiceRequest`) as ServerSpans.

The one module of `bench run` that imports opentelemetry-proto (the `live` extra). The
body is hostile until decoded: protobuf's own parser (upb) reads it, bounded by the
receiver's size cap (bench.live.span_receiver) and protobuf's nesting limit; then

    a body protobuf cannot parse        MalformedBody (the receiver answers 400)
    spans past MAX_SPANS_PER_BODY       not read, counted `over_cap`
    a span with more than MAX_ATTRIBUTES attributes
                                        dropped, counted `oversized`
    a span without a 16-byte trace id, an 8-byte span id, or with a parent id of another
    length, or a start or end time past 2^63 - 1 ns
                                        dropped, counted `malformed`
    an attribute value out of range     that field is None (bench.live.server_span)

Only vLLM's attributes are read (bench.live.server_span names them); every other one is
ignored, whatever it holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from bench.live import server_span
from bench.live.server_span import ServerSpan

MAX_SPANS_PER_BODY = 10_000
MAX_ATTRIBUTES = 128


class MalformedBody(ValueError):
    """The body is not an ExportTraceServiceRequest."""


@dataclass
class Decoded:
    spans: list[ServerSpan] = field(default_factory=list)
    malformed: int = 0  # spans without valid ids or times
    oversized: int = 0  # spans with more than MAX_ATTRIBUTES attributes
    over_cap: int = 0  # spans past MAX_SPANS_PER_BODY

    @property
    def dropped(self) -> int:
        return self.malformed + self.oversized + self.over_cap


def decode(body: bytes) -> Decoded:
    """The spans of one export, each checked (module docstring); MalformedBody if the body
    does not parse."""
    request = ExportTraceServiceRequest()
    try:
        request.ParseFromString(body)
    except (DecodeError, RecursionError, ValueError) as exc:
        raise MalformedBody(" ".join(str(exc).split())[:200] or "not protobuf") from None
    out = Decoded()
    seen = 0
    for resource_spans in request.resource_spans:
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                seen += 1
                if seen > MAX_SPANS_PER_BODY:
                    out.over_cap += 1
                    continue
                _one(span, out)
    return out


def response(rejected: int, message: str) -> bytes:
    """What a collector answers: an ExportTraceServiceResponse, its partial_success set
    when spans were dropped."""
    answer = ExportTraceServiceResponse()
    if rejected:
        answer.partial_success.rejected_spans = rejected
        answer.partial_success.error_message = message[:300]
    data: bytes = answer.SerializeToString()
    return data


def _one(span: Span, out: Decoded) -> None:
    if len(span.attributes) > MAX_ATTRIBUTES:
        out.oversized += 1
        return
    trace_id, span_id, parent = span.trace_id, span.span_id, span.parent_span_id
    if len(trace_id) != 16 or not any(trace_id) or len(span_id) != 8 or len(parent) not in (0, 8):
        out.malformed += 1
        return
    start, end = span.start_time_unix_nano, span.end_time_unix_nano
    if start > server_span.UNIX_NS_MAX or end > server_span.UNIX_NS_MAX:
        out.malformed += 1
        return
    values: dict[str, Any] = {}
    for a in span.attributes:
        key = a.key
        if key in server_span.SECONDS:
            values[server_span.SECONDS[key]] = server_span.seconds(_value(a.value))
        elif key in server_span.TOKENS:
            values[server_span.TOKENS[key]] = server_span.tokens(_value(a.value))
        elif key == server_span.REQUEST_ID:
            values["request_id"] = server_span.text(_value(a.value))
    out.spans.append(
        ServerSpan(
            trace_id=trace_id.hex(),
            span_id=span_id.hex(),
            parent_span_id=parent.hex() if parent and any(parent) else None,
            name=span.name[: server_span.MAX_NAME],
            start_unix_ns=start,
            end_unix_ns=end,
            **values,
        )
    )


def _value(v: AnyValue) -> object:
    kind = v.WhichOneof("value")
    if kind == "double_value":
        return v.double_value
    if kind == "int_value":
        return v.int_value
    if kind == "string_value":
        return v.string_value
    return None  # bool, bytes, arrays, maps: no vLLM attribute is one
