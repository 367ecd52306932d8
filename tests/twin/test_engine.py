"""The engine core in virtual time: no sockets, no sleeps."""

from __future__ import annotations

import statistics

import pytest

from bench.twin import profile
from bench.twin.engine import Request, TwinScheduler


def run_until_done(engine: TwinScheduler, reqs: list[Request]) -> tuple[float, dict[str, float]]:
    t, first = 0.0, dict[str, float]()
    for r in reqs:
        engine.add(r)
    while not engine.idle:
        res = engine.step()
        t += res.duration_s
        for em in res.emissions:
            first.setdefault(em.request.rid, t)
    return t, first


def test_decode_emits_1_to_3_tokens_per_step_and_is_deterministic() -> None:
    prof = profile.load("tiny")

    def sizes(seed: int) -> list[int]:
        eng = TwinScheduler(prof, seed)
        req = eng.make_request(list(range(100)), 200)
        eng.add(req)
        out = []
        while not eng.idle:
            out += [em.tokens for em in eng.step().emissions]
        return out

    a = sizes(1)
    assert a == sizes(1) and a != sizes(2)
    assert sum(a) == 200 and set(a[1:-1]) == {1, 2, 3} and a[0] == 1


def test_prefix_hit_recomputes_tail_and_is_faster() -> None:
    prof = profile.load("tiny")
    eng = TwinScheduler(prof, 0)
    ids = list(range(1000, 2600))
    t_cold, _ = run_until_done(eng, [eng.make_request(ids, 1)])
    warm = eng.make_request(ids, 1)
    t_warm, _ = run_until_done(eng, [warm])
    assert warm.cached_tokens == 1600 - 16 - (1600 - 16) % 16 or warm.cached_tokens == 1584
    assert t_cold > 1600 * 2e-4 * 0.99
    assert t_warm < t_cold / 10
    assert eng.counters.prefix_hits == warm.cached_tokens


def test_budget_chunks_prefill_and_queue_waits_for_blocks() -> None:
    prof = profile.load("tiny")  # budget 512 tokens/step, 128 blocks of 16
    eng = TwinScheduler(prof, 0)
    big = [eng.make_request([i] * 900, 50) for i in range(3)]  # 3 x 57 blocks > 128
    for r in big:
        eng.add(r)
    first = eng.step()
    assert first.prefill_tokens == 512
    waiting_seen = max(len(eng.waiting) for _ in range(4) if eng.step() is not None)
    assert waiting_seen >= 1
    while not eng.idle:
        eng.step()
    assert all(r.output_tokens == 50 for r in big)
    assert eng.pool.used == 0


def test_step_time_follows_profile_table() -> None:
    prof = profile.load("published")
    t1 = prof.decode_step_seconds(1, 8192)
    t128 = prof.decode_step_seconds(128, 8192)
    assert t128 > t1 > 0
    mid = prof.decode_step_seconds(1, (8192 * 16384) ** 0.5)
    assert (
        min(t1, prof.decode_step_seconds(1, 16384))
        <= mid
        <= max(t1, prof.decode_step_seconds(1, 16384))
    )


def test_abort_frees_blocks() -> None:
    eng = TwinScheduler(profile.load("tiny"), 0)
    req = eng.make_request(list(range(500)), 1000)
    eng.add(req)
    for _ in range(3):
        eng.step()
    assert eng.pool.used > 0
    eng.abort(req)
    assert eng.idle and eng.pool.used == 0


def test_frontend_serializes_its_part_and_overlaps_the_rest() -> None:
    from bench.twin.frontend import Frontend

    prof = profile.load("published")
    a1, o = prof.frontend_seconds(8192, 1), prof.request_overhead_seconds(8192)
    a3 = prof.frontend_seconds(8192, 3)
    fe: Frontend[str] = Frontend(prof)
    for name in "xyz":
        fe.submit(0.0, 8192, name)
    # The first starts at once, with only itself held; the rest wait for the worker.
    times, names = _split(fe.start_due(0.0, held=1))
    assert times == pytest.approx([a1 + o]) and names == ["x"]
    assert fe.next_start_s() == pytest.approx(a1)
    assert fe.start_due(a1 - 1e-9, held=3) == []
    # The others start when the worker frees, at the load the server holds then.
    times, names = _split(fe.start_due(10.0, held=3))
    assert times == pytest.approx([a1 + a3 + o, a1 + 2 * a3 + o]) and names == ["y", "z"]
    assert fe.next_start_s() is None
    fe.submit(100.0, 8192, "w")
    times, names = _split(fe.start_due(100.0, held=1))
    assert times == pytest.approx([100.0 + a1 + o]) and names == ["w"]


def _split(started: list[tuple[float, str]]) -> tuple[list[float], list[str]]:
    return [t for t, _ in started], [n for _, n in started]


def test_frontend_time_follows_the_load_table() -> None:
    prof = profile.load("published")
    row = prof.frontend_s[0]
    b = prof.batches
    assert prof.frontend_seconds(8192, 1) == pytest.approx(row[0])
    assert prof.frontend_seconds(8192, b[-1] * 4) == pytest.approx(row[-1])  # flat beyond
    mid = (b[2] + b[3]) // 2
    w = (mid - b[2]) / (b[3] - b[2])
    assert prof.frontend_seconds(8192, mid) == pytest.approx(row[2] * (1 - w) + row[3] * w)


def test_virtual_methodology_figures_follow_the_step_costs() -> None:
    from bench.twin import virtual

    prof = profile.load("tiny")
    eng = TwinScheduler(prof, 0)
    ids = virtual.prompt_ids(1000, 7)
    scout_s = virtual.prefill_ttft_s(eng, ids)
    assert scout_s == pytest.approx(
        prof.frontend_seconds(1000) + prof.request_overhead_seconds(1000) + 1000 * 2e-4
    )
    cell = virtual.decode_cell(eng, ids, 1, max_tokens=3000, window_s=3.0, hold_s=0.5)
    step = prof.decode_step_seconds(1, 1000 + 500)
    per_token = step / prof.mean_tokens_per_step
    f = cell.figures
    assert f.tbt_s == pytest.approx(per_token, rel=0.1)
    assert f.total_tok_s == pytest.approx(1 / per_token, rel=0.1)
    assert f.measured_for_s <= 3.0 and f.output_tokens > 0


def test_slow_requests_are_every_nth_and_lose_drafts() -> None:
    data = profile.load("tiny").model_dump()
    data.update(slow_request_fraction=0.25, slow_request_drop=[0.5, 0.5])
    prof = profile.Profile.model_validate(data)
    eng = TwinScheduler(prof, 0)
    reqs = []
    for _ in range(8):  # eight requests arrive together: the 4th and the 8th are slow
        reqs.append(eng.make_request(list(range(50)), 400))
        eng.add(reqs[-1])
    assert [bool(r.drop_per_step) for r in reqs] == [False, False, False, True] * 2
    for _ in range(100):
        eng.step()
    slow = [r.output_tokens for r in reqs if r.drop_per_step]
    fast = [r.output_tokens for r in reqs if not r.drop_per_step]
    assert max(slow) < min(fast)


def test_the_slow_pattern_restarts_at_a_cold_prompt_on_an_idle_engine() -> None:
    """A new context row (its scout: a prompt the cache does not hold, on an idle engine)
    restarts the pattern, as one engine per row does in the calibrated virtual run; so a
    row measured again sees the same requests slow, whatever ran on the server before."""
    data = profile.load("tiny").model_dump()
    data.update(slow_request_fraction=0.25, slow_request_drop=[0.5, 0.5])
    eng = TwinScheduler(profile.Profile.model_validate(data), 0)

    def row(tag: int) -> list[bool]:
        prompt = [tag, *range(1, 200)]  # unique per row: cold at its first request
        out = []
        for _ in range(6):
            req = eng.make_request(prompt, 4)
            eng.add(req)
            out.append(bool(req.drop_per_step))
            while not eng.idle:
                eng.step()
        return out

    first = row(7)
    assert first == [False, False, False, True, False, False]
    assert row(8) == first  # the same pattern again, not continued from row 7
    warm = [eng.make_request([8, *range(1, 200)], 4) for _ in range(4)]  # cached: continues
    assert [bool(r.drop_per_step) for r in warm] == [False, True, False, False]


def test_virtual_figures_are_the_products_on_the_cells_records() -> None:
    """The twin is calibrated by `bench run`'s own arithmetic: the figures of a virtual cell
    are bench.run.figures' on its records, and those follow the card's definitions (a chunk
    at the window's first instant counts, as figures.py counts it)."""
    from bench.run.figures import cell_figures
    from bench.twin import virtual

    prof = profile.load("tiny")
    eng = TwinScheduler(prof, 0)
    ids = virtual.prompt_ids(2000, 3)
    virtual.prefill_ttft_s(eng, ids)
    cell = virtual.decode_cell(eng, ids, 4, max_tokens=400, window_s=2.0, hold_s=0.2)
    w0, w1 = cell.gate_s, cell.gate_s + cell.window_s
    f = cell.figures
    again, _, reason = cell_figures(
        cell.records, w0, w1, (), [], first=None, last=None, ready_after_s=w0
    )
    assert reason is None and again is not None
    assert again.model_dump(exclude={"average_active", "active_source"}) == f.model_dump(
        exclude={"average_active", "active_source"}
    )
    # By hand, from the records: the card's definitions.
    inside = [r.tokens_between(w0, w1) for r in cell.records]
    tokens = sum(n for n, _ in inside)
    last = max(t for n, t in inside if n and t is not None)
    assert f.output_tokens == tokens and f.measured_for_s == pytest.approx(last - w0)
    assert f.total_tok_s == pytest.approx(tokens / (last - w0))
    assert any(w0 in r.chunk_s for r in cell.records)  # the chunk of the gate's last step
    ttfts = sorted(r.ttft_s for r in cell.records if r.ttft_s is not None)
    assert f.ttft_s == pytest.approx(statistics.median(ttfts))
    tbts = [r.tbt_s for r in cell.records if r.tbt_s is not None]
    assert f.tbt_s == pytest.approx(statistics.median(tbts))
    assert f.completed_requests == sum(
        r.finished and r.end_s is not None and w0 <= r.end_s <= w1 for r in cell.records
    )
    assert (
        f.completed_requests > 0
    )  # max_tokens=400: a stream finishes (and restarts) inside the window
