"""The engine core in virtual time: no sockets, no sleeps."""

from __future__ import annotations

from bench.twin import profile
from bench.twin.engine import Engine, Request


def run_until_done(engine: Engine, reqs: list[Request]) -> tuple[float, dict[str, float]]:
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
        eng = Engine(prof, seed)
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
    eng = Engine(prof, 0)
    ids = list(range(1000, 2600))
    t_cold, _ = run_until_done(eng, [eng.make_request(ids, 1)])
    warm = eng.make_request(ids, 1)
    t_warm, _ = run_until_done(eng, [warm])
    assert warm.cached_tokens == 1600 - 16 - (1600 - 16) % 16 or warm.cached_tokens == 1584
    assert t_cold > 1600 * 5e-5 * 0.99
    assert t_warm < t_cold / 10
    assert eng.counters.prefix_hits == warm.cached_tokens


def test_budget_chunks_prefill_and_queue_waits_for_blocks() -> None:
    prof = profile.load("tiny")  # budget 512 tokens/step, 128 blocks of 16
    eng = Engine(prof, 0)
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
    eng = Engine(profile.load("tiny"), 0)
    req = eng.make_request(list(range(500)), 1000)
    eng.add(req)
    for _ in range(3):
        eng.step()
    assert eng.pool.used > 0
    eng.abort(req)
    assert eng.idle and eng.pool.used == 0
