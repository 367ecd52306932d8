"""The records of a workload run in results.json (schema 5): each point's figures, their
intervals, its validity and its SLO checks. `bench.workload.figures` fills them from the
point's requests; docs/workloads.md defines every figure.

Times follow results.json's speed convention: client seconds as measured, rates per client
second (multiply durations by the speed factor, divide rates by it, for server time).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from bench.failures import ErrorKind
from bench.workload_spec import Rate, Workload

# valid: measured and kept to its schedule. overloaded: the backlog grew to the end of the
# arrivals (a finding about the server: it cannot serve this rate). late_client: the client
# did not keep to its schedule (its figures are not of the offered rate). failed: more
# requests failed than the bound allows. interrupted: the run stopped during it.
PointStatus = Literal["valid", "overloaded", "late_client", "failed", "interrupted"]
SloVerdict = Literal["met", "missed", "undecided"]


class _PointModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Quantiles(_PointModel):
    """A figure over a point's requests: mean, p50/p90/p99 with their distribution-free 95 %
    intervals (order statistics; None when too few requests for one), min and max."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    p50_ci: tuple[float, float] | None = None
    p90_ci: tuple[float, float] | None = None
    p99_ci: tuple[float, float] | None = None
    min: float
    max: float


class SloCheck(_PointModel):
    """One percentile's bound judged by MLPerf's early-stopping rule at `confidence`."""

    figure: Literal["ttft", "tpot", "e2el"]
    percentile: int = 99  # the bound is on this percentile (MLPerf's: 99)
    bound_s: float  # client seconds (the workload's server-time bound / speed factor)
    n: int  # requests judged (those with the figure)
    over: int  # of them, over the bound
    verdict: SloVerdict
    # The requests more, each under the bound, it would take to meet it: 0 when met; None
    # past bench.workload.slo.MAX_MORE.
    more_needed: int | None = None
    confidence: float = 0.99


class PointResult(_PointModel):
    index: int  # the point's place in the workload (0, 1, ...)
    trial: int = 0
    offered_rate: Rate | None = None  # requests per client second; inf: all at once
    concurrency: int | None = None  # closed-count points
    status: PointStatus
    reasons: tuple[str, ...] = ()  # why not valid, one line each
    notes: tuple[str, ...] = ()  # what a reader should know (early stops under ignore_eos)
    requests: int  # measured requests sent (warm-ups not counted)
    completed: int  # ended normally
    failures_by_kind: dict[ErrorKind, int] = Field(default_factory=dict)
    warmups: int = 0
    stopped_early: int = 0  # ended normally with fewer tokens than asked under ignore_eos
    unfinished: int = 0  # still running at the point's bound, cancelled
    duration_s: float  # first send to last end
    arrival_span_s: float  # first to last scheduled send
    sent_rate: float | None = None  # (sent - 1) / span: the rate the client offered
    scheduled_rate: float | None = None  # (requests - 1) / span of the schedule itself
    achieved_rate: float  # completed / duration
    input_tokens: int  # usage prompt tokens of completed requests
    output_tokens: int  # usage completion tokens of completed requests
    output_tok_s: float  # output_tokens / duration
    total_tok_s: float  # (input + output) / duration
    ttft: Quantiles | None = None
    tpot: Quantiles | None = None  # per request (e2el - ttft) / (tokens - 1), tokens > 1
    itl: Quantiles | None = None  # every gap between consecutive token chunks
    e2el: Quantiles | None = None  # request written to stream end
    lateness: Quantiles | None = None  # send time - scheduled time (open loop)
    held: Quantiles | None = None  # time spent waiting for max_in_flight (open loop, capped)
    backlog_mid: int | None = None  # requests in flight at the middle scheduled send
    backlog_end: int | None = None  # requests in flight at the last scheduled send
    goodput_rate: float | None = None  # completed requests within every SLO bound / duration
    slo: tuple[SloCheck, ...] = ()
    started_at_s: float | None = None  # seconds since the run's clock anchor


class CapacitySearch(_PointModel):
    """One search for the SLO capacity (bench.workload.search): every point it tried, in
    order, with its verdict, and the bracket it ended with. Rates in client requests/s."""

    repeat: int
    tried: tuple[tuple[float, SloVerdict], ...] = ()
    met: float | None = None  # the highest point shown to meet, below every other
    missed: float | None = None  # the lowest point not shown to meet
    note: str | None = None
    # The point estimate beside the bound `met` (bench.workload.search.point_estimate): the
    # rate where the points' measured percentile crosses its bound (the lowest over the SLO's
    # terms), the term that gave it, or None and why there is none. Absent before it was kept.
    crossing: float | None = None
    crossing_term: str | None = None
    crossing_note: str | None = None


class CapacityRun(_PointModel):
    """`bench capacity`: the searches, and the capacity over them (client units; rates
    divide by the speed factor for server time, concurrencies do not)."""

    by: Literal["rate", "concurrency"]
    slo: str  # the bounds searched against, as given (server time)
    method: str  # the search, in words (bracketing factor, tolerance, bounds)
    # The search's options as given (`bench capacity`'s flags; a recipe repeats them).
    start: float = 1.0
    lowest: float = 0.01
    highest: float = 1e4
    tolerance: float = 0.05
    repeats: int = 1
    max_points: int = 12
    searches: tuple[CapacitySearch, ...] = ()
    # The bound: the geometric mean of the searches' `met` (each the highest rate shown to
    # meet, a lower bound), and its 95 % t-interval over searches (two or more that found
    # one); None when none did.
    estimate: float | None = None
    interval: tuple[float, float] | None = None
    # The point estimate: the geometric mean of the searches' `crossing`, and its 95 %
    # t-interval over them; None when none gave one (and in runs made before it was kept).
    crossing: float | None = None
    crossing_interval: tuple[float, float] | None = None
    server_s: float = 0.0  # server seconds the searches' points took, warm-ups included


class WorkloadRun(_PointModel):
    """What `bench run --workload` ran and measured."""

    workload: Workload
    source: str  # the preset's name, or the file's name as given
    sha256: str  # of the workload as run (its canonical JSON, overrides applied)
    points: tuple[PointResult, ...] = ()
    # How prompts were sized to their drawn lengths: the server's /tokenize, or a line
    # fitted to two probes' usage (bench.run.prompts); requested vs measured is per point.
    prompt_sizing: Literal["tokenize", "usage_calibrated"] = "tokenize"
    tokens_per_word: float | None = None  # the fitted line's slope
    gpus: int | None = None  # for per-GPU figures, as given or seen by nvidia-smi
    capacity: CapacityRun | None = None  # a `bench capacity` run's search
