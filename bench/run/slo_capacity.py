"""`bench capacity`: the highest rate (or concurrency) a server serves within an SLO.

    bench capacity --url URL --workload W --slo 'ttft_p99<=2s,tpot_p99<=80ms'
                   [--by rate|concurrency] [--start X] [--repeats K] [--tolerance 0.05]

Each search (bench.workload.search) measures one point at a time, drawn from the workload
with its rates (or concurrencies) replaced by the one point, and judges it by the SLO
(MLPerf's early stopping, bench.workload.slo). A point's traffic comes from a seed made of
the workload's seed, the point's rate and the repeat: two servers searched at the same
rate get the same schedule and prompts, whatever path their searches took there. K
repeats give K capacities; the bound is their geometric mean with a 95 % t-interval
over them (docs/workloads.md). Beside each search's bound (the highest rate shown to meet)
its point estimate (bench.workload.search.point_estimate: where the points' measured
percentiles cross their bounds) is kept, and over the repeats its geometric mean and
interval the same way. Against a server started per run (the orchestrator), each
repeat is best its own run: `--repeats 1` into K bundles, compared with `bench compare`.
"""

from __future__ import annotations

import argparse
import hashlib
import math
from dataclasses import dataclass

from bench import stats
from bench.errors import UsageError
from bench.results import Results
from bench.run import sweep
from bench.run.workload_run import PointStep, load, measure_point
from bench.workload import slo as slo_rules
from bench.workload.search import (
    KEPT_PERCENTILES,
    CapacitySearchState,
    PointEstimate,
    Reading,
    point_estimate,
    point_verdict,
)
from bench.workload_points import CapacityRun, CapacitySearch, PointResult, WorkloadRun
from bench.workload_spec import MAX_CONCURRENCY, MAX_RATE, Workload


@dataclass(frozen=True)
class SearchOptions:
    by: str
    start: float
    lowest: float
    highest: float
    tolerance: float
    repeats: int
    max_points: int


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--by",
        choices=("rate", "concurrency"),
        default=None,
        help="search offered rates (open loop) or concurrencies (closed count); when not "
        "given: the workload's own kind",
    )
    p.add_argument("--start", type=float, default=None, help="the first point tried (when not "
                   "given: the workload's first finite rate or concurrency)")  # fmt: skip
    p.add_argument("--lowest", type=float, default=None, help="the lowest point tried")
    p.add_argument("--highest", type=float, default=None, help="the highest point tried")
    p.add_argument("--tolerance", type=float, default=0.05,
                   help="stop when the bracket's high / low is within 1 + this")  # fmt: skip
    p.add_argument("--repeats", type=int, default=1, help="independent searches")
    p.add_argument("--max-points", type=int, default=12, help="points a search may measure")


def prepared(args: argparse.Namespace) -> tuple[WorkloadRun | None, SearchOptions | None]:
    """`bench run`'s or `bench capacity`'s workload (None: the card's matrix) and, for
    `bench capacity`, the search's options; every problem said before a server is asked."""
    workload = None if args.workload is None else load(args.workload, args.rates, args.slo)
    if not getattr(args, "capacity", False):
        return workload, None
    if workload is None:
        raise UsageError("bench capacity needs --workload", hint="e.g. --workload smoke")
    opts = options(args, workload.workload)
    assert workload.workload.slo is not None
    found = CapacityRun(
        by="rate" if opts.by == "rate" else "concurrency",
        slo=slo_rules.text(workload.workload.slo),
        method=method(opts),
        start=opts.start, lowest=opts.lowest, highest=opts.highest, tolerance=opts.tolerance,
        repeats=opts.repeats, max_points=opts.max_points,
    )  # fmt: skip
    return workload.model_copy(update={"capacity": found}), opts


def options(args: argparse.Namespace, workload: Workload) -> SearchOptions:
    """The search's options, checked; one UsageError line for each problem."""
    if workload.slo is None or not workload.slo.bounds():
        raise UsageError(
            "bench capacity needs an SLO: give --slo, or an [slo] section in the workload",
            hint="e.g. --slo 'ttft_p99<=2s,tpot_p99<=80ms'",
        )
    kind = "rate" if workload.arrivals.kind == "rate" else "concurrency"
    by = args.by or kind
    if by != kind:
        raise UsageError(
            f"--by {by} needs a workload of "
            f"{'rate' if by == 'rate' else 'closed-count'} arrivals; {workload.name} has "
            f"{workload.arrivals.kind}",
        )
    finite = [float(x) for x in workload.arrivals.points() if math.isfinite(x)]
    top = MAX_RATE if by == "rate" else float(MAX_CONCURRENCY)
    low = args.lowest if args.lowest is not None else (0.01 if by == "rate" else 1.0)
    high = args.highest if args.highest is not None else (1e4 if by == "rate" else 4096.0)
    start = args.start if args.start is not None else (finite[0] if finite else 1.0)
    for flag, v in (("--start", start), ("--lowest", low), ("--highest", high)):
        if not (math.isfinite(v) and 0 < v <= top):
            raise UsageError(f"{flag} {v:g} must be above 0 and at most {top:g}")
    if not low <= start <= high:
        raise UsageError(
            f"--start {start:g} must lie between --lowest {low:g} and --highest {high:g}"
        )
    if not (math.isfinite(args.tolerance) and 0.001 <= args.tolerance <= 1.0):
        raise UsageError("--tolerance must be between 0.001 and 1")
    if not 1 <= args.repeats <= 100 or not 2 <= args.max_points <= 64:
        raise UsageError("--repeats must be 1..100 and --max-points 2..64")
    _enough_requests(workload, by, low)
    return SearchOptions(by, start, low, high, args.tolerance, args.repeats, args.max_points)


def _enough_requests(workload: Workload, by: str, lowest: float) -> None:
    """A point of fewer requests than MLPerf's rule needs to show its strictest bound met
    (a p99: 459 with none over, at 0.99; a p90: 44) is undecided whatever the server does:
    a search of such points could only go down. Refused before the server is asked."""
    assert workload.slo is not None
    need = max(slo_rules.more_needed(0, 0, q / 100.0) or 0 for _, q, _ in workload.slo.terms())
    a = workload.arrivals
    fewest = a.requests if by == "rate" else a.requests_per_stream * max(int(lowest), 1)
    if fewest < need:
        what = "requests" if by == "rate" else "requests_per_stream x --lowest"
        raise UsageError(
            f"with {fewest} requests a point the SLO's bounds cannot be shown met: MLPerf's early "
            f"stopping needs at least {need} (with none over the bound) at confidence "
            f"{slo_rules.CONFIDENCE:g}",
            hint=f"raise the workload's {what} to {need} or more",
        )


def step_workload(workload: Workload, by: str, x: float, repeat: int) -> Workload:
    """The workload with its points replaced by X, and a seed of (its seed, X, repeat)."""
    text = f"{workload.seed}/capacity/{by}/{x:.9g}/{repeat}"
    seed = int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)
    arrivals = workload.arrivals.model_copy(
        update={"rates": (x,)} if by == "rate" else {"concurrencies": (int(x),)}
    )
    return workload.model_copy(update={"arrivals": arrivals, "seed": seed})


async def measure(runner_: sweep.SweepRunner, results: Results, opts: SearchOptions) -> Results:
    """Every search of the run; results.json saved after each point."""
    wl = results.workload
    assert wl is not None and wl.capacity is not None
    results, line = await runner_.before_workload(results)
    speed = results.server.speed_factor
    scale = speed if opts.by == "rate" else 1.0  # client units of the records
    points: list[PointResult] = []
    searches: list[CapacitySearch] = []
    for repeat in range(opts.repeats):
        mine: list[tuple[float, PointResult]] = []
        search = CapacitySearchState(
            start=opts.start, lowest=opts.lowest, highest=opts.highest,
            integer=opts.by == "concurrency", tolerance=opts.tolerance,
            max_points=opts.max_points,
        )  # fmt: skip
        while (x := search.next_point()) is not None:
            step = PointStep(step_workload(wl.workload, opts.by, x, repeat), 0, repeat, len(points))
            got = await measure_point(runner_, results, step, line)
            points.append(got)
            mine.append((x, got))
            search.record(x, point_verdict(got))
            done = _found(search, repeat, scale, estimated(mine))
            results = _with(results, wl, points, [*searches, done], speed=speed)
            sweep.save(runner_.rundir, results)
        searches.append(_found(search, repeat, scale, estimated(mine)))
    results = _with(results, wl, points, searches, speed=speed)
    return results.model_copy(update={"state": "complete"})


def estimated(points: list[tuple[float, PointResult]]) -> PointEstimate:
    """A search's point estimate from its points (search units): each valid point's reading
    of each SLO term (its percentile of the figure; for a percentile a point does not keep,
    p95, the share of requests over the bound against 5 %); an overloaded or failed point
    caps the crossing; a late or interrupted point is left out (its figures are not of the
    rate asked)."""
    terms: dict[str, list[Reading]] = {}
    caps: list[float] = []
    for x, p in points:
        if p.status in ("overloaded", "failed"):
            caps.append(x)
            continue
        if p.status != "valid":
            continue
        for c in p.slo:
            term = f"{c.figure}_p{c.percentile}"
            q = getattr(p, c.figure)
            if c.percentile in KEPT_PERCENTILES and q is not None:
                reading = Reading(x, getattr(q, f"p{c.percentile}"), c.bound_s)
            elif c.n > 0:
                share = c.over / c.n
                reading = Reading(x, share, 1.0 - c.percentile / 100.0, log_value=False)
            else:
                continue
            terms.setdefault(term, []).append(reading)
    return point_estimate(terms, min(caps, default=None))


def _found(
    search: CapacitySearchState, repeat: int, scale: float, estimate: PointEstimate
) -> CapacitySearch:
    met, missed = search.met, search.missed
    return CapacitySearch(
        repeat=repeat,
        tried=tuple((x * scale, v) for x, v in search.tried),
        met=None if met is None else met * scale,
        missed=None if missed is None else missed * scale,
        note=search.note(),
        crossing=None if estimate.rate is None else estimate.rate * scale,
        crossing_term=estimate.term,
        crossing_note=estimate.why,
    )


def _with(
    results: Results,
    wl: WorkloadRun,
    points: list[PointResult],
    searches: list[CapacitySearch],
    *,
    speed: float,
) -> Results:
    assert wl.capacity is not None
    estimate, interval = geometric([s.met for s in searches])
    crossing, crossing_interval = geometric([s.crossing for s in searches])
    spent = math.fsum(p.duration_s for p in points) * speed
    capacity = wl.capacity.model_copy(
        update={
            "searches": tuple(searches),
            "estimate": estimate,
            "interval": interval,
            "crossing": crossing,
            "crossing_interval": crossing_interval,
            "server_s": spent,
        }
    )
    return results.model_copy(
        update={"workload": wl.model_copy(update={"points": tuple(points), "capacity": capacity})}
    )


def geometric(
    values: list[float | None],
) -> tuple[float | None, tuple[float, float] | None]:
    """The geometric mean of the searches' values (those given and above 0) and its 95 %
    t-interval over them (two or more); the bound's and the point estimate's alike."""
    found = [x for x in values if x is not None and x > 0]
    if not found:
        return None, None
    logs = [math.log(x) for x in found]
    mean = math.exp(math.fsum(logs) / len(logs))
    if len(logs) < 2:
        return mean, None
    ci = stats.mean_ci(logs)
    return mean, (math.exp(ci.low), math.exp(ci.high))


def method(opts: SearchOptions) -> str:
    unit = "requests/s" if opts.by == "rate" else "streams"
    return (
        f"bracketing from {opts.start:g} {unit} by x2 (between {opts.lowest:g} and "
        f"{opts.highest:g}), then bisection until high / low <= {1 + opts.tolerance:g}"
        + (" (adjacent concurrencies)" if opts.by == "concurrency" else "")
        + f"; at most {opts.max_points} points a search, {opts.repeats} search(es)"
    )
