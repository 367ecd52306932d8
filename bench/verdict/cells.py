"""What a verdict compares: per cell, the card's figures at server speed, one value per trial.

A cell is (phase, context, concurrency); prefill rows are ("prefill", context, 1). Both
a published card and a run's results become a `RunFigures`, so reproduce and compare
never look at either format directly.

Noise floor of a single run ("rse", relative standard error of a figure, from the run's
own spread, used when there are no repeated trials):
  - TTFT, TBT: the cell shows a median over n requests; its standard error is taken as
    1.2533 x s / sqrt(n) (the median's efficiency for a normal sample), with the spread s
    estimated robustly from the order statistics as (p90 - p50) / 1.2816. rse = that / p50.
  - per-request tok/s = 1 / TBT: to first order the same relative error as TBT.
  - total tok/s: a sum over the requests in the window; its relative error is the relative
    spread of the requests' TBT over sqrt(requests). With fewer than two requests (C = 1
    at long contexts), the gaps between chunks of the one request stand in (sd / mean /
    sqrt(gaps)), with sd again (p90 - p50) / 1.2816.
  - prefill figures come from one request: no spread, rse unknown (None).
These underestimate run-to-run variation (clocks, thermals, placement), which is why a
verdict also applies a minimum effect size; see `compare.Policy`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Literal

from bench import bounds
from bench.answers import Fingerprint

# "workload": a point of a workload run (bench.workload_points), keyed (phase, its label, C).
Phase = Literal["prefill", "decode", "workload"]
Status = Literal[
    "valid",
    "over_capacity",
    "not_run",
    "failed",
    "not_ready",
    "invalid",
    "interrupted",
    "gpu_throttled",
]
# A cell measured but not to be trusted: never "reproduced" nor "unchanged". A
# gpu_throttled cell (results.json's flag, bench.run.gpu_validity) keeps its figures and
# becomes valid when the user accepts the flag (`accepting`).
UNTRUSTED: frozenset[str] = frozenset(
    {"failed", "not_ready", "invalid", "interrupted", "gpu_throttled"}
)
# Flags on a run's cells a verdict judges only when accepted by name (--accept NAME).
CELL_FLAGS: tuple[str, ...] = ("gpu_throttled",)
# No figures at all: the cell did not fit (over capacity) or was not run. A cell with this
# status on both sides was measured by neither: never counted among the compared cells.
UNMEASURED: frozenset[str] = frozenset({"over_capacity", "not_run"})
Trust = Literal["card", "signed", "unsigned", "unverified"]
Kind = Literal["throughput", "latency"]
Key = tuple[str, str, int]  # phase, context label, concurrency

_MEDIAN_EFFICIENCY = 1.2533  # sqrt(pi / 2)
_Z90 = 1.2816  # standard normal quantile at 0.90


@dataclass(frozen=True)
class MetricSpec:
    name: str
    label: str
    phase: Phase
    kind: Kind
    higher_is_better: bool
    unit: str  # how it is shown: "tok/s" or "ms"
    decimals: int = 1  # as on the card: tok/s and TBT to 0.1, TTFT to 1 ms

    def show(self, value: float | None) -> str:
        if value is None:
            return "—"
        if self.unit == "ms":
            return f"{value * 1000.0:,.{self.decimals}f} ms"
        return f"{value:,.{self.decimals}f}"


METRICS: tuple[MetricSpec, ...] = (
    MetricSpec("total_tok_s", "Total tok/s", "decode", "throughput", True, "tok/s"),
    MetricSpec("per_request_tok_s", "Per request tok/s", "decode", "throughput", True, "tok/s"),
    MetricSpec("ttft_s", "TTFT", "decode", "latency", False, "ms", 0),
    MetricSpec("tbt_s", "Time between tokens", "decode", "latency", False, "ms"),
    MetricSpec("prefill_tok_s", "Prefill tok/s", "prefill", "throughput", True, "tok/s"),
    MetricSpec("prefill_ttft_s", "Prefill TTFT", "prefill", "latency", False, "ms", 0),
    # A workload point's figures (docs/workloads.md): output tok/s over the point, and the
    # p50 and p99 over its completed requests.
    MetricSpec("wl_output_tok_s", "Output tok/s", "workload", "throughput", True, "tok/s"),
    MetricSpec("wl_ttft_p50_s", "TTFT p50", "workload", "latency", False, "ms", 0),
    MetricSpec("wl_ttft_p99_s", "TTFT p99", "workload", "latency", False, "ms", 0),
    MetricSpec("wl_tpot_p50_s", "TPOT p50", "workload", "latency", False, "ms"),
    MetricSpec("wl_tpot_p99_s", "TPOT p99", "workload", "latency", False, "ms"),
)
BY_NAME = {m.name: m for m in METRICS}


def metrics_of(phase: str) -> tuple[MetricSpec, ...]:
    return tuple(m for m in METRICS if m.phase == phase)


@dataclass(frozen=True)
class Cell:
    phase: Phase
    context: str
    concurrency: int
    status: Status
    detail: str | None = None
    # One value per valid trial, at server speed, by metric name.
    trials: dict[str, tuple[float, ...]] = field(default_factory=dict)
    rse: dict[str, float] = field(default_factory=dict)
    # Which run (one server start, or one trial of it) each trial value came from, in the
    # order of the values; () = value j is run j. Cells of one run share its run factor.
    runs: tuple[int, ...] = ()
    # Trials the cell was run in, valid or not; 0 = as many as it has values (a card, another
    # tool's file). Trials with no figures (a request failed, the run stopped) among valid
    # ones are left out of its values, and `left_out` says what they were ("1 invalid:
    # stream cut"): the cell is judged on its valid trials, and says so (`trials_note`).
    trials_run: int = 0
    left_out: str | None = None

    @property
    def key(self) -> Key:
        return (self.phase, self.context, self.concurrency)

    @property
    def valid_trials(self) -> int:
        """How many trials its values come from."""
        return max((len(v) for v in self.trials.values()), default=0)

    @property
    def trials_count(self) -> str | None:
        """For a judged cell whose values are fewer trials than it ran, how many they are:
        "2 of 3 trials valid"; None when every trial is in its values (or it is not judged)."""
        valid = self.valid_trials
        if self.status not in ("valid", "gpu_throttled") or self.left_out is None:
            return None
        if valid == 0 or self.trials_run <= valid:
            return None
        return f"{valid} of {self.trials_run} trials valid"

    @property
    def trials_note(self) -> str | None:
        """`trials_count` and what the other trials were: "2 of 3 trials valid; 1 invalid:
        stream cut"."""
        count = self.trials_count
        return None if count is None else f"{count}; {self.left_out}"

    def run_ids(self, metric: str) -> tuple[int, ...]:
        """The run of each of `metric`'s trial values (positions when not recorded)."""
        n = len(self.trials.get(metric, ()))
        return self.runs if len(self.runs) == n else tuple(range(n))

    def value(self, metric: str) -> float | None:
        values = self.trials.get(metric, ())
        return math.fsum(values) / len(values) if values else None


@dataclass(frozen=True)
class RunFigures:
    name: str
    kind: Literal["card", "run"]
    speed_factor: float
    metadata: dict[str, str]
    cells: dict[Key, Cell]
    contexts: tuple[str, ...]  # row order for tables
    concurrencies: tuple[int, ...]
    # Where the figures come from: a card, a bundle whose signature was verified, a run
    # directory that is no bundle (unsigned), or an input read with --unverified.
    trust: Trust = "card"
    provenance: str = ""
    # The settings both sides of a verdict must share (see `bench.verdict.settings`).
    settings: dict[str, str] = field(default_factory=dict)
    twin: bool = False
    # Server seconds the input's sweeps took, one entry per run (trial bundle): from the
    # run's start to the end of its last measured window, times the speed factor. Server
    # starts and image pulls are not in it (a bundle does not record them).
    server_s: tuple[float, ...] = ()
    # Seconds from a server's launch to healthy, one entry per run that recorded it
    # (environment.json's server_start.ready_after_s).
    start_s: tuple[float, ...] = ()
    # The cells the input set out to measure (its plan's decode cells and prefill rows);
    # None = every cell it has. A run of a sequential compare plans the open cells only.
    planned: frozenset[Key] | None = None
    # Where the run's software and weights came from (`bench.bundle.provenance`), for the header.
    weights: str = ""  # "weights: M at REV, pinned" / "not pinned" / "not applicable (twin)"
    model_revision: str | None = None
    image_id: str | None = None
    packages: dict[str, str] | None = None  # the server's package freeze, name -> version
    # What makes this input the run it is ("run id X", "manifest SHA", "records SHA"): two
    # inputs sharing one are the same run given twice (see run_source.refuse_repeats).
    identities: frozenset[str] = frozenset()
    # What each run answered before its sweep (bench.answers), one entry per run; None for a
    # run without a fingerprint (made before schema 3, or with --no-fingerprint); () for a
    # card or another tool's results.
    fingerprints: tuple[Fingerprint | None, ...] = ()
    # A `bench capacity` run's searches: what was searched ("rate at ttft_p99<=2s"; "" for
    # any other input) and each search's capacity at server speed (bench.verdict.capacity_delta).
    capacity_of: str = ""
    capacity: tuple[float, ...] = ()
    # Each search's point estimate (its `crossing`, at server speed) and how many searches the
    # run made: the estimates are complete when there is one for every search (not in runs
    # saved before the estimate was kept, nor when a search's points never crossed a bound).
    capacity_estimate: tuple[float, ...] = ()
    capacity_searches: int = 0

    def __post_init__(self) -> None:
        # The one door every input's figures pass (bundle, run directory, card, vLLM's
        # saved results): a figure no run can make is data about a broken input, not a
        # number to do arithmetic on.
        if any(_implausible(c) for c in self.cells.values()):
            object.__setattr__(self, "cells", {k: _checked(c) for k, c in self.cells.items()})

    def cell(self, key: Key) -> Cell | None:
        return self.cells.get(key)


# The range of a figure is bench.bounds' (the one door for numbers from outside).
FIGURE_MAX = bounds.FIGURE_MAX


def _implausible(cell: Cell) -> str | None:
    for metric, values in cell.trials.items():
        for v in values:
            if (why := bounds.figure_problem(v, metric)) is not None:
                return why
    return None


def _checked(cell: Cell) -> Cell:
    """CELL, or CELL read as invalid (no figures, the reason as its detail)."""
    why = _implausible(cell)
    if why is None:
        return cell
    return replace(cell, status="invalid", detail=why, trials={}, rse={}, runs=(), left_out=None)


def accepting(run: RunFigures, accept: Iterable[str]) -> RunFigures:
    """RUN with its cells flagged by an accepted flag judged as valid (their detail says
    so); unchanged when none is accepted."""
    names = frozenset(accept) & frozenset(CELL_FLAGS)
    if not names or not any(c.status in names for c in run.cells.values()):
        return run
    cells = {
        k: replace(c, status="valid", detail=f"{c.status.replace('_', ' ')}, accepted: {c.detail}")
        if c.status in names
        else c
        for k, c in run.cells.items()
    }
    return replace(run, cells=cells)


def label_size(label: str) -> float:
    """Where a row sorts: a context's tokens ("8K" -> 8192), a workload point's rate
    ("4/s" -> 4, "inf/s" -> inf); anything else last."""
    if label.endswith("/s"):
        try:
            return float(label[:-2])
        except ValueError:
            return math.inf
    scale = {"K": 1024.0, "M": 1024.0 * 1024.0}.get(label[-1:], 1.0)
    try:
        return float(label[:-1]) * scale
    except ValueError:
        return math.inf


def context_order(labels: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted(set(labels), key=label_size))


def median_rse(n: int, p50: float, p90: float) -> float | None:
    """Relative standard error of a median from order statistics (see module docstring)."""
    if n < 2 or p50 <= 0:
        return None
    spread = max(p90 - p50, 0.0) / _Z90
    return _MEDIAN_EFFICIENCY * spread / math.sqrt(n) / p50


def mean_rse(n: int, mean: float, p50: float, p90: float) -> float | None:
    """Relative standard error of a sum/mean of n values, spread from order statistics."""
    if n < 2 or mean <= 0:
        return None
    return max(p90 - p50, 0.0) / _Z90 / mean / math.sqrt(n)
