"""Workload points judged as compare judges cells: keyed by offered rate at server speed,
their trials tested with the same statistics, a point that is not valid never judged equal,
and two runs of different workloads not comparable.

Built results, no server: each trial's figures drawn around a centre with a seeded 2 %
spread, so a 20 % slower B is far beyond the noise and an A/A pair is inside it."""

from __future__ import annotations

import math
import random

from bench.results import KvCapacity, Plan, Results, RunSettings, ServerInfo
from bench.verdict import headline
from bench.verdict.compare import Policy, compare
from bench.verdict.run_figures import from_results
from bench.workload_points import PointResult, PointStatus, Quantiles, WorkloadRun
from bench.workload_spec import Arrivals, Workload

SPEED = 10.0
RATES = (1.0, 2.0, 4.0, 8.0)


def _q(center: float, rng: random.Random) -> Quantiles:
    c = center * (1 + rng.gauss(0, 0.02))
    return Quantiles(n=200, mean=c, p50=c, p90=c * 1.3, p99=c * 2, min=c / 2, max=c * 3)


def _point(i: int, trial: int, slow: float, rng: random.Random, status: PointStatus) -> PointResult:
    rate = RATES[i] * SPEED
    out = 1000.0 * RATES[i] * SPEED / slow * (1 + rng.gauss(0, 0.02))
    return PointResult(
        index=i, trial=trial, offered_rate=rate, status=status,
        reasons=() if status == "valid" else ("overloaded: in flight grew",),
        requests=200, completed=200, duration_s=200 / rate, arrival_span_s=200 / rate,
        achieved_rate=rate, input_tokens=200 * 256, output_tokens=200 * 64,
        output_tok_s=out, total_tok_s=out * 5,
        ttft=_q(0.05 / SPEED * slow, rng), tpot=_q(0.01 / SPEED * slow, rng),
    )  # fmt: skip


def _results(
    *, slow: float = 1.0, seed: int = 0, name: str = "w", overloaded: int | None = None
) -> Results:
    rng = random.Random(seed)
    workload = Workload(name=name, arrivals=Arrivals(kind="rate", rates=RATES, requests=200))
    points = tuple(
        _point(i, t, slow, rng, "overloaded" if i == overloaded else "valid")
        for t in range(3)
        for i in range(len(RATES))
    )
    settings = RunSettings(
        url="http://127.0.0.1:8000", contexts=(), concurrencies=(), duration_s=30,
        max_tokens=4096, trials=3,
    )  # fmt: skip
    kv = KvCapacity(tokens=2048, source="kv_budget", detail="given")
    return Results(
        bench_version="1.0+gabc", run_id=f"r{seed}", created_at="2026-12-06T00:00:00Z",
        state="complete", settings=settings,
        server=ServerInfo(url=settings.url, model="m", max_model_len=4096, speed_factor=SPEED),
        plan=Plan(contexts=(), cells=(), kv=kv, estimated_duration_s=1.0),
        workload=WorkloadRun(workload=workload, source=name, sha256=name * 8, points=points),
    )  # fmt: skip


def test_points_are_keyed_by_their_rate_at_server_speed() -> None:
    run = from_results(_results())
    keys = sorted(k for k in run.cells if k[0] == "workload")
    assert keys == sorted(("workload", f"{r:g}/s", 0) for r in RATES)
    cell = run.cells[("workload", "4/s", 0)]
    assert len(cell.trials["wl_output_tok_s"]) == 3
    # server speed: the client's 40,000 tok/s at speed 10 is 4,000 tok/s
    assert math.isclose(cell.value("wl_output_tok_s") or 0, 4000.0, rel_tol=0.05)
    assert math.isclose(cell.value("wl_ttft_p50_s") or 0, 0.05, rel_tol=0.05)


def test_a_slower_b_is_flagged_on_every_point() -> None:
    c = compare(from_results(_results()), from_results(_results(slow=1.2, seed=1)), Policy())
    points = [x for x in c.cells if x.key[0] == "workload"]
    assert len(points) == len(RATES)
    assert all(p.mark == "regressed" for p in points), [p.mark for p in points]
    assert "4 OF 4 CELLS CHANGED" in headline.verdict(c)


def test_two_runs_of_one_server_change_nothing() -> None:
    c = compare(from_results(_results(seed=2)), from_results(_results(seed=3)), Policy())
    assert not c.flagged, [(x.key, x.mark) for x in c.flagged]
    # Three trials of one start a side at this noise cannot show ±5 % on every point: the
    # line says so, and what would (never "no change").
    line = headline.verdict(c)
    assert line.startswith("NOT RESOLVED: CHANGES UNDER ") and "±5 % NEEDS ABOUT" in line


def test_an_overloaded_point_is_never_judged_equal() -> None:
    c = compare(from_results(_results()), from_results(_results(seed=1, overloaded=3)), Policy())
    cell = next(x for x in c.cells if x.key == ("workload", "8/s", 0))
    assert cell.mark != "unchanged" and not cell.figures
    assert cell.b is not None and cell.b.status == "invalid"
    assert "overloaded" in (cell.b.detail or "")


def test_runs_of_two_workloads_are_not_comparable() -> None:
    c = compare(
        from_results(_results(name="w1")), from_results(_results(name="w2", seed=1)), Policy()
    )
    assert not c.settings.comparable
    assert "workload" in {d.name for d in c.settings.blocking}
