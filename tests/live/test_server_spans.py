"""The server's trace spans, without a socket: the traceparent every request carries, an
OTLP export built with opentelemetry-proto's own classes decoded into spans, the receiver's
bounds (malformed, huge, foreign, duplicate: dropped and counted), and the join to
samples.jsonl's requests by trace id, per cell."""

from __future__ import annotations

import json
import math
import re
import threading
import time
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from bench.live import server_span, span_decode, span_join, span_receiver
from bench.live.server_span import ServerSpan
from bench.results import Results
from bench.stream import traceparent
from bench.stream.records import RequestRecord
from bench.stream.traceparent import SentTraces

HEADER = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-01$")


def _kv(key: str, value: float | int | str) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=value))


def _span(trace_id: str, **attrs: float | int | str) -> Span:
    """A span as vLLM's output processor makes one (bench.live.server_span)."""
    values: dict[str, float | int | str] = {
        server_span.QUEUE: 0.002, server_span.TTFT: 0.030, server_span.E2E: 0.5,
        server_span.PROMPT_TOKENS: 64, server_span.COMPLETION_TOKENS: 96,
        server_span.REQUEST_ID: "chatcmpl-1",
    }  # fmt: skip
    values.update(attrs)
    return Span(
        trace_id=bytes.fromhex(trace_id), span_id=bytes.fromhex("11" * 8),
        parent_span_id=bytes.fromhex("22" * 8), name="llm_request", kind=Span.SPAN_KIND_SERVER,
        start_time_unix_nano=1_700_000_000_000_000_000,
        end_time_unix_nano=1_700_000_000_500_000_000,
        attributes=[_kv(k, v) for k, v in values.items()],
    )  # fmt: skip


def _body(*spans: Span) -> bytes:
    request = ExportTraceServiceRequest()
    rs = request.resource_spans.add()
    rs.resource.attributes.append(_kv("service.name", "vllm"))
    rs.scope_spans.add().spans.extend(spans)
    data: bytes = request.SerializeToString()
    return data


# -- the traceparent -----------------------------------------------------------------------


def test_every_request_gets_a_w3c_traceparent_with_a_new_trace_id() -> None:
    sent = SentTraces()
    ids = [sent.draw() for _ in range(2000)]
    assert len(set(ids)) == len(ids)
    for trace_id in ids[:50]:
        m = HEADER.match(traceparent.header(trace_id))
        assert m is not None and m.group(1) == trace_id and m.group(2) != "0" * 16
    assert len(sent) == 0  # not listening: nothing remembered


def test_sent_traces_remembers_while_listening_and_only_up_to_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(traceparent, "MAX_REMEMBERED", 3)
    sent = SentTraces(remember=True)
    ids = [sent.draw() for _ in range(5)]
    assert [t in sent for t in ids] == [True, True, True, False, False]
    assert sent.forgotten == 2


def test_samples_jsonl_carries_the_trace_id_and_an_older_line_still_joins() -> None:
    record = RequestRecord(worker=0, start_s=1.0, trace_id="ab" * 16)
    assert record.to_json(0.0)["trace_id"] == "ab" * 16
    assert RequestRecord(worker=0, start_s=1.0).to_json(0.0)["trace_id"] is None


# -- decoding ------------------------------------------------------------------------------


def test_a_vllm_span_decodes_with_its_latencies_as_seconds() -> None:
    trace_id = traceparent.new_trace_id()
    got = span_decode.decode(_body(_span(trace_id)))
    assert got.dropped == 0 and len(got.spans) == 1
    s = got.spans[0]
    assert (s.trace_id, s.span_id, s.parent_span_id, s.name) == (
        trace_id, "11" * 8, "22" * 8, "llm_request"
    )  # fmt: skip
    assert (s.queue_s, s.ttft_s, s.e2e_s) == (0.002, 0.030, 0.5)
    assert (s.prompt_tokens, s.completion_tokens, s.request_id) == (64, 96, "chatcmpl-1")
    assert s.end_unix_ns - s.start_unix_ns == 500_000_000
    assert server_span.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_values_out_of_range_are_none_and_text_is_cut() -> None:
    bad: dict[str, float | int | str] = {
        server_span.TTFT: math.nan, server_span.QUEUE: -1.0, server_span.E2E: "fast",
        server_span.PROMPT_TOKENS: 2.5, server_span.REQUEST_ID: "x" * 10_000,
    }  # fmt: skip
    span = _span(traceparent.new_trace_id(), **bad)
    s = span_decode.decode(_body(span)).spans[0]
    assert (s.ttft_s, s.queue_s, s.e2e_s, s.prompt_tokens) == (None, None, None, None)
    assert s.request_id == "x" * server_span.MAX_TEXT


def test_malformed_and_oversized_spans_are_dropped_and_counted() -> None:
    good = _span(traceparent.new_trace_id())
    short_id = _span("ab" * 16)
    short_id.trace_id = b"\x01" * 8
    zero_id = _span("00" * 16)
    bad_parent = _span(traceparent.new_trace_id())
    bad_parent.parent_span_id = b"\x01" * 3
    huge = _span(traceparent.new_trace_id())
    huge.attributes.extend(_kv(f"k{i}", i) for i in range(span_decode.MAX_ATTRIBUTES))
    got = span_decode.decode(_body(good, short_id, zero_id, bad_parent, huge))
    assert len(got.spans) == 1 and got.malformed == 3 and got.oversized == 1


def test_spans_past_the_per_body_cap_are_not_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(span_decode, "MAX_SPANS_PER_BODY", 3)
    got = span_decode.decode(_body(*(_span(traceparent.new_trace_id()) for _ in range(5))))
    assert len(got.spans) == 3 and got.over_cap == 2


@pytest.mark.parametrize("body", [b"\xff\xff\xff\xff", b"\x0a\x05abc", b"\x0a" + b"\xff" * 12])
def test_a_body_that_is_not_protobuf_is_malformed(body: bytes) -> None:
    with pytest.raises(span_decode.MalformedBody):
        span_decode.decode(body)


def test_the_answer_says_how_many_spans_were_rejected() -> None:
    answer = ExportTraceServiceResponse.FromString(span_decode.response(3, "unknown trace ids"))
    assert answer.partial_success.rejected_spans == 3
    assert ExportTraceServiceResponse.FromString(span_decode.response(0, "")).ByteSize() == 0


# -- the receiver's bounds (no socket: `listen` is not called) -----------------------------


def test_the_receiver_keeps_the_runs_spans_and_drops_foreign_and_duplicates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(span_receiver, "MAX_SPANS_PER_TRACE", 1)
    sent = SentTraces(remember=True)
    rx = span_receiver.SpanReceiver(sent)
    ours = [sent.draw() for _ in range(3)]
    foreign = traceparent.new_trace_id()
    early = span_decode.decode(_body(_span(ours[0]), _span(foreign)))
    assert rx.take(early) == (1, "malformed, oversized, duplicate or unknown trace ids")
    rx.write_to(tmp_path)  # the line that came before the directory is written now
    rx.take(span_decode.decode(_body(_span(ours[1]), _span(ours[1]), _span(ours[2]))))
    lines = (tmp_path / "server_spans.jsonl").read_text().splitlines()
    assert [json.loads(x)["trace_id"] for x in lines] == ours
    counts = rx.close()
    assert counts.kept == 3 and counts.exports == 2
    assert counts.dropped == {"unknown_trace": 1, "duplicate": 1}
    rx.take(span_decode.decode(_body(_span(ours[0]))))  # after the run
    assert rx.counts.dropped["late"] == 1


def test_the_receiver_stops_keeping_at_the_runs_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(span_receiver, "MAX_SPANS_PER_RUN", 2)
    sent = SentTraces(remember=True)
    rx = span_receiver.SpanReceiver(sent)
    rx.write_to(tmp_path)
    rx.take(span_decode.decode(_body(*(_span(sent.draw()) for _ in range(4)))))
    assert rx.close().kept == 2 and rx.counts.dropped == {"over_cap": 2}
    assert len((tmp_path / "server_spans.jsonl").read_text().splitlines()) == 2


def test_a_gzip_bomb_is_not_inflated_past_the_size_cap() -> None:
    import gzip

    bomb = gzip.compress(b"\0" * (span_receiver.MAX_BODY_BYTES + 1))
    assert len(bomb) < 100_000
    assert span_receiver._inflate(bomb) is None
    assert span_receiver._inflate(b"not gzip") is None
    assert span_receiver._inflate(gzip.compress(b"abc")) == b"abc"


def test_waiting_for_late_spans_ends_when_they_are_all_there_or_at_its_bound() -> None:
    sent = SentTraces(remember=True)
    rx = span_receiver.SpanReceiver(sent)
    ids = {sent.draw() for _ in range(2)}
    started = time.monotonic()
    rx.wait_for(ids, 0.3)
    assert 0.25 <= time.monotonic() - started < 2.0
    late = threading.Timer(0.2, rx.take, [span_decode.decode(_body(*map(_span, ids)))])
    late.start()
    started = time.monotonic()
    rx.wait_for(ids, 30.0)
    assert time.monotonic() - started < 5.0
    assert rx.with_span(ids) == ids
    late.join()


# -- the join ------------------------------------------------------------------------------


def _line(phase: str, context: str, c: int, trace_id: str | None, *, ttft: float = 0.05,
          finished: bool = True, error: str | None = None) -> str:  # fmt: skip
    return json.dumps({
        "phase": phase, "context": context, "concurrency": c, "trial": 0, "worker": 0,
        "start_s": 1.0, "sent_s": 1.001, "first_token_s": 1.001 + ttft, "end_s": 2.0,
        "finished": finished, "cancelled": not finished, "error": error,
        **({} if trace_id is None else {"trace_id": trace_id}),
    })  # fmt: skip


def _kept(trace_id: str, ttft: float, queue: float) -> str:
    span = ServerSpan(trace_id, "11" * 8, None, "llm_request", 1, 2, queue_s=queue,
                      ttft_s=ttft, e2e_s=0.9)  # fmt: skip
    return json.dumps(span.to_json())


def test_spans_join_their_requests_by_trace_id_per_cell(tmp_path: Path) -> None:
    a, b, c, cut, never = (traceparent.new_trace_id() for _ in range(5))
    samples = tmp_path / "samples.jsonl"
    samples.write_text("\n".join([
        _line("decode", "8K", 2, a, ttft=0.05),
        _line("decode", "8K", 2, b, ttft=0.07),
        _line("decode", "8K", 2, cut, finished=False),  # cancelled at the window's end
        _line("decode", "16K", 1, c, ttft=0.20),
        _line("decode", "16K", 1, never),  # its span never came
        _line("decode", "16K", 1, None),  # an older line: no trace id
        '{"torn',
    ]) + "\n")  # fmt: skip
    spans = tmp_path / "server_spans.jsonl"
    spans.write_text("\n".join([
        _kept(a, 0.04, 0.001), _kept(b, 0.08, 0.003), _kept(c, 0.15, 0.010),
        '{"trace_id": "zz"}', "not json",
    ]) + "\n")  # fmt: skip
    joined = span_join.join(
        span_join.read_requests(samples), span_join.read_spans(spans),
        endpoint="http://127.0.0.1:4318/v1/traces", kept=3, dropped={"unknown_trace": 2},
    )  # fmt: skip
    assert (joined.completed, joined.joined, joined.kept) == (4, 3, 3)
    eight, sixteen = joined.cells
    assert (eight.context, eight.completed, eight.joined) == ("8K", 2, 2)
    assert eight.server_ttft_s == pytest.approx(0.06) and eight.queue_s == pytest.approx(0.002)
    assert eight.client_ttft_s == pytest.approx(0.06) and eight.server_ttft_larger == 1
    assert (sixteen.context, sixteen.completed, sixteen.joined) == ("16K", 2, 1)
    assert sixteen.server_ttft_s == pytest.approx(0.15)
    assert sixteen.client_ttft_s == pytest.approx(0.20) and sixteen.server_e2e_s == 0.9
    assert joined.note == (
        "server spans: 3 of 4 completed requests (75.0%) joined to the server's span; 3 kept; "
        "dropped: unknown_trace 2"
    )


def test_a_run_without_spans_says_how_to_get_them_once(tmp_path: Path) -> None:
    samples = tmp_path / "samples.jsonl"
    samples.write_text(_line("workload", "0", 1, traceparent.new_trace_id()) + "\n")
    joined = span_join.join(
        span_join.read_requests(samples), span_join.read_spans(tmp_path / "none.jsonl"),
        endpoint="http://127.0.0.1:4318/v1/traces", kept=0, dropped={},
    )  # fmt: skip
    assert joined.note == (
        "the server exported no spans (start vLLM with --otlp-traces-endpoint "
        "http://127.0.0.1:4318/v1/traces to see its own timings)"
    )
    assert joined.cells[0].joined == 0 and joined.cells[0].server_ttft_s is None
    assert Results.model_fields["server_spans"].default is None


def test_the_reports_server_view_escapes_what_it_shows() -> None:
    from bench.report.server_view import server_view_section
    from bench.results import ServerSpans, ServerTimings

    hostile = "<script>alert(1)</script>"
    spans = ServerSpans(
        endpoint="http://127.0.0.1:1/v1/traces", kept=1, joined=1, completed=1,
        note=hostile,
        cells=(ServerTimings(phase="decode", context=hostile, concurrency=2, completed=1,
                             joined=1, queue_s=0.001, server_ttft_s=0.02,
                             client_ttft_s=0.025),),
    )  # fmt: skip
    page = server_view_section(spans, speed=10.0)
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert "<td>200.0</td>" in page and "<td>250.0</td>" in page  # at server speed
    assert server_view_section(None, 1.0) == ""
