"""The sweep's own time: sizing the next row during the scout, the gate opening on time;
and what a finished sweep leaves in its run directory.

A whole sweep runs against `tests.support.simserver` on a virtual-time loop, so every
assertion is about exact virtual instants, with no sockets and no sleeping.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest

from bench.results import KvCapacity, Results, RunSettings, ServerInfo
from bench.run import card_tables, plan, prompts
from bench.run.cell import ServerView, gate_pause_s, token_poll_s, wait_until
from bench.run.presize import CallTimer, TokenizeWindow
from bench.run.progress import SweepProgress
from bench.run.rundir import RunDir
from bench.run.sweep import SweepRunner
from bench.stream.client import Client
from tests.support import virtual
from tests.support.simserver import SimServer, count_tokens

CONTEXTS = (1024, 2048, 4096, 3000)


def _results(contexts: tuple[int, ...] = CONTEXTS, *, tokenize: bool = True) -> Results:
    settings = RunSettings(
        url="http://sim",
        contexts=contexts,
        prefill_only_contexts=(),
        concurrencies=(1, 4),
        duration_s=2.0,
        max_tokens=2000,
        fingerprint=False,  # the sweep's own timing (tests/run/test_fingerprint.py: its own)
    )
    info = ServerInfo(
        url="http://sim",
        model="m",
        max_model_len=32768,
        has_metrics=True,
        has_tokenize=tokenize,
    )
    kv = KvCapacity(tokens=10**7, source="kv_budget", detail="test")
    the_plan = plan.make_plan(settings, info, kv, prompt_sizing="tokenize")
    return Results(
        bench_version="t",
        run_id="run1",
        created_at="2026-01-01T00:00:00+00:00",
        settings=settings,
        server=info,
        plan=the_plan,
    )


def _sweep(sim: SimServer, tmp_path: Path) -> tuple[SweepRunner, Client]:
    clock = virtual.clock
    client = Client("http://sim", clock=clock, transport=sim.transport())
    server = ServerView(client, clock, asyncio.sleep, has_metrics=True)
    rundir = RunDir(tmp_path / "run")
    rundir.create()
    progress = SweepProgress(clock, total_cells=0, estimated_s=0, tty=False)
    return SweepRunner(server=server, rundir=rundir, progress=progress, anchor_s=clock()), client


def _run(sim: SimServer, tmp_path: Path, results: Results) -> Results:
    return _run_anchored(sim, tmp_path, results)[0]


def _run_anchored(sim: SimServer, tmp_path: Path, results: Results) -> tuple[Results, float]:
    """The finished results and the virtual time of the sweep's anchor."""

    async def go() -> tuple[Results, float]:
        sweep, client = _sweep(sim, tmp_path)
        try:
            return await sweep.run(results), sweep.anchor_s
        finally:
            await client.aclose()

    return virtual.run(go())


def test_next_rows_prompt_is_sized_during_the_scout_and_never_during_a_cell(
    tmp_path: Path,
) -> None:
    sim = SimServer()
    done = _run(sim, tmp_path, _results())
    assert done.state == "complete"
    assert all(c.status == "valid" for c in done.cells)
    scouts = [c for c in sim.calls if c.kind == "scout"]
    tokenize = [c for c in sim.calls if c.kind == "tokenize"]
    assert len(scouts) == 4

    def row_of(text: str) -> int:
        return next(i for i, s in enumerate(scouts) if text.startswith(s.text.split("]")[0]))

    # Rows 1 and 2 are sized before their scouts (no prefill rate known before the first
    # scout); rows 3 and 4 entirely inside the scout of the row before, ending before its
    # first token.
    for call in tokenize:
        row = row_of(call.text)
        assert call.end_s is not None
        if row <= 1:
            assert call.end_s <= scouts[row].start_s
        else:
            before = scouts[row - 1]
            assert before.first_token_s is not None
            # after the scout reached the engine (frontend_s), done before its first token
            assert before.start_s + sim.frontend_s <= call.start_s
            assert call.end_s < before.first_token_s
    # Never beside a cell.
    for a, b in sim.cell_spans():
        assert not [c for c in tokenize if c.end_s is not None and c.start_s < b and c.end_s > a]
    # The prompts are exactly what sizing them one by one gives.
    for scout, nominal in zip(scouts, CONTEXTS, strict=True):
        label = prompts.context_label(nominal, nominal)
        text = prompts.PromptText("run1", 0, label, 0)

        async def count(candidate: str) -> int:
            return count_tokens(candidate)

        expected, tokens = asyncio.run(prompts.size_exactly(nominal, text, count))
        assert scout.text == expected and tokens == nominal


def test_a_finished_sweeps_run_directory_has_the_tables_of_its_results(tmp_path: Path) -> None:
    done = _run(SimServer(), tmp_path, _results())
    run = tmp_path / "run"
    tables = (run / "tables.md").read_text(encoding="utf-8")
    assert tables == card_tables.render(done) + "\n"
    assert tables == card_tables.render(RunDir(run).load()) + "\n"  # and of results.json
    assert all(label in tables for label in ("1K", "2K", "4K", "3000"))


def test_sizing_waits_for_the_next_row_when_the_scout_is_too_short_for_it(
    tmp_path: Path,
) -> None:
    # /tokenize of a long prompt takes as long as prefilling it: only the short calls fit
    # inside a scout; the long ones wait for the next row.
    sim = SimServer(tokenize_per_char_s=2e-5)
    done = _run(sim, tmp_path, _results())
    assert [p.prompt_tokens for p in done.prefill] == list(CONTEXTS)
    scouts = [c for c in sim.calls if c.kind == "scout"]
    tokenize = [c for c in sim.calls if c.kind == "tokenize"]
    spans = [(s.start_s, s.end_s) for s in scouts if s.end_s is not None]
    inside = [c for c in tokenize if any(a < c.start_s < b for a, b in spans)]
    assert inside and all(len(c.text) < 4096 for c in inside)
    for call in tokenize:
        for s in scouts:
            assert s.first_token_s is not None and call.end_s is not None
            assert not (call.start_s < s.first_token_s <= call.end_s)


def test_without_tokenize_nothing_runs_beside_the_scout(tmp_path: Path) -> None:
    sim = SimServer()
    results = _results((1024, 2048), tokenize=False)
    _run(sim, tmp_path, results)
    assert not [c for c in sim.calls if c.kind == "tokenize"]


def test_the_gate_opens_one_hold_after_the_last_first_token(tmp_path: Path) -> None:
    sim = SimServer(frontend_s=0.137)  # first tokens land between the gate's polls
    done, anchor = _run_anchored(sim, tmp_path, _results((1024,)))
    hold_s = done.settings.readiness_hold_s
    poll_s = max(0.01, min(0.25, hold_s / 6))
    decode = sorted((c for c in sim.calls if c.kind == "decode"), key=lambda c: c.start_s)
    assert len(done.cells) == 2
    for cell in done.cells:
        assert cell.extras is not None and cell.started_at_s is not None
        assert cell.extras.ready_after_s is not None
        t0 = anchor + cell.started_at_s
        first_wave = [c for c in decode if c.start_s >= t0 - 1e-9][: cell.concurrency]
        last_first = max(c.first_token_s or math.inf for c in first_wave)
        ready = t0 + cell.extras.ready_after_s
        # The hold starts at the first check after the last first token (our own records,
        # looked at every token_poll_s) and the gate opens the moment the hold is over.
        assert last_first + hold_s <= ready <= last_first + hold_s + token_poll_s(poll_s) + 1e-9


@pytest.mark.parametrize(
    ("now", "held", "expected"),
    [(10.0, None, 0.25), (10.0, 9.0, 0.25), (10.0, 7.1, 0.1), (10.0, 6.0, 0.0)],
)
def test_gate_pause_never_passes_the_end_of_the_hold(
    now: float, held: float | None, expected: float
) -> None:
    assert gate_pause_s(now, 0.25, held, 3.0) == pytest.approx(expected)


def test_wait_until_returns_at_the_first_check_that_holds() -> None:
    async def go() -> tuple[float, float]:
        t0 = virtual.clock()
        await wait_until(lambda: virtual.clock() - t0 >= 0.0123, virtual.clock, asyncio.sleep,
                         1.0, 0.005)  # fmt: skip
        t1 = virtual.clock()
        await wait_until(lambda: False, virtual.clock, asyncio.sleep, 0.05, 0.005)
        return t1 - t0, virtual.clock() - t1

    early, limit = virtual.run(go())
    assert early == pytest.approx(0.015)
    assert limit == pytest.approx(0.05)


def test_call_timer_separates_the_fixed_cost_from_the_cost_per_character() -> None:
    t = CallTimer()
    assert t.expected_s(100) == math.inf
    t.record(100, 0.002)
    assert t.expected_s(100) == pytest.approx(2 * 0.002 + 0.005)
    assert t.expected_s(1_000_000) == math.inf  # nothing long seen yet
    t.record(100_000, 0.012)
    assert t.expected_s(1_000_000) == pytest.approx(2 * (0.002 + 1e-7 * 1_000_000) + 0.005)
    t.record(50_000, 0.5)  # a slow call shorter than the longest does not set the rate
    assert t.per_char_s == pytest.approx(1e-7)
    t.record(100_000, 0.022)  # the same length, slower: the rate errs long
    assert t.per_char_s == pytest.approx(2e-7)


def test_window_holds_calls_until_one_fits_and_quiet_waits_for_the_one_under_way() -> None:
    async def go() -> list[tuple[str, float]]:
        w = TokenizeWindow(virtual.clock)
        w.timer.record(10, 0.01)  # expected: 2 x 0.01 + 0.005 = 0.025 s
        seen: list[tuple[str, float]] = []

        async def call(name: str) -> None:
            async def slow() -> None:
                seen.append((name + " start", virtual.clock()))
                await asyncio.sleep(0.01)

            await w.call(10, slow)

        t0 = virtual.clock()
        w.open(t0 + 0.02)  # too short for a call
        task = asyncio.create_task(call("a"))
        await asyncio.sleep(0.5)
        assert not seen
        w.open(t0 + 1.0)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        await w.quiet()  # closes, then waits for "a" to end
        seen.append(("quiet", virtual.clock()))
        late = asyncio.create_task(call("b"))
        await asyncio.sleep(1.0)
        assert len(seen) == 2  # closed: "b" has not started
        w.open()
        await asyncio.gather(task, late)
        return [(n, round(t - t0, 6)) for n, t in seen]

    assert virtual.run(go()) == [("a start", 0.5), ("quiet", 0.51), ("b start", 1.51)]


def test_every_scout_waits_for_lingering_requests_and_one_warm_up_comes_first(
    tmp_path: Path,
) -> None:
    """The previous row's cancelled streams keep running for a while on the server; each
    scout is sent only once the server reports nothing running, and exactly one warm-up
    request precedes the first scout."""
    sim = SimServer(linger_s=0.5)
    done = _run(sim, tmp_path, _results())
    assert done.state == "complete"
    assert all(p.status == "valid" for p in done.prefill)
    scouts = [c for c in sim.calls if c.kind == "scout"]
    assert len(scouts) == 4
    for scout in scouts:
        before = [n for t, n in sim.running_log if t <= scout.start_s]
        assert not before or before[-1] == 0, "scout sent beside running requests"
    # Rows 2.. follow cells whose streams lingered: the barrier really waited for them.
    for scout in scouts[1:]:
        last_release = max(t for t, n in sim.running_log if t <= scout.start_s and n == 0)
        ends = [c.end_s for c in sim.calls if c.kind == "decode" and c.end_s is not None]
        last_cancel = max(t for t in ends if t <= scout.start_s)
        assert last_release >= last_cancel + sim.linger_s - 1e-9
    served = [c for c in sim.calls if c.kind != "tokenize"]
    warmups = [c for c in served if c.kind == "warmup"]
    assert len(warmups) == 1 and served[0] is warmups[0]
    assert warmups[0].end_s is not None and warmups[0].end_s <= scouts[0].start_s


def test_each_decode_cell_records_the_hit_rate_of_its_launch(tmp_path: Path) -> None:
    """The C requests a cell launches together reuse the prompt its row's scout cached:
    their prefix-cache hit rate, from /metrics before the launch and once each has a
    token, is recorded on the cell."""
    sim = SimServer(recompute_tokens=16)
    done = _run(sim, tmp_path, _results((1024, 2048)))
    decode = [c for c in done.cells if c.status == "valid"]
    assert len(decode) == 4
    for cell in decode:
        assert cell.extras is not None
        expected = (cell.prompt_tokens - 16) / cell.prompt_tokens
        assert cell.extras.launch_prefix_cache_hit_rate == pytest.approx(expected)


def test_a_launch_mixed_with_second_requests_gives_no_hit_rate() -> None:
    from bench.run.cell import CellRun, launch_prefix_hit_rate
    from bench.stream.metrics import PREFIX_HITS, PREFIX_QUERIES, Snapshot

    before = Snapshot(0.0, {PREFIX_HITS: 0.0, PREFIX_QUERIES: 0.0})
    after = Snapshot(1.0, {PREFIX_HITS: 90.0, PREFIX_QUERIES: 100.0})
    run = CellRun(concurrency=4, t0_s=0.0, before_launch=before, launched=after)
    run.launched_requests = 4
    assert launch_prefix_hit_rate(run) == pytest.approx(0.9)
    run.launched_requests = 5  # a worker was on its second request: counters are mixed
    assert launch_prefix_hit_rate(run) is None
    assert launch_prefix_hit_rate(CellRun(concurrency=4, t0_s=0.0)) is None


def test_a_scout_whose_drain_timed_out_gives_no_prefill_number(tmp_path: Path) -> None:
    """Cancelled streams that never leave: the barrier before the next row's scout gives
    up after its time-out, and that scout's sample is invalid with the reason."""
    sim = SimServer(linger_s=1e6)
    done = _run(sim, tmp_path, _results((1024, 2048)))
    first, second = done.prefill
    assert first.status == "valid"
    assert second.status == "invalid" and second.prefill_tok_s is None
    assert second.reason is not None and second.reason.startswith("server not drained after")
