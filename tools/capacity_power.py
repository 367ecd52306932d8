"""`make capacity-power`: does `bench capacity` find the twin's SLO capacity, and does
`bench compare` tell a 10 % slower decode from the searches' own noise? In virtual time.

Everything runs the product's own code on the twin's engine, without sockets or sleeps:

1. The truth: `bench.twin.capacity.capacity_truth` (the highest Poisson rate whose pooled
   p99 of each bounded figure is within its bound) on `--truth-sets` disjoint sets of
   `--truth-seeds` streams of `--truth-requests` requests a rate; the truth is the sets'
   mean, its noise their sd / sqrt(sets) (the sets are independent).
2. A search: `bench.workload.search.CapacitySearchState` from `--start` with `bench
   capacity`'s defaults (x2 bracketing between 0.01 and 10^4 req/s, bisection to
   high / low <= 1.05, at most 12 points). Each point is drawn as `bench capacity` draws it
   (`bench.run.slo_capacity.step_workload`: the workload's seed, the rate and the repeat
   make the point's seed; `bench.workload.schedule.plan_point`: its Poisson arrivals, R of
   them, no warm-ups), played through the twin's engine from idle
   (`bench.twin.openloop.simulate`, the engine's draws seeded by the point's seed) and
   judged as `bench.workload.search.point_verdict` judges a point: missed when overloaded
   (`bench.workload.figures`' backlog rule, with its constants), else each bound by
   `bench.workload.slo.judge` (MLPerf's early stopping). On the twin every request ends and
   the client keeps its schedule, so a point is valid or overloaded, nothing else;
   tests/tools/test_capacity_power.py checks this verdict against `point_verdict` of the
   full `bench.workload.figures.point_result`.
3. Accuracy: `--searches` searches at each R of `--accuracy-requests` (requests a point):
   the share whose capacity (the search's `met`) lies within 5 % of the truth, and
   found / truth's median and 5th / 95th percentiles. A met point is one whose p99 is shown
   within the bound at 99 % confidence (MLPerf's early stopping), so a search's capacity
   sits below the population-p99 truth, by less as R grows: it is the bound. Beside it the
   search's point estimate (`bench.workload.search.point_estimate`, as `bench capacity`
   computes it: where the points' measured p99, smoothed to rise with the rate, crosses
   its bound), its share within 5 % of the truth, its median, percentiles and spread.
   `--compares 0` measures accuracy alone (no B, no compares); `--stop-after S` then
   prints the table of the searches done after S seconds (the rows' searches are run
   interleaved, so each row has its first ones, in the seeds' order); `--truth-given`
   takes A's truth sets from an earlier run instead of computing them again; `--dump`
   writes every result, with each point's readings, as JSON Lines. `--resume FILE` finishes
   a stopped run: it takes the results in FILE (an earlier `--dump`) and runs only the jobs
   it lacks, so the tables are those of one run not stopped. Each search in FILE is replayed
   from its points' verdicts and readings, which must give the points, capacity and estimate
   it says under this run's --start and --slo (its --profile cannot be checked). The rows
   are this run's --accuracy-requests: FILE's searches at another R are left out of the
   tables (and kept in the new `--dump`, which must be another file: FILE's lines first, then
   the new ones as they come); a cut last line (a run killed while writing it) is left out;
   any other line that is not the result of a job planned ends the run, naming the line.
   (A dump written before dumps said what stopped each search leaves that unknown, and the
   compares' line on it says so.)
4. Sides of K = `--repeats` searches (one `bench capacity --repeats K` run: a workload seed
   of its own, repeats 0..K-1), `--compares` of them on the profile (A) and as many on
   B = `bench.twin.openloop.slower_decode(profile, 1.10)`, every side its own seed (two
   runs of one server differ so). Each pair is judged by
   `bench.verdict.capacity_delta.judge` (Welch on the logs; CHANGED when the interval
   excludes 0) at `--alpha` and at `bench compare`'s own alpha, twice: on each search's
   point estimate, as `bench compare` judges capacity runs (the bounds when a search on
   either side gave none), and on the bounds alone, as it judged them before.
   A/A: sides 2j and 2j + 1 of A, and of B (one profile each), `--compares` in all: the
   share flagged CHANGED. Power: side i of A against side i of B: the share where B is
   found lower (CHANGED, Δ < 0).

The same command gives the same table: every seed is fixed, and the work is split over
`--workers` processes with the results put back in order. Progress goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import shlex
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from bench import stats
from bench.run.slo_capacity import step_workload
from bench.twin import profile as profiles
from bench.twin.capacity import capacity_truth
from bench.twin.openloop import VirtualRequest, simulate, slower_decode
from bench.twin.profile import Profile
from bench.verdict.capacity_delta import CapacityDelta, judge
from bench.verdict.cells import RunFigures
from bench.verdict.compare import ALPHA as COMPARE_ALPHA
from bench.workload import figures
from bench.workload import slo as slo_rules
from bench.workload.schedule import Planned, plan_point
from bench.workload.search import (
    KEPT_PERCENTILES,
    CapacitySearchState,
    Reading,
    Verdict,
    point_estimate,
)
from bench.workload_spec import Arrivals, Lengths, Slo, Workload

PROFILE = "tiny"
INPUT_TOKENS, OUTPUT_TOKENS = 256, 64
SLO_TEXT = "ttft_p99<=0.5s,tpot_p99<=0.01s"
SLOWER = 1.10  # B's decode steps, x A's
WITHIN = 0.05  # accuracy: |found / truth - 1| <= this
SEED_BASE = {"A": 1, "B": 100_001}  # side i's workload seed: SEED_BASE[side] + i


# --- one point, one search ----------------------------------------------------------------


def workload(seed: int, requests: int, slo: Slo, start: float) -> Workload:
    """The workload `bench capacity` is given: Poisson, fixed lengths, no warm-ups."""
    return Workload(
        name="capacity-power",
        seed=seed,
        arrivals=Arrivals(kind="rate", rates=(start,), requests=requests),
        lengths=Lengths(input_tokens=INPUT_TOKENS, output_tokens=OUTPUT_TOKENS),
        slo=slo,
    )


def play(
    profile: Profile, wl: Workload, rate: float, repeat: int
) -> tuple[list[Planned], list[VirtualRequest]]:
    """One point of a search: its schedule as `bench capacity` draws it, served by the twin
    from idle (server seconds)."""
    step = step_workload(wl, "rate", rate, repeat)
    planned = plan_point(step, 0, 0)
    arrivals = [(p.at_s, p.input_tokens, p.output_tokens) for p in planned]
    return planned, simulate(profile, arrivals, seed=step.seed)


def overloaded(records: Sequence[VirtualRequest]) -> bool:
    """`bench.workload.figures`' backlog rule on a point's requests, each sent when due: in
    flight at the last due send > 1.5 x at the middle one + 4, and fewer than
    OVERLOAD_SHARE of the second half's arrivals' worth completed within it."""
    due = [r.arrival_s for r in records]
    if len(due) < figures.MIN_FOR_OVERLOAD:
        return False
    t_mid, t_end = due[len(due) // 2], due[-1]

    def in_flight(t: float) -> int:
        return sum(1 for r in records if r.arrival_s <= t < r.finish_s)

    mid, end = in_flight(t_mid), in_flight(t_end)
    arrived = len(due) - len(due) // 2
    completed = sum(1 for r in records if t_mid < r.finish_s <= t_end)
    return end > 1.5 * mid + 4 and completed < figures.OVERLOAD_SHARE * arrived


def readings(rate: float, records: Sequence[VirtualRequest], slo: Slo) -> dict[str, Reading]:
    """The point's reading of each SLO term, as `bench capacity` takes it from the point's
    figures (bench.run.slo_capacity.readings): the term's percentile of the figure
    (`bench.workload.figures.quantiles`' rule), or, where a point keeps none, the share over
    the bound."""
    out: dict[str, Reading] = {}
    for figure, q, bound in slo.terms():
        values = [getattr(r, figure) for r in records if figure != "tpot" or r.tokens > 1]
        if not values:
            continue
        if q in KEPT_PERCENTILES:
            value = stats.percentile(values, q)
        else:
            value = sum(v > bound for v in values) / len(values)
        out[f"{figure}_p{q}"] = reading(rate, q, bound, value)
    return out


def reading(rate: float, q: float, bound: float, value: float) -> Reading:
    """A term's reading of `value`: its percentile against the bound, or (a percentile a
    point does not keep) the share over the bound against 1 - q."""
    if q in KEPT_PERCENTILES:
        return Reading(rate, value, bound)
    return Reading(rate, value, 1.0 - q / 100.0, log_value=False)


def judged(records: Sequence[VirtualRequest], slo: Slo) -> tuple[Verdict, dict[str, str]]:
    """The point's verdict as `point_verdict` gives it, and each bound's (or
    {"overloaded": "missed"})."""
    if overloaded(records):
        return "missed", {"overloaded": "missed"}
    each: dict[str, str] = {}
    for figure, bound in slo.bounds().items():
        # TPOT of a request of one token is not defined (bench.workload.figures' rule).
        done = [r for r in records if figure != "tpot" or r.tokens > 1]
        each[figure] = slo_rules.judge(figure, [getattr(r, figure) for r in done], bound).verdict
    got = set(each.values())
    if "missed" in got:
        return "missed", each
    return ("met" if got == {"met"} else "undecided"), each


@dataclass(frozen=True)
class Setup:
    """What every search of a run shares."""

    profile: str
    slo: Slo
    start: float

    def of(self, side: str) -> Profile:
        base = profiles.load(self.profile)
        return base if side == "A" else slower_decode(base, SLOWER)


@dataclass(frozen=True)
class SearchSpec:
    """One search: the profile ("A", or "B": decode SLOWER x slower), R requests a point,
    the workload's seed and the repeat (`bench capacity`'s point seeds come from both)."""

    side: str
    requests: int
    seed: int
    repeat: int


@dataclass(frozen=True)
class SearchFound:
    spec: SearchSpec
    met: float | None  # the search's capacity (None: no point met)
    tried: tuple[tuple[float, Verdict], ...]
    # What did not meet at the lowest point that did not; None: not known (a search read
    # back by --resume from a dump written before dumps said it).
    binding: tuple[str, ...] | None
    # The point estimate (bench.workload.search.point_estimate): None, and why, when none.
    estimate: float | None = None
    estimate_term: str | None = None
    estimate_why: str | None = None
    # Each point's readings, in `tried`'s order: {term: value}; None: overloaded.
    read: tuple[dict[str, float] | None, ...] = ()


def search(spec: SearchSpec, setup: Setup) -> SearchFound:
    """One seeded search (module docstring, 2)."""
    profile = _profile(setup, spec.side)
    wl = workload(spec.seed, spec.requests, setup.slo, setup.start)
    state = search_state(setup)
    why: dict[float, tuple[str, ...]] = {}
    terms: dict[str, list[Reading]] = {}
    read: list[dict[str, float] | None] = []
    caps: list[float] = []
    while (x := state.next_point()) is not None:
        _, records = play(profile, wl, x, spec.repeat)
        v, each = judged(records, setup.slo)
        why[x] = tuple(sorted(k for k, w in each.items() if w != "met"))
        state.record(x, v)
        if "overloaded" in each:
            caps.append(x)
            read.append(None)
            continue
        got = readings(x, records, setup.slo)
        read.append({t: r.value for t, r in got.items()})
        for t, r in got.items():
            terms.setdefault(t, []).append(r)
    lowest = state.missed
    est = point_estimate(terms, min(caps, default=None))
    return SearchFound(
        spec, state.met, tuple(state.tried), () if lowest is None else why[lowest],
        est.rate, est.term, est.why, tuple(read),
    )  # fmt: skip


def search_state(setup: Setup) -> CapacitySearchState:
    """A search's state as `bench capacity` starts it (its defaults)."""
    return CapacitySearchState(start=setup.start, lowest=0.01, highest=1e4)


_PROFILES: dict[tuple[Setup, str], Profile] = {}


def _profile(setup: Setup, side: str) -> Profile:
    if (setup, side) not in _PROFILES:
        _PROFILES[(setup, side)] = setup.of(side)
    return _PROFILES[(setup, side)]


# --- the truth --------------------------------------------------------------------------


@dataclass(frozen=True)
class TruthSpec:
    side: str
    requests: int
    seeds: tuple[int, ...]


def truth(spec: TruthSpec, setup: Setup) -> float:
    return capacity_truth(
        _profile(setup, spec.side),
        setup.slo.bounds(),
        input_tokens=INPUT_TOKENS,
        output_tokens=OUTPUT_TOKENS,
        requests_per_point=spec.requests,
        seeds=spec.seeds,
    )


# --- running the jobs ---------------------------------------------------------------------

Job = SearchSpec | TruthSpec
_SETUP: list[Setup] = []


def _init(setup: Setup) -> None:
    _SETUP[:] = [setup]


def _task(job: Job) -> SearchFound | float:
    setup = _SETUP[0]
    return search(job, setup) if isinstance(job, SearchSpec) else truth(job, setup)


def dumped(got: SearchFound | float) -> dict[str, object]:
    """One job's result as a line of `--dump`'s JSON Lines (`loaded` reads it back)."""
    if isinstance(got, float):
        return {"truth": got}
    return {
        "side": got.spec.side, "requests": got.spec.requests, "seed": got.spec.seed,
        "repeat": got.spec.repeat, "met": got.met, "estimate": got.estimate,
        "estimate_term": got.estimate_term, "estimate_why": got.estimate_why,
        "binding": None if got.binding is None else list(got.binding),
        "tried": [[x, v, r] for (x, v), r in zip(got.tried, got.read, strict=True)],
    }  # fmt: skip


SEARCH_KEYS = frozenset(("side", "requests", "seed", "repeat", "met", "estimate",
                         "estimate_term", "estimate_why", "binding", "tried"))  # fmt: skip


def loaded(line: object, setup: Setup) -> SearchFound | float:
    """`dumped`'s inverse: the result a line of `--dump` holds (parsed), as its job returned
    it. A search is replayed from its points' verdicts and readings under `setup`'s start and
    SLO (the points it tries, its capacity and its point estimate follow from them); a line
    that is not one `dumped` wrote, or not that of a search from this start under this SLO,
    is a ValueError saying why. A line without "binding" (dumps before it had none): None."""
    if not isinstance(line, dict):
        raise ValueError("not a JSON object")
    if line.keys() == {"truth"}:
        if type(line["truth"]) is not float or not 0 < line["truth"] < math.inf:
            raise ValueError(f"truth {line['truth']!r}: not a rate")
        return float(line["truth"])
    if not SEARCH_KEYS - {"binding"} <= line.keys() <= SEARCH_KEYS:
        raise ValueError(f"fields {', '.join(map(str, line))}: neither a search's nor a truth's")
    side, numbers = line["side"], [line[k] for k in ("requests", "seed", "repeat")]
    if side not in SEED_BASE or not all(type(x) is int and x >= 0 for x in numbers):
        raise ValueError("side, requests, seed or repeat: not a search's")
    state, read, caps, each = replayed(line["tried"], setup)
    est = point_estimate(each, min(caps, default=None))
    given = [line["met"], line["estimate"], line["estimate_term"], line["estimate_why"]]
    if given != [state.met, est.rate, est.term, est.why]:
        raise ValueError(f"met and estimate: not {state.met!r} and {est.rate!r} {est.term!r} "
                         f"{est.why!r}, which its points give")  # fmt: skip
    binding = line.get("binding")
    lowest = state.missed
    if lowest is None:  # every point met
        fits = binding == []
    elif lowest in caps:  # the lowest that did not meet was overloaded
        fits = binding == ["overloaded"]
    else:  # some of the SLO's figures, each once, in order
        figures = sorted(setup.slo.bounds())
        fits = isinstance(binding, list) and [f for f in figures if f in binding] == binding != []
    if binding is not None and not fits:
        raise ValueError(f"binding {binding!r}: not what its points give")
    return SearchFound(
        SearchSpec(str(side), *map(int, numbers)), state.met, tuple(state.tried),
        None if binding is None else tuple(binding), est.rate, est.term, est.why, tuple(read),
    )  # fmt: skip


def replayed(
    points: object, setup: Setup
) -> tuple[
    CapacitySearchState, list[dict[str, float] | None], list[float], dict[str, list[Reading]]
]:
    """A dumped search's points replayed: the search's state after them, each point's
    readings (None: overloaded), the overloaded points and each term's readings; points that
    are not the ones the search tries, in its order to its end, are a ValueError."""
    terms = {f"{figure}_p{q}": (q, bound) for figure, q, bound in setup.slo.terms()}
    state = search_state(setup)
    read: list[dict[str, float] | None] = []
    caps: list[float] = []
    each: dict[str, list[Reading]] = {}
    if not isinstance(points, list):
        raise ValueError("tried: not a list of points")
    for i, point in enumerate(points, 1):
        if not (isinstance(point, list) and len(point) == 3):
            raise ValueError(f"point {i}: not [rate, verdict, readings]")
        (x, verdict, got), due = point, state.next_point()
        if due is None or x != due or verdict not in ("met", "missed", "undecided"):
            where = "the search had ended" if due is None else f"the search tries {due!r}"
            raise ValueError(f"point {i}: {x!r} {verdict!r}, where {where} (another --start?)")
        state.record(due, verdict)
        if got is None and verdict == "missed":  # overloaded
            caps.append(due)
            read.append(None)
            continue
        if not (
            isinstance(got, dict)
            and got
            and got.keys() <= terms.keys()
            and all(type(v) in (int, float) and math.isfinite(v) for v in got.values())
        ):
            raise ValueError(f"point {i}: readings {got!r}, not of the SLO's terms "
                             f"({', '.join(terms)}; another --slo?)")  # fmt: skip
        read.append(dict(got))
        for t, v in got.items():
            each.setdefault(t, []).append(reading(due, *terms[t], v))
    if (due := state.next_point()) is not None:
        raise ValueError(f"{len(points)} points: the search had not ended (it tries {due!r})")
    return state, read, caps, each


RESUME_MAX_BYTES = 64 << 20  # a search's line is under 2 KB: room for tens of thousands


@dataclass(frozen=True)
class Resumed:
    """An earlier `--dump` as --resume reads it: each line's number, text and result."""

    path: str
    lines: tuple[tuple[int, str, SearchFound | float], ...]
    cut: int | None  # the last line's number when it was cut short (left out)


def resume(path: str, setup: Setup) -> Resumed:
    """The results in an earlier `--dump`, read bounded (RESUME_MAX_BYTES). A line that is not
    JSON, or not a result `loaded` reads under `setup`, ends the run with a one-line error
    naming it; a last line without its newline that is not JSON (the run ended while writing
    it) is left out, and said so on stderr."""
    try:
        with open(path, "rb") as f:
            raw = f.read(RESUME_MAX_BYTES + 1)
    except OSError as exc:
        raise SystemExit(f"--resume {path}: cannot read: {exc.strerror}") from None
    if len(raw) > RESUME_MAX_BYTES:
        raise SystemExit(f"--resume {path}: larger than {RESUME_MAX_BYTES:,} bytes, refused")
    texts = raw.split(b"\n")
    ended = texts[-1] == b""  # the file ends with its last line's newline
    if ended:
        texts.pop()
    out: list[tuple[int, str, SearchFound | float]] = []
    for n, data in enumerate(texts, 1):
        try:
            text = data.decode().strip()
            line = json.loads(text)
        except (ValueError, RecursionError) as exc:  # bad UTF-8 and bad JSON are ValueErrors
            if n == len(texts) and not ended:
                print(f"--resume {path}: its last line ({n}) is cut short: left out",
                      file=sys.stderr, flush=True)  # fmt: skip
                return Resumed(path, tuple(out), n)
            raise SystemExit(f"--resume {path}, line {n}: not JSON ({_clip(exc)})") from None
        try:
            out.append((n, text, loaded(line, setup)))
        except (ValueError, RecursionError) as exc:  # RecursionError: repr of a deep line
            raise SystemExit(f"--resume {path}, line {n}: {_clip(exc)}") from None
    return Resumed(path, tuple(out), None)


def _clip(exc: BaseException) -> str:
    what = " ".join(str(exc).split())
    return what if len(what) <= 300 else what[:299] + "…"


def matched(
    got: Resumed, jobs: Sequence[Job], truths: int
) -> tuple[dict[int, SearchFound | float], dict[int, int]]:
    """The resumed results by their job's index in `jobs`, whose first `truths` are the truth
    sets (a dump's truth lines are theirs, in order), and the count of searches at each R
    the jobs do not search at (left out). A search at an R searched that is not one of the
    jobs, a second line of a job, or a truth line past `truths` ends the run with a one-line
    error naming the line."""
    index = {job: i for i, job in enumerate(jobs) if isinstance(job, SearchSpec)}
    searched = {job.requests for job in index}
    done: dict[int, SearchFound | float] = {}
    line_of: dict[int, int] = {}
    aside: dict[int, int] = {}
    t = 0
    for n, _, found in got.lines:
        at = f"--resume {got.path}, line {n}"
        if isinstance(found, float):
            if t >= truths:
                raise SystemExit(f"{at}: a truth set past the {truths} this run computes")
            done[t], t = found, t + 1
            continue
        s = found.spec
        if s.requests not in searched:
            aside[s.requests] = aside.get(s.requests, 0) + 1
        elif (i := index.get(s)) is None:
            raise SystemExit(f"{at}: side {s.side}, R = {s.requests}, seed {s.seed}, repeat "
                             f"{s.repeat}: not a search of this run")  # fmt: skip
        elif i in line_of:
            raise SystemExit(f"{at}: the search of line {line_of[i]} again")
        else:
            done[i], line_of[i] = found, n
    return done, aside


def run_all(
    setup: Setup,
    jobs: Sequence[Job],
    workers: int,
    *,
    dump: str | None = None,
    stop_after: float | None = None,
    must: int = 0,
    kept: Sequence[str] = (),
) -> list[SearchFound | float]:
    """The jobs' results, in the jobs' order; progress on stderr; each result a line of
    `dump` (JSON Lines) as it comes, when given, after the lines `kept` (an earlier dump's,
    resumed). With `stop_after` (seconds), the results of the jobs done by then (the first
    `must` whatever the time): a leading part of the jobs, the rest not run."""
    t0 = time.monotonic()
    every = max(len(jobs) // 40, 1)
    out: list[SearchFound | float] = []
    sink = open(dump, "w") if dump else None  # noqa: SIM115 (closed below)
    if sink is not None:
        sink.writelines(f"{line}\n" for line in kept)
        sink.flush()

    def note() -> None:
        if sink is not None:
            sink.write(json.dumps(dumped(out[-1])) + "\n")
            sink.flush()
        done = len(out)
        if done % every == 0 or done == len(jobs):
            wall = time.monotonic() - t0
            left = wall / done * (len(jobs) - done)
            print(f"  {done}/{len(jobs)} jobs, {wall:.0f} s, about {left:.0f} s left",
                  file=sys.stderr, flush=True)  # fmt: skip

    _init(setup)
    try:

        def late() -> bool:
            return (
                stop_after is not None and len(out) >= must and time.monotonic() - t0 > stop_after
            )

        if workers <= 1 or len(jobs) <= 1:
            for job in jobs:
                out.append(_task(job))
                note()
                if late():
                    break
            return out
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers, initializer=_init, initargs=(setup,)) as pool:
            for got in pool.imap(_task, jobs, chunksize=1):
                out.append(got)
                note()
                if late():
                    break  # the pool's other work is ended with it
        return out
    finally:
        if sink is not None:
            sink.close()


# --- compares ---------------------------------------------------------------------------


# What a compare judges: "estimates", as `bench compare` reads a capacity run today (each
# search's point estimate, when every search on both sides has one; else the bounds), or
# "bounds", as it read one before (each search's `met`, the estimates not given).
BASES = ("estimates", "bounds")


def run_of(name: str, what: str, found: Sequence[SearchFound], basis: str) -> RunFigures:
    """A `bench capacity` run as `bench compare` reads it (bench.verdict.workload_cells):
    its searches' bounds, point estimates (not given for BASIS "bounds") and count."""
    estimated = basis == "estimates"
    return RunFigures(
        name=name,
        kind="run",
        speed_factor=1.0,
        metadata={},
        cells={},
        contexts=(),
        concurrencies=(),
        capacity_of=what,
        capacity=tuple(f.met for f in found if f.met is not None and f.met > 0),
        capacity_estimate=tuple(
            f.estimate for f in found if estimated and f.estimate is not None and f.estimate > 0
        ),
        capacity_searches=len(found) if estimated else 0,
    )


def delta(
    what: str,
    a: Sequence[SearchFound],
    b: Sequence[SearchFound],
    alpha: float,
    basis: str = "estimates",
) -> CapacityDelta:
    """`bench compare`'s judgement of two sides' capacities."""
    got = judge(run_of("A", what, a, basis), run_of("B", what, b, basis), alpha)
    assert got is not None
    return got


@dataclass(frozen=True)
class Tally:
    n: int
    flagged: int  # CHANGED (A/A); CHANGED with B lower (power)
    other: int  # A/A: flagged with both sides' values all equal; power: B found higher
    on_estimates: int = 0  # compares judged on the point estimates (the rest on the bounds)


Pairs = Sequence[tuple[Sequence[SearchFound], Sequence[SearchFound]]]


def aa(what: str, pairs: Pairs, alpha: float, basis: str = "estimates") -> Tally:
    flagged = flat = on_estimates = 0
    for a, b in pairs:
        d = delta(what, a, b, alpha, basis)
        flagged += d.changed
        flat += d.changed and len(set(d.a)) == 1 and len(set(d.b)) == 1
        on_estimates += d.basis == "point estimates"
    return Tally(len(pairs), flagged, flat, on_estimates)


def power(what: str, pairs: Pairs, alpha: float, basis: str = "estimates") -> Tally:
    lower = higher = on_estimates = 0
    for a, b in pairs:
        d = delta(what, a, b, alpha, basis)
        lower += d.changed and (d.delta_pct or 0.0) < 0
        higher += d.changed and (d.delta_pct or 0.0) > 0
        on_estimates += d.basis == "point estimates"
    return Tally(len(pairs), lower, higher, on_estimates)


# --- the table --------------------------------------------------------------------------


def share(k: int, n: int) -> str:
    """k of n with its 95 % Wilson interval."""
    if n == 0:
        return "—"
    z = 1.96
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    low, high = max(centre - half, 0.0), min(centre + half, 1.0)
    return f"{k}/{n} = {p:.1%} ({low:.1%}–{high:.1%})"


def pct(xs: Sequence[float], q: float) -> float:
    return stats.percentile(list(xs), q)


def median(found: Sequence[SearchFound], of: str = "met") -> float:
    return pct([getattr(f, of) or 0.0 for f in found], 50)


def sd_log(xs: Iterable[float | None]) -> float:
    logs = [math.log(x) for x in xs if x]
    return statistics.stdev(logs) if len(logs) > 1 else math.nan


def within(ratios: Sequence[float]) -> int:
    return sum(abs(r - 1.0) <= WITHIN for r in ratios)


@dataclass(frozen=True)
class Accuracy:
    requests: int
    ratios: tuple[float, ...]  # the bound (met) / truth (0.0: the search found none)
    estimates: tuple[float, ...]  # the point estimate / truth (0.0: the search gave none)
    points: float  # points a search measured, mean

    def within(self) -> int:
        return within(self.ratios)

    def row(self) -> str:
        r = self.ratios
        return (
            f"| {self.requests:,} | {share(self.within(), len(r))} | {pct(r, 50):.3f} | "
            f"{pct(r, 5):.3f} – {pct(r, 95):.3f} | {self.points:.1f} |"
        )

    def estimate_row(self) -> str:
        e = self.estimates
        given = [x for x in e if x > 0]
        spread = sd_log(given)
        return (
            f"| {self.requests:,} | {share(within(e), len(e))} | {pct(e, 50):.3f} | "
            f"{pct(e, 5):.3f} – {pct(e, 95):.3f} | {spread:.1%} | {len(e) - len(given)} |"
        )


def accuracy(requests: int, found: Sequence[SearchFound], truth_a: float) -> Accuracy:
    return Accuracy(
        requests,
        tuple((f.met or 0.0) / truth_a for f in found),
        tuple((f.estimate or 0.0) / truth_a for f in found),
        statistics.fmean(len(f.tried) for f in found),
    )


def binding(found: Sequence[SearchFound]) -> str:
    """How often each figure (or the backlog) stopped a search, at its lowest point that did
    not meet."""
    counts: dict[str, int] = {}
    for f in found:
        key = (
            "not known (resumed from a dump without it)"
            if f.binding is None
            else " and ".join(f.binding) or "none (no point failed)"
        )
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


# --- main -------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.capacity_power")
    p.add_argument("--profile", default=PROFILE, help="the twin's profile (A)")
    p.add_argument("--slo", default=SLO_TEXT, help="the SLO searched")
    p.add_argument("--start", type=float, default=2.0, help="bench capacity's --start")
    p.add_argument("--accuracy-requests", type=int, nargs="+", default=[500, 2000, 5000],
                   metavar="R", help="R (requests a point) of the accuracy rows")  # fmt: skip
    p.add_argument("--searches", type=int, default=200, help="searches an accuracy row")
    p.add_argument("--requests", type=int, default=5000, help="R of the compares")
    p.add_argument("--compares", type=int, default=60,
                   help="sides a profile: as many A/A and as many A/B compares (even; 0: "
                   "accuracy only, no B)")  # fmt: skip
    p.add_argument("--repeats", type=int, default=3, help="K, searches a side")
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--truth-requests", type=int, default=5000, help="requests a truth stream")
    p.add_argument("--truth-seeds", type=int, default=2, help="streams a truth set")
    p.add_argument("--truth-sets", type=int, default=6, help="disjoint truth sets a profile")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--truth-given", type=float, nargs="+", metavar="X", default=None,
                   help="A's truth sets' values as an earlier run computed them (its table or "
                   "--dump), not computed again")  # fmt: skip
    p.add_argument("--stop-after", type=float, default=None, metavar="S",
                   help="accuracy only (--compares 0): after S seconds, the table of the searches "
                   "done by then")  # fmt: skip
    p.add_argument("--dump", metavar="FILE", default=None,
                   help="each truth set's and search's result as a JSON line")  # fmt: skip
    p.add_argument(
        "--resume",
        metavar="FILE",
        default=None,
        help="an earlier run's --dump: its results are taken, only the jobs not in "
        "it are run (with --dump, a file other than FILE, the new dump holds both)",
    )
    p.add_argument("--quick", action="store_true",
                   help="a few small searches: the harness end to end in seconds")  # fmt: skip
    return p


QUICK = {
    "accuracy_requests": [1000],
    "searches": 4,
    "requests": 1000,
    "compares": 2,
    "repeats": 2,
    "truth_requests": 1000,
    "truth_seeds": 1,
    "truth_sets": 2,
}


@dataclass(frozen=True)
class PowerReport:
    """What `main` prints, for a caller (the unit test) to read."""

    truth_a: float
    truth_b: float
    accuracy: tuple[Accuracy, ...]
    aa: dict[float, Tally]
    power: dict[float, Tally]
    lines: tuple[str, ...]
    found: tuple[SearchFound | float, ...]  # every job's result, in the jobs' order
    resumed: int  # of them, read from --resume's file (the others run now)


def measure(args: argparse.Namespace, argv: Sequence[str]) -> PowerReport:
    t0 = time.monotonic()
    slo = slo_rules.parse(args.slo)
    setup = Setup(args.profile, slo, args.start)
    what = f"rate at {slo_rules.text(slo)}"
    k, n, r0 = args.repeats, args.compares, args.requests
    if n < 0 or n % 2:
        raise SystemExit("--compares must be even (A/A pairs the sides); 0: no compares")
    rows = sorted(set(args.accuracy_requests))

    truth_jobs = [
        TruthSpec(side, args.truth_requests,
                  tuple(range(s * args.truth_seeds, (s + 1) * args.truth_seeds)))
        for side in (("A", "B") if n else ("A",))
        for s in range(args.truth_sets)
        if not (side == "A" and args.truth_given)
    ]  # fmt: skip
    sides = {
        name: [[SearchSpec(name, r0, SEED_BASE[name] + i, j) for j in range(k)] for i in range(n)]
        for name in ("A", "B")
    }
    # Accuracy row R: searches of A's sides' seeds and repeats, in order; at the compares' R
    # they are A's sides' searches, run once.
    acc = {
        r: [SearchSpec("A", r, SEED_BASE["A"] + i // k, i % k) for i in range(args.searches)]
        for r in rows
    }
    jobs: list[Job] = list(truth_jobs)
    seen: set[SearchSpec] = set()
    # The rows' searches interleaved (the first of each row, then the second, ...): a run
    # stopped by --stop-after has every row in part.
    for spec in [*(s for name in sides for side in sides[name] for s in side),
                 *(acc[r][i] for i in range(args.searches) for r in rows)]:  # fmt: skip
        if spec not in seen:
            seen.add(spec)
            jobs.append(spec)
    given = list(args.truth_given or ())
    if given and len(given) != args.truth_sets:
        raise SystemExit(f"--truth-given: {len(given)} values for --truth-sets {args.truth_sets}")
    ran = run_jobs(args, setup, jobs, len(truth_jobs))
    done = ran.results
    truths = [x for i in range(len(truth_jobs)) if isinstance(x := done.get(i), float)]
    by = {f.spec: f for i in sorted(done) if isinstance(f := done[i], SearchFound)}
    stopped = len(done) < len(jobs)
    if stopped and (n or len(truths) < len(truth_jobs)):
        raise SystemExit(
            f"--stop-after: {len(done)} of {len(jobs)} jobs done; the truth and the compares "
            "need all of theirs (--resume a --dump to finish)"
        )
    leading = True  # each row's searches done are its first ones
    if stopped:
        held = {r: [s for s in specs if s in by] for r, specs in acc.items()}
        leading = all(held[r] == acc[r][: len(held[r])] for r in rows)
        acc = held
    truths = [*given, *truths]
    t_a, t_b = truths[: args.truth_sets], truths[args.truth_sets :]
    truth_a = statistics.fmean(t_a)
    truth_b = statistics.fmean(t_b) if t_b else math.nan
    accs = tuple(accuracy(r, [by[s] for s in acc[r]], truth_a) for r in rows if acc[r])

    def se(xs: Sequence[float]) -> str:
        return f"{statistics.stdev(xs) / math.sqrt(len(xs)):.3f}" if len(xs) > 1 else "?"

    def sets(xs: Sequence[float]) -> str:
        return ", ".join(f"{x:.3f}" for x in xs)

    per_set = args.truth_seeds * args.truth_requests
    spread = sd_log(t_a)
    # A rate's crossing from N requests spreads as the truth's sets do, as 1/sqrt(N): within
    # 5 % in 95 % takes an sd of 5 % / 1.96.
    need = per_set * (spread / (WITHIN / 1.96)) ** 2 if math.isfinite(spread) else math.nan
    lines = [
        f"`{shlex.join(['python', '-m', 'tools.capacity_power', *argv])}`",
        "",
        *([resumed_from(ran, args.dump), ""] if args.resume else []),
        f"Twin profile `{args.profile}` (A)"
        + (f" and A with every decode step x {SLOWER:g} (B)" if n else "")
        + f", input {INPUT_TOKENS} / output {OUTPUT_TOKENS} tokens, Poisson arrivals, SLO "
        f"`{slo_rules.text(slo)}`, in virtual time. A search: bench capacity's from "
        f"--start {args.start:g} (x2 bracketing, bisection to high / low <= 1.05, at most 12 "
        "points), each point R requests from idle, judged by MLPerf's early stopping.",
        "",
        f"True capacity (capacity_truth on {args.truth_sets} disjoint sets of "
        f"{args.truth_seeds} stream(s) x {args.truth_requests:,} requests a rate; mean ± "
        "standard error"
        + ("; A's sets as given by --truth-given, not computed in this run" if given else "")
        + "):",
        "",
        f"- A: {truth_a:.3f} ± {se(t_a)} req/s (sets: {sets(t_a)}; sd of a set's log {spread:.1%})",
        *(
            [
                f"- B: {truth_b:.3f} ± {se(t_b)} req/s (sets: {sets(t_b)}; {sd_log(t_b):.1%}); "
                f"B against A {truth_b / truth_a - 1:+.1%}"
            ]
            if t_b
            else []
        ),
        "",
        f"Accuracy on A: {args.searches} searches a row (workload seeds "
        f"{SEED_BASE['A']}–{SEED_BASE['A'] + (args.searches - 1) // k}, repeats "
        f"0–{k - 1}); found / truth against A's truth above."
        + (
            f" Stopped by --stop-after {args.stop_after:g}: the rows' "
            + ("first " if leading else "")
            + ", ".join(f"{len(a.ratios)} (R = {a.requests:,})" for a in accs)
            + (
                " searches, in the seeds' order."
                if leading
                else " searches done (not each row's first: the file resumed held others)."
            )
            if stopped
            else ""
        ),
        "",
        "The bound (the search's `met`: the highest rate shown to meet the SLO at 99 % "
        "confidence, a lower bound by design):",
        "",
        "| R (requests a point) | capacity within 5 % of the truth | found / truth, median "
        "| 5th – 95th percentile | points a search |",
        "|---|---|---|---|---|",
        *(a.row() for a in accs),
        "",
        "The point estimate (bench.workload.search.point_estimate: where the points' measured "
        "p99, smoothed to rise with the rate, crosses its bound, interpolated in log rate and "
        "log p99; the lowest over the SLO's terms):",
        "",
        "| R (requests a point) | estimate within 5 % of the truth | estimate / truth, median "
        "| 5th – 95th percentile | sd of its log | searches with no estimate |",
        "|---|---|---|---|---|---|",
        *(a.estimate_row() for a in accs),
        "",
        f"By the truth's own spread (sd {spread:.1%} of a set's log at {per_set:,} requests a "
        f"rate, shrinking as 1/sqrt(requests)), a rate's p99 crossing is within 5 % of the "
        f"truth in 95 % from about {need:,.0f} requests at the crossing.",
        "Which term gave each estimate: "
        + "; ".join(f"R = {a.requests:,}: {terms(acc[a.requests], by)}" for a in accs)
        + ".",
    ]
    aas: dict[float, Tally] = {}
    pws: dict[float, Tally] = {}
    if n:
        aas, pws, more = compares(what, args, by, sides, r0 >= max(rows))
        lines += ["", *more]
    lines += ["", ran.footer(f"in {time.monotonic() - t0:.0f} s on {args.workers} worker(s).")]
    found = tuple(done[i] for i in sorted(done))
    return PowerReport(truth_a, truth_b, accs, aas, pws, tuple(lines), found, sum(ran.old))


def counted(results: Sequence[SearchFound | float]) -> tuple[int, int]:
    """How many of `results` are searches, and how many truth sets."""
    searches = sum(isinstance(x, SearchFound) for x in results)
    return searches, len(results) - searches


@dataclass(frozen=True)
class JobsDone:
    """The jobs' results by index: those --resume's file held and those run now."""

    results: dict[int, SearchFound | float]
    got: Resumed  # what --resume read
    aside: dict[int, int]  # searches in it at each R not searched, left out
    old: tuple[int, int]  # searches and truth sets from --resume's file
    now: tuple[int, int]  # searches and truth sets run now

    def footer(self, took: str) -> str:
        (s0, t0), (s1, t1) = self.old, self.now
        if not self.got.path:
            return f"{s1} searches and {t1} truth sets {took}"
        return (
            f"{s0 + s1} searches and {t0 + t1} truth sets: {s0} and {t0} from --resume, "
            f"{s1} and {t1} run now {took}"
        )


def run_jobs(args: argparse.Namespace, setup: Setup, jobs: Sequence[Job], truths: int) -> JobsDone:
    """The jobs' results (the first `truths` jobs are the truth sets): with --resume, those
    its file holds, and the others run; with --stop-after, a leading part of the others."""
    done: dict[int, SearchFound | float] = {}
    aside: dict[int, int] = {}
    got = Resumed("", (), None)
    if args.resume:
        got = resume(args.resume, setup)
        if args.dump and os.path.exists(args.dump) and os.path.samefile(args.dump, args.resume):
            raise SystemExit("--dump: the file --resume reads; give another (it gets both)")
        done, aside = matched(got, jobs, truths)
    todo = [i for i in range(len(jobs)) if i not in done]
    old = counted(list(done.values()))
    print(f"{truths} truth sets and {len(jobs) - truths} searches"
          + (f" ({len(done)} of them from --resume {args.resume})" if args.resume else "")
          + f" on {args.workers} worker(s)", file=sys.stderr, flush=True)  # fmt: skip
    results = run_all(
        setup, [jobs[i] for i in todo], args.workers, dump=args.dump,
        stop_after=args.stop_after, must=sum(i < truths for i in todo),
        kept=[text for _, text, _ in got.lines],
    )  # fmt: skip
    done.update(zip(todo, results, strict=False))  # those run: a leading part of todo
    return JobsDone(done, got, aside, old, counted(results))


def resumed_from(ran: JobsDone, dump: str | None) -> str:
    """The table's line on what --resume read and what was run now."""
    (s0, t0), (s1, t1) = ran.old, ran.now
    return (
        f"Resumed from `{ran.got.path}`: {s0} searches and {t0} truth sets read from it, "
        f"{s1} searches and {t1} truth sets run now"
        + "".join(
            f"; its {c} searches at R = {r:,}, not a row of this run, left out of the tables"
            + (" (kept in --dump)" if dump else "")
            for r, c in sorted(ran.aside.items())
        )
        + (f"; its last line ({ran.got.cut}), cut short, left out" if ran.got.cut else "")
        + "."
    )


def terms(specs: Sequence[SearchSpec], by: dict[SearchSpec, SearchFound]) -> str:
    counts: dict[str, int] = {}
    for spec in specs:
        f = by[spec]
        key = f.estimate_term or f"none ({f.estimate_why})"
        counts[key] = counts.get(key, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def compares(
    what: str,
    args: argparse.Namespace,
    by: dict[SearchSpec, SearchFound],
    sides: dict[str, list[list[SearchSpec]]],
    largest: bool,
) -> tuple[dict[float, Tally], dict[float, Tally], list[str]]:
    """The compares' table and lines (module docstring, 4)."""
    k, n, r0 = args.repeats, args.compares, args.requests
    got = {name: [[by[s] for s in side] for side in v] for name, v in sides.items()}
    aa_pairs = [(x[i], x[i + 1]) for x in (got["A"], got["B"]) for i in range(0, n, 2)]
    ab_pairs = list(zip(got["A"], got["B"], strict=True))
    alphas = sorted({args.alpha, COMPARE_ALPHA}, reverse=True)
    every = {
        (basis, x): (aa(what, aa_pairs, x, basis), power(what, ab_pairs, x, basis))
        for basis in BASES
        for x in alphas
    }
    aas = {x: every["estimates", x][0] for x in alphas}
    pws = {x: every["estimates", x][1] for x in alphas}
    deltas = {
        basis: [
            d.delta_pct
            for a, b in ab_pairs
            if (d := delta(what, a, b, alphas[0], basis)).delta_pct is not None
        ]
        for basis in BASES
    }
    judged = {"estimates": "the point estimates (bench compare)", "bounds": "the bounds"}
    on = aas[alphas[0]].on_estimates + pws[alphas[0]].on_estimates
    flat_a = [f for side in got["A"] for f in side]
    flat_b = [f for side in got["B"] for f in side]
    why_r = (
        " (the largest R above: its searches the least biased and the least noisy, which the "
        "power needs)"
        if largest
        else ""
    )
    lines = [
        f"Compares at R = {r0:,}{why_r}: {n} sides of K = {k} searches a profile, each side its "
        f"own workload seed; A/A: sides 2j and 2j + 1 of one profile ({n // 2} on A, "
        f"{n // 2} on B); power: side i of A against side i of B; "
        "bench.verdict.capacity_delta.judge (Welch on the logs), on each search's point "
        "estimate as `bench compare` judges capacity runs (the bounds where a search on "
        "either side gave no estimate), and on the bounds alone as it judged them before.",
        "",
        "| compared | alpha | A/A: flagged CHANGED | of them, both sides' values all equal | "
        "power: B found lower | B found higher |",
        "|---|---|---|---|---|---|",
        *(
            f"| {judged[basis]} | {x:g}{' (bench compare)' if x == COMPARE_ALPHA else ''} | "
            f"{share(t.flagged, t.n)} | {t.other} | {share(p.flagged, p.n)} | "
            f"{share(p.other, p.n)} |"
            for (basis, x), (t, p) in every.items()
        ),
        "",
        f"Compares judged on the point estimates: {on} of {len(aa_pairs) + len(ab_pairs)} "
        "(the rest on the bounds: a search without an estimate).",
        f"The searches at R = {r0:,}: A's bound median {median(flat_a):.3f} req/s, sd of "
        f"its log {sd_log(f.met for f in flat_a):.1%}; B's {median(flat_b):.3f}, "
        f"{sd_log(f.met for f in flat_b):.1%}. Their point estimates: A's median "
        f"{median(flat_a, 'estimate'):.3f} req/s, sd of its log "
        f"{sd_log(f.estimate for f in flat_a):.1%}; B's {median(flat_b, 'estimate'):.3f}, "
        f"{sd_log(f.estimate for f in flat_b):.1%}.",
        *(
            f"B against A in a compare of {judged[basis]}: median "
            f"{pct(deltas[basis], 50):+.1f} % (5th – 95th percentile "
            f"{pct(deltas[basis], 5):+.1f} – {pct(deltas[basis], 95):+.1f} %)."
            for basis in BASES
        ),
        f"What stopped each search (not met at its lowest point that did not meet): "
        f"A: {binding(flat_a)}; B: {binding(flat_b)}.",
    ]
    return aas, pws, lines


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(argv)
    if args.quick:
        for key, value in QUICK.items():
            setattr(args, key, value)
    print("\n".join(measure(args, argv).lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
