"""bench.live without sockets: a finished record in the GenAI semantic conventions' terms,
the scope a request carries (also from a task that ends after its cell), the flags."""

from __future__ import annotations

import argparse
import asyncio
import math
from array import array

import pytest

from bench.errors import UsageError
from bench.failures import ErrorKind
from bench.live import flags, semconv
from bench.live.observer import SETUP, LiveMetrics, LiveRun, LiveScope
from bench.run.progress import SweepProgress
from bench.stream.records import RequestRecord

RUN = LiveRun(
    run_id="r1", model="m", provider="vllm", api="chat", server_address="127.0.0.1",
    server_port=8000, units_total=3,
)  # fmt: skip


def _record(**kw: object) -> RequestRecord:
    r = RequestRecord(worker=0, start_s=10.0, sent_s=10.5, first_token_s=11.0, end_s=14.25,
                      prompt_tokens=100, finished=True)  # fmt: skip
    r.chunk_s = array("d", [11.0, 12.0, 14.0])
    r.chunk_tokens = array("q", [1, 3, 7])
    for k, v in kw.items():
        setattr(r, k, v)
    return r


def test_a_completed_request_has_its_figures_from_the_written_request() -> None:
    got = semconv.finished(_record())
    assert got.outcome == "completed" and got.error_type is None
    assert got.duration_s == pytest.approx(3.75)  # written (10.5) to stream end (14.25)
    assert got.first_chunk_s == pytest.approx(0.5)
    assert got.per_chunk_s == pytest.approx(1.5)  # (14 - 11) / 2 gaps
    assert (got.input_tokens, got.output_tokens) == (100, 7)


def test_without_a_sent_stamp_the_request_counts_from_its_start() -> None:
    got = semconv.finished(_record(sent_s=None))
    assert got.duration_s == pytest.approx(4.25) and got.first_chunk_s == pytest.approx(1.0)


def test_failed_and_cancelled_requests_name_their_error_type() -> None:
    failed = _record(finished=False)
    failed.fail(ErrorKind.HTTP_STATUS, "HTTP 500: boom")
    got = semconv.finished(failed)
    assert (got.outcome, got.error_type) == ("failed", "http_status")
    cancelled = semconv.finished(_record(finished=False, cancelled=True))
    assert (cancelled.outcome, cancelled.error_type) == ("cancelled", "cancelled")
    unfinished = semconv.finished(_record(finished=False))
    assert (unfinished.outcome, unfinished.error_type) == ("failed", "no_done")


def test_one_chunk_has_no_time_per_chunk_and_unstarted_has_no_duration() -> None:
    r = _record(end_s=None, first_token_s=None)
    r.chunk_s, r.chunk_tokens = array("d", [11.0]), array("q", [1])
    got = semconv.finished(r)
    assert got.per_chunk_s is None and got.duration_s is None and got.first_chunk_s is None


def test_text_kept_for_a_tokenizer_records_no_output_tokens() -> None:
    got = semconv.finished(_record(texts=[(11.0, "hello")]))
    assert got.output_tokens is None and got.input_tokens == 100


def test_attributes_carry_the_conventions_names_and_the_runs_own() -> None:
    got = semconv.finished(_record())
    attrs = semconv.attributes(RUN, LiveScope("cell", 1, cell="8K:4"), got)
    assert attrs == {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "vllm",
        "gen_ai.request.model": "m", "server.address": "127.0.0.1", "server.port": 8000,
        "bench.run.id": "r1", "bench.phase": "cell", "bench.outcome": "completed",
        "bench.trial": 1, "bench.cell": "8K:4",
    }  # fmt: skip
    completions = LiveRun(**{**RUN.__dict__, "api": "completions"})
    failed = _record(finished=False)
    failed.fail(ErrorKind.TIMEOUT, "read time-out")
    point = semconv.attributes(
        completions, LiveScope("point", 0, point=2), semconv.finished(failed)
    )
    assert point["gen_ai.operation.name"] == "text_completion"
    assert point["bench.point"] == 2 and "bench.cell" not in point
    assert point["error.type"] == "timeout" and point["bench.outcome"] == "failed"
    setup = semconv.attributes(RUN, SETUP, got)
    assert "bench.trial" not in setup and setup["bench.phase"] == "setup"
    assert semconv.token_attributes(setup, "input")["gen_ai.token.type"] == "input"


def test_bucket_boundaries_rise() -> None:
    for buckets in (semconv.DURATION_BUCKETS, semconv.TOKEN_BUCKETS,
                    semconv.FIRST_CHUNK_BUCKETS, semconv.PER_CHUNK_BUCKETS):  # fmt: skip
        assert list(buckets) == sorted(set(buckets))
    assert semconv.TOKEN_BUCKETS[0] == 1 and semconv.TOKEN_BUCKETS[-1] == 4**13


class _Sink:
    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def run_started(self, run: LiveRun) -> None:
        self.events.append(("run", run.run_id))

    def unit_started(self, scope: LiveScope) -> None:
        self.events.append(("start", scope))

    def unit_finished(self, scope: LiveScope, status: str) -> None:
        self.events.append(("done", (scope, status)))

    def request_finished(self, record: RequestRecord, scope: LiveScope) -> None:
        self.events.append(("request", (record.worker, scope)))

    def close(self) -> None:
        self.events.append(("close", None))


def test_a_request_carries_the_scope_its_task_started_in_even_after_the_unit() -> None:
    sink = _Sink()
    live = LiveMetrics((sink,))
    cell = LiveScope("cell", 0, cell="256:2")
    release = asyncio.Event()

    async def worker(i: int) -> None:
        await release.wait()
        live.request_finished(RequestRecord(worker=i, start_s=0.0))

    async def main() -> None:
        with live.unit(cell):
            late = asyncio.create_task(worker(1))
            live.request_finished(RequestRecord(worker=0, start_s=0.0))
        live.request_finished(RequestRecord(worker=2, start_s=0.0))  # after the unit: setup
        release.set()
        await late  # finished after the unit ended: still the cell's
        live.unit_finished(cell, "valid")

    asyncio.run(main())
    requests = [e[1] for e in sink.events if e[0] == "request"]
    assert requests == [(0, cell), (2, SETUP), (1, cell)]
    assert sink.events[0] == ("start", cell) and sink.events[-1] == ("done", (cell, "valid"))


def test_a_phase_sets_the_scope_without_counting_a_unit() -> None:
    sink = _Sink()
    live = LiveMetrics((sink,))
    scout = LiveScope("scout", 0, cell="8K")
    with live.phase(scout):
        live.request_finished(RequestRecord(worker=0, start_s=0.0))
    assert sink.events == [("request", (0, scout))]


def test_no_sink_is_false_and_does_nothing() -> None:
    live = LiveMetrics()
    assert not live
    live.request_finished(RequestRecord(worker=0, start_s=0.0))
    live.close()


def _args(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    flags.add_arguments(p)
    return p.parse_args(argv)


def test_the_otel_url_gets_the_metrics_path_only_when_it_has_none() -> None:
    assert flags.otlp_endpoint("http://127.0.0.1:4318") == "http://127.0.0.1:4318/v1/metrics"
    assert flags.otlp_endpoint("http://c:4318/") == "http://c:4318/v1/metrics"
    assert flags.otlp_endpoint("https://c/otlp/v1/metrics") == "https://c/otlp/v1/metrics"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--otel-url", "ftp://x"], "is not an http(s):// URL"),
        (["--otel-url", "http://u:p@x:4318"], "no user:password@"),
        (["--otel-url", "http://x", "--otel-interval", "nan"], "--otel-interval nan"),
        (["--otel-url", "http://x", "--otel-interval", "0"], "--otel-interval 0"),
        (["--metrics-port", "70000"], "--metrics-port 70000 is not a TCP port"),
        (["--metrics-port", "0"], "--metrics-port 0 is not a TCP port"),
    ],
)
def test_bad_flags_are_refused_by_name(argv: list[str], words: str) -> None:
    with pytest.raises(UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
        flags.open_live(_args(*argv))


def test_no_flag_opens_nothing() -> None:
    live = flags.open_live(_args())
    assert not live and live.sinks == ()
    assert _args().metrics_host == "0.0.0.0"  # an exporter's usual address


def test_the_eta_is_the_estimate_less_the_time_elapsed_never_below_zero() -> None:
    now = [100.0]
    progress = SweepProgress(lambda: now[0], total_cells=2, estimated_s=30.0, tty=False)
    now[0] = 110.0
    assert progress.elapsed_s() == 10.0 and progress.eta_s() == 20.0
    now[0] = 200.0
    assert progress.eta_s() == 0.0 and math.isfinite(progress.elapsed_s())
