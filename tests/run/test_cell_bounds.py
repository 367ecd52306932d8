"""Every wait of a cell is bounded (docs/faults.md, "Bounds"): a server that stops
answering at any await point ends the cell `invalid` within its stated bound, with a
reason naming what it waited for, and the sweep goes on to the next cell.

On a virtual-time loop against tests.support.simserver: exact instants, no sockets."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import pytest

from bench.run.cell import (
    CELL_SLACK_S,
    SCRAPE_BOUND_S,
    WORKER_STOP_S,
    CellRun,
    CellTiming,
    ServerView,
    run_cell,
)
from bench.run.prompts import request_body
from bench.run.sweep import _READY_BASE_S, _READY_PREFILL_TOK_S, TOKENIZE_AFTER_CELL_S
from bench.stream import metrics
from bench.stream.client import Client
from bench.stream.records import RequestRecord
from bench.stream.tokens import Counting
from tests.run.test_sweep_timing import _results, _run, _sweep
from tests.support import virtual
from tests.support.simserver import SimServer

TIMING = CellTiming(
    window_s=2.0, hold_s=0.5, ready_timeout_s=20.0, drain_timeout_s=10.0, sample_every_s=0.5
)
BODY = request_body("chat", "m", "hello", 400)
# Far beyond any bound: a cell still running then is the hang these tests exist for.
GUARD_S = 100_000.0


def _cell(
    sim: SimServer, client_type: type[Client] = Client, timing: CellTiming = TIMING
) -> tuple[CellRun, float]:
    """One cell of 2 workers; (what it produced, how long it took in virtual seconds)."""

    async def go() -> tuple[CellRun, float]:
        client = client_type(
            "http://sim", clock=virtual.clock, transport=sim.transport(), read_timeout_s=5.0
        )
        server = ServerView(client, virtual.clock, asyncio.sleep, has_metrics=True)
        t0 = virtual.clock()
        try:
            async with asyncio.timeout(GUARD_S):
                run = await run_cell(server, "/v1/chat/completions", BODY, 2, timing)
            return run, virtual.clock() - t0
        finally:
            await client.aclose()

    return virtual.run(go())


def test_an_answering_server_gives_a_whole_cell() -> None:
    run, _ = _cell(SimServer())
    assert run.stopped is None and run.ready_after_s is not None
    assert run.w0_s is not None and run.w1_s is not None
    assert run.w1_s - run.w0_s == pytest.approx(TIMING.window_s)


@pytest.mark.parametrize(
    ("nth", "during"),
    [
        (1, "the drain barrier"),
        (2, "the launch"),
        (4, "the readiness gate"),
        (15, "the window"),
    ],
)
def test_a_metrics_request_that_never_answers_ends_the_cell_within_its_bound(
    nth: int, during: str
) -> None:
    sim = SimServer(hang_metrics=frozenset({nth}))
    run, took_s = _cell(sim)
    # The client's read time-out (5 s) is shorter than SCRAPE_BOUND_S: it is the bound.
    assert run.stopped == f"no /metrics answer within 5 s (during {during})"
    hung_at = sim.metrics_calls[nth - 1]
    # Ended the bound after the hung request (plus the workers' own end), not later.
    assert took_s <= hung_at - sim.metrics_calls[0] + 5.0 + WORKER_STOP_S
    # No worker outlives the cell: every decode request ended by the time run_cell returned.
    assert all(c.end_s is not None for c in sim.calls if c.kind == "decode")


def test_a_cell_past_its_whole_bound_ends_naming_what_it_waited_for() -> None:
    # The drain never completes and its time-out is longer than the cell's whole bound
    # would allow if the slack were not there: the budget itself must stop it.
    sim = SimServer()
    sim.running = 5  # a server that never drains: the barrier runs to its time-out
    timing = CellTiming(
        window_s=2.0, hold_s=0.5, ready_timeout_s=1.0, drain_timeout_s=10.0, sample_every_s=0.5
    )
    run, took_s = _cell(sim, timing=timing)
    # The drain times out (a note), the gate cannot hold (5 + 2 running is not "2 and no
    # more"? it is >= C: the gate holds), and the cell ends inside its budget.
    assert took_s <= timing.budget_s + WORKER_STOP_S
    assert run.drain_note is not None and "not drained" in run.drain_note
    assert timing.budget_s == pytest.approx(10.0 + 1.0 + 2.0 + CELL_SLACK_S)


class _LosesItsCancel(Client):
    """A client whose stream returns normally instead of raising once it is cancelled, as
    `asyncio.wait_for` made bench.stream.http1's did on Python 3.11 (CPython gh-86296)."""

    async def stream(self, path: str, body: dict[str, Any] | bytes, record: RequestRecord) -> None:
        try:
            await super().stream(path, body, record)
        except asyncio.CancelledError:
            record.cancelled = False
            uncancel = asyncio.current_task()
            if uncancel is not None:
                uncancel.uncancel()


def test_a_worker_that_loses_its_cancellation_stops_at_its_next_request() -> None:
    sim = SimServer()
    run, took_s = _cell(sim, _LosesItsCancel)
    assert run.stopped is None and run.w1_s is not None
    # Before: the worker began a new request, then another, for as long as anyone waited.
    assert took_s <= TIMING.budget_s + WORKER_STOP_S
    assert all(c.end_s is not None for c in sim.calls if c.kind == "decode")
    assert max(c.start_s for c in sim.calls if c.kind == "decode") <= run.w1_s


def test_a_stream_that_stops_mid_way_fails_its_request_and_the_cell() -> None:
    sim = SimServer(stall_after_tokens=0)  # the head, then nothing: no first token
    run, took_s = _cell(sim)
    assert run.error is not None and run.error.startswith("read time-out")
    assert took_s <= TIMING.budget_s + WORKER_STOP_S


def test_the_sweep_goes_on_after_a_cell_that_hung(tmp_path: Path) -> None:
    # The 40th /metrics request lands in the first row's cells; the rest answer.
    sim = SimServer(hang_metrics=frozenset({40}))
    done = _run(sim, tmp_path, _results(contexts=(1024, 2048)))
    assert done.state == "complete"
    stuck = [c for c in done.cells if c.status == "invalid"]
    assert len(stuck) == 1 and stuck[0].reason is not None
    assert stuck[0].reason.startswith(f"no /metrics answer within {SCRAPE_BOUND_S:g} s (during")
    assert sum(c.status == "valid" for c in done.cells) == len(done.cells) - 1


def _sweep_with(sim: SimServer, tmp_path: Path, **kw: Any) -> tuple[Any, float]:
    """A one-row sweep (1K, concurrency 1 and 4) and its length in virtual seconds."""
    results = _results(contexts=(1024,), **kw)

    async def go() -> tuple[Any, float]:
        sweep, client = _sweep(sim, tmp_path)
        if not sim.usage:  # text only: counted through the server's tokenizer afterwards
            client.counting = Counting(capture_text=True)

            async def never(text: str) -> tuple[int, list[bytes] | None] | None:
                await asyncio.Event().wait()
                return None

            sweep.server.tokenize = never
        t0 = virtual.clock()
        try:
            async with asyncio.timeout(GUARD_S):
                return await sweep.run(results), virtual.clock() - t0
        finally:
            await client.aclose()

    return virtual.run(go())


def test_a_scout_that_streams_for_ever_ends_at_its_bound(tmp_path: Path) -> None:
    sim = SimServer(endless=frozenset({"scout"}))
    done, _ = _sweep_with(sim, tmp_path)
    (sample,) = done.prefill
    bound_s = 2 * (_READY_BASE_S + 1024 / _READY_PREFILL_TOK_S)  # speed 1
    assert sample.status == "invalid"
    assert sample.reason == f"the prefill scout did not end within {bound_s:.0f} s"
    (scout,) = [c for c in sim.calls if c.kind == "scout"]
    assert scout.end_s is not None and scout.end_s - scout.start_s == pytest.approx(bound_s)
    assert [c.status for c in done.cells] == ["valid", "valid"]  # the row went on


def test_a_warm_up_that_streams_for_ever_ends_at_its_bound(tmp_path: Path) -> None:
    sim = SimServer(endless=frozenset({"warmup"}))
    done, _ = _sweep_with(sim, tmp_path)
    (warm,) = [c for c in sim.calls if c.kind == "warmup"]
    assert warm.end_s is not None
    assert warm.end_s - warm.start_s == pytest.approx(2 * _READY_BASE_S + 30.0)
    assert done.state == "complete" and [c.status for c in done.cells] == ["valid", "valid"]


def test_counting_tokens_after_a_cell_ends_at_its_bound(tmp_path: Path) -> None:
    sim = SimServer(usage=False)
    done, took_s = _sweep_with(sim, tmp_path)
    assert [c.status for c in done.cells] == ["invalid", "invalid"]
    why = f"counting the cell's tokens through /tokenize did not finish within {300:g} s"
    assert all(c.reason == why for c in done.cells)
    assert took_s < 2 * (TOKENIZE_AFTER_CELL_S + TIMING.budget_s)


def test_a_request_count_no_server_can_have_is_no_reading_and_the_gate_counts_its_own() -> None:
    text = (
        "vllm:num_requests_running 2.3079872021073276e+16\n"
        "vllm:num_requests_waiting -3\nvllm:prefix_cache_queries_total 5\n"
    )
    snap = metrics.parse(text, 0.0)
    assert snap.get(metrics.RUNNING) is None and snap.get(metrics.WAITING) is None
    assert snap.get("vllm:prefix_cache_queries_total") == 5.0
    assert metrics.parse("vllm:num_requests_running 7\n", 0.0).get(metrics.RUNNING) == 7.0


class _ImplausibleMetrics(SimServer):
    """A server whose /metrics says 2.3e16 requests run, always (the fuzzer's example)."""

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text="vllm:num_requests_running 2.3e16\n")
        return await super()._handle(request)


def test_a_server_claiming_2e16_running_requests_costs_no_drain_time_out() -> None:
    # Before: the drain barrier waited its whole time-out (10 s here, 305 s in a real run)
    # on every cell for a count that never reached 0.
    run, took_s = _cell(_ImplausibleMetrics())
    assert run.drain_note is None and run.ready_after_s is not None
    assert run.stopped is None and run.w1_s is not None
    assert took_s < TIMING.drain_timeout_s


def test_a_request_count_that_is_not_whole_is_no_reading() -> None:
    snap = metrics.parse("vllm:num_requests_waiting 2.1613190353602048e-86\n", 0.0)
    assert snap.get(metrics.WAITING) is None
    assert metrics.parse("vllm:num_requests_waiting 3.0\n", 0.0).get(metrics.WAITING) == 3.0


def test_a_scout_whose_drain_gets_no_metrics_answer_is_an_invalid_sample(tmp_path: Path) -> None:
    # The fuzzer's find: the scout's drain barrier raised CellStopped out of the sweep (a
    # traceback). The 1st /metrics request is the first row's drain before its scout.
    sim = SimServer(hang_metrics=frozenset({1}))
    done, _ = _sweep_with(sim, tmp_path)
    (sample,) = done.prefill
    assert sample.status == "invalid"
    assert (
        sample.reason
        == f"no /metrics answer within {SCRAPE_BOUND_S:g} s (during the drain barrier)"
    )
    assert [c.status for c in done.cells] == ["valid", "valid"]
