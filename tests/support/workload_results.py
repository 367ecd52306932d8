"""results.json of a workload run, built without a server: a rate sweep's points (trials, a
seeded spread, a slowdown, a point's status) or a `bench capacity` run's searches, with
figures whose server-speed values are simple to state (a point at R requests/s does
1000 R output tok/s, TTFT p50 50 ms, TPOT p50 10 ms, each over `slow`)."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping, Sequence

from bench.results import KvCapacity, Plan, Results, RunSettings, ServerInfo
from bench.workload_points import (
    CapacityRun,
    CapacitySearch,
    PointResult,
    PointStatus,
    Quantiles,
    WorkloadRun,
)
from bench.workload_spec import Arrivals, Slo, Workload

REQUESTS = 400


def quantiles(center: float, spread: float = 1.0) -> Quantiles:
    """A figure whose p50 is CENTER (p90 1.3 x, p99 2 x), with the p99's interval."""
    return Quantiles(
        n=REQUESTS, mean=center * spread, p50=center, p90=center * 1.3, p99=center * 2,
        p50_ci=(center * 0.95, center * 1.05), p90_ci=(center * 1.2, center * 1.4),
        p99_ci=(center * 1.8, center * 2.3), min=center / 2, max=center * 3,
    )  # fmt: skip


def point(
    index: int, rate: float, *, trial: int = 0, speed: float = 10.0, slow: float = 1.0,
    noise: float = 1.0, status: PointStatus = "valid",
) -> PointResult:  # fmt: skip
    """Point INDEX at RATE server requests/s, its figures in client units (SPEED x)."""
    client_rate = rate * speed
    out = 1000.0 * client_rate / slow * noise
    return PointResult(
        index=index, trial=trial, offered_rate=client_rate, status=status,
        reasons=() if status == "valid" else (f"{status}: the test says so",),
        requests=REQUESTS, completed=REQUESTS, duration_s=REQUESTS / client_rate,
        arrival_span_s=REQUESTS / client_rate, achieved_rate=client_rate * 0.99,
        input_tokens=REQUESTS * 256, output_tokens=REQUESTS * 64, output_tok_s=out,
        total_tok_s=out * 5, goodput_rate=client_rate * 0.9,
        ttft=quantiles(0.05 / speed * slow / noise), tpot=quantiles(0.01 / speed * slow / noise),
        itl=quantiles(0.009 / speed * slow / noise), e2el=quantiles(0.7 / speed * slow / noise),
    )  # fmt: skip


def workload_of(name: str, rates: Sequence[float], *, seed: int = 0) -> WorkloadRun:
    """The workload as run: rate arrivals at RATES (server requests/s), its sha256 as
    bench.run.workload_run gives it (the canonical JSON's)."""
    w = Workload(
        name=name, seed=seed,
        arrivals=Arrivals(kind="rate", rates=tuple(rates), requests=REQUESTS),
        slo=Slo(ttft_p99_s=2.0, tpot_p99_s=0.08),
    )  # fmt: skip
    sha = hashlib.sha256(w.model_dump_json().encode()).hexdigest()
    return WorkloadRun(workload=w, source=f"{name}.toml", sha256=sha)


def _results(run: WorkloadRun, *, speed: float, run_id: str, created_at: str) -> Results:
    settings = RunSettings(
        url="http://127.0.0.1:8000", contexts=(), concurrencies=(), duration_s=30,
        max_tokens=4096,
    )  # fmt: skip
    kv = KvCapacity(tokens=2048, source="kv_budget", detail="given")
    return Results(
        bench_version="1.0+gabc", run_id=run_id, created_at=created_at, state="complete",
        settings=settings,
        server=ServerInfo(url=settings.url, model="m", max_model_len=4096, speed_factor=speed,
                          version="0.30.1"),
        plan=Plan(contexts=(), cells=(), kv=kv, estimated_duration_s=1.0),
        workload=run,
    )  # fmt: skip


def rate_results(
    *, name: str = "sweep", rates: Sequence[float] = (1.0, 4.0, 16.0), trials: int = 1,
    speed: float = 10.0, slow: float = 1.0, spread: float = 0.0, seed: int = 0,
    statuses: Mapping[int, PointStatus] | None = None, workload_seed: int = 0,
    run_id: str = "wl-run", created_at: str = "2026-12-06T00:00:00Z",
) -> Results:  # fmt: skip
    """A rate sweep: each rate's point in each trial, `spread` the sd of a seeded relative
    noise on every figure, point i's status STATUSES[i] (valid else)."""
    rng = random.Random(seed)
    points = tuple(
        point(i, r, trial=t, speed=speed, slow=slow, noise=1 + rng.gauss(0, spread),
              status=(statuses or {}).get(i, "valid"))
        for t in range(trials)
        for i, r in enumerate(rates)
    )  # fmt: skip
    run = workload_of(name, rates, seed=workload_seed).model_copy(update={"points": points})
    return _results(run, speed=speed, run_id=run_id, created_at=created_at)


def capacity_results(
    met: Sequence[float | None], *, name: str = "cap", speed: float = 10.0,
    run_id: str = "cap-run", created_at: str = "2026-12-06T00:00:00Z",
    crossing: Sequence[float | None] = (),
) -> Results:  # fmt: skip
    """A `bench capacity` run by rate whose searches found MET (server requests/s; None:
    none met), each bracketed by 1.1 x above, with its point estimate CROSSING where given
    (server requests/s); its estimate and interval in client units."""
    crossings = [*crossing, *[None] * (len(met) - len(crossing))]
    searches = tuple(
        CapacitySearch(
            repeat=i, tried=(), met=None if m is None else m * speed,
            missed=(m or 0.5) * 1.1 * speed,
            note=None if m is not None else "no point met the SLO: the lowest tried did not",
            crossing=None if c is None else c * speed,
        )
        for i, (m, c) in enumerate(zip(met, crossings, strict=True))
    )  # fmt: skip
    found = [m * speed for m in met if m is not None]
    cap = CapacityRun(
        by="rate", slo="ttft_p99<=2s,tpot_p99<=80ms", method="bracketing, then bisection",
        repeats=len(met), searches=searches,
        estimate=sum(found) / len(found) if found else None,
        interval=(min(found), max(found)) if len(found) > 1 else None, server_s=120.0,
    )  # fmt: skip
    run = workload_of(name, (1.0,)).model_copy(update={"capacity": cap})
    return _results(run, speed=speed, run_id=run_id, created_at=created_at)
