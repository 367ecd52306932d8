"""A cell's failed requests counted by kind (results.json `failures_by_kind`), the scout's
rule on a usage-only stream, and samples.jsonl's `error_kind` beside `error`."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pydantic
import pytest

from bench.failures import ErrorKind, RequestError, count_by_kind
from bench.results import CellResult, KvCapacity, Plan, Results, RunSettings, ServerInfo
from bench.run import outcome
from bench.run.cell import CellRun
from bench.stream.records import RequestRecord

PUBLISHED = Path(__file__).parents[2] / "docs" / "results.schema.json"


def _record(worker: int, kind: ErrorKind | None = None, message: str = "") -> RequestRecord:
    record = RequestRecord(worker=worker, start_s=1.0, end_s=2.0)
    if kind is not None:
        record.fail(kind, message)
    return record


def _results(*cells: CellResult) -> Results:
    return Results(
        bench_version="0.1.0",
        run_id="r1",
        created_at="2026-01-01T00:00:00Z",
        settings=RunSettings(
            url="http://x", contexts=(256,), concurrencies=(3,), duration_s=1, max_tokens=16
        ),
        server=ServerInfo(url="http://x", model="m", max_model_len=4096),
        plan=Plan(
            contexts=(),
            cells=(),
            kv=KvCapacity(tokens=None, source="unknown", detail="-"),
            estimated_duration_s=1.0,
        ),
        cells=cells,
    )


def test_kinds_are_counted_in_the_enums_order_and_absent_kinds_are_left_out() -> None:
    errors = [
        RequestError(ErrorKind.TRANSPORT, "transport error: reset"),
        None,
        RequestError(ErrorKind.HTTP_STATUS, "HTTP 500: x"),
        RequestError(ErrorKind.TRANSPORT, "transport error: closed"),
    ]
    counts = count_by_kind(errors)
    assert counts == {ErrorKind.HTTP_STATUS: 1, ErrorKind.TRANSPORT: 2}
    assert list(counts) == [ErrorKind.HTTP_STATUS, ErrorKind.TRANSPORT]
    assert count_by_kind([None, None]) == {}


def test_an_invalid_cell_counts_every_failed_request_by_kind_and_keeps_the_first_as_reason() -> (
    None
):
    run = CellRun(concurrency=3, t0_s=0.0)
    run.records += [
        _record(0, ErrorKind.HTTP_STATUS, "HTTP 500: boom"),
        _record(1),
        _record(2, ErrorKind.TRANSPORT, "transport error: connection closed by the server"),
        _record(0, ErrorKind.HTTP_STATUS, "HTTP 503: later"),
    ]
    cell = outcome.cell_result(run, "256", 256, 0, started_at_s=0.5)
    assert cell.status == "invalid"
    assert cell.reason == "3 request(s) failed, first: HTTP 500: boom"
    assert cell.failures_by_kind == {ErrorKind.HTTP_STATUS: 2, ErrorKind.TRANSPORT: 1}


def test_a_cell_without_failures_counts_none() -> None:
    run = CellRun(concurrency=1, t0_s=0.0, records=[_record(0)])
    cell = outcome.cell_result(run, "256", 256, 0, started_at_s=0.5)
    assert cell.status == "invalid" and cell.reason == "no window"  # never got a window
    assert cell.failures_by_kind == {}


def test_failures_by_kind_round_trips_and_validates_against_the_published_schema() -> None:
    run = CellRun(concurrency=2, t0_s=0.0)
    run.records += [
        _record(0, ErrorKind.STALLED, "read time-out: no token for 1 s"),
        _record(1, ErrorKind.TIMEOUT, "read time-out after 1 s"),
    ]
    cell = outcome.cell_result(run, "256", 256, 0, started_at_s=0.5)
    results = _results(cell)
    doc = json.loads(results.model_dump_json())
    assert doc["cells"][0]["failures_by_kind"] == {"timeout": 1, "stalled": 1}
    assert Results.model_validate(doc) == results
    validator = jsonschema.Draft202012Validator(json.loads(PUBLISHED.read_text()))
    assert list(validator.iter_errors(doc)) == []
    # A kind nobody defined is refused by the models and by the published schema alike.
    doc["cells"][0]["failures_by_kind"] = {"gremlins": 1}
    assert list(validator.iter_errors(doc))
    with pytest.raises(pydantic.ValidationError):
        Results.model_validate(doc)


def test_results_written_before_the_field_existed_read_as_no_failures_counted() -> None:
    doc = json.loads(_results(CellResult(context_label="256", prompt_tokens=256, concurrency=1,
                                         status="invalid", reason="1 request(s) failed, first: x"))
                     .model_dump_json())  # fmt: skip
    del doc["cells"][0]["failures_by_kind"]
    (cell,) = Results.model_validate(doc).cells
    assert cell.failures_by_kind == {}


def test_the_scout_takes_a_usage_only_stream_but_no_other_failure() -> None:
    usage_only = _record(0, ErrorKind.USAGE_ONLY, "usage-only stream: tokens counted but no text")
    usage_only.sent_s = 1.0
    usage_only.prompt_tokens = 500
    usage_only.add_usage(1.5, 1)
    sample = outcome.scout_sample(usage_only, "256", 0, 256)
    assert sample.status == "valid" and sample.ttft_s == 0.5 and sample.prefill_tok_s == 1000

    # The same stream failing any other way is no prefill measurement: its message says why.
    for kind in set(ErrorKind) - {ErrorKind.USAGE_ONLY}:
        failed = _record(0, kind, f"{kind.value}: why")
        failed.sent_s, failed.prompt_tokens = 1.0, 500
        failed.add_usage(1.5, 1)
        sample = outcome.scout_sample(failed, "256", 0, 256)
        assert sample.status == "invalid" and sample.reason == f"{kind.value}: why", kind


def test_a_samples_line_gives_the_error_text_and_its_kind_beside_it() -> None:
    failed = _record(3, ErrorKind.NOT_EVENT_STREAM, "transport error: the response is 'text/html'")
    line = outcome.sample_line(
        "decode", "256", 4, 0, failed, origin_s=1.0, anchor_s=0.0, anchor_unix_s=1000.0
    )
    assert line["error"] == "transport error: the response is 'text/html'"
    assert line["error_kind"] == "not_event_stream"
    assert line["origin_unix_s"] == 1001.0 and line["worker"] == 3
    ok = outcome.sample_line(
        "decode", "256", 4, 0, _record(0), origin_s=1.0, anchor_s=0.0, anchor_unix_s=1000.0
    )
    assert ok["error"] is None and ok["error_kind"] is None


def test_a_server_claiming_more_than_max_tokens_is_named_before_a_stall_read_from_its_counts() -> (
    None
):
    """A window with a stall at its end (no token in its last 27 s) from a server whose usage
    claims 48 tokens for a request of max_tokens 16: its counts are not to be believed, so
    the cell's reason is the claim, not the stall read from them (fresh35: the hostile
    over-max stream, starved 0.6 s at its 5 s window's end, was called stalled)."""
    record = RequestRecord(worker=0, start_s=4.0, first_token_s=5.0)
    for i in range(48):
        record.add_usage(5.0 + 0.1 * i, i + 1)  # 5.0 .. 9.7 s, then nothing
    record.finished, record.end_s = True, 9.7
    run = CellRun(concurrency=1, t0_s=0.0, records=[record], w0_s=5.5, w1_s=40.0)
    cell = outcome.cell_result(run, "256", 256, 0, started_at_s=0.5, max_tokens=16)
    assert cell.status == "invalid"
    assert cell.reason == (
        "the server claimed 48 output tokens for one request, more than its max_tokens 16"
    )
    # Within max_tokens, the same window is the stall it is.
    cell = outcome.cell_result(run, "256", 256, 0, started_at_s=0.5, max_tokens=64)
    assert cell.status == "invalid" and (cell.reason or "").startswith("server stalled")
