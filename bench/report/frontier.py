"""The frontier: what a server gives one user against what it gives per GPU.

Per decode context, one point per concurrency (requests at once), both axes from the
figures the run measured, at server speed (bench.results, "Speed convention"), trials
averaged the way the card's tables average them:

  x  per-user output tok/s: the cell's "Per request tok/s", 1000 / the median time
     between tokens in ms (the median over the window's requests of (t_last - t_first) /
     (tokens - 1)): the decode speed one request sees.
  y  total output tok/s per GPU: the cell's "Total tok/s" (usage tokens received inside the
     window / the window's measured length, over all simultaneous requests) divided by the
     number of GPUs that served the run.

A point is on the Pareto front when no other point of its context is at least as fast on
both axes and faster on one. Cells whose readiness gate never held (not_ready) are drawn
but never put on the front; over-capacity, invalid and not-run cells have no point.

The GPU count (`gpu_count`): a real server's is the number of GPUs in environment.json's
inventory (nvidia-smi inside the server's container: the GPUs the server was given); with
no inventory, the launch's tensor x pipeline x data parallel size from its recorded argv.
A twin serves from the CPU: whatever GPUs its host has served nothing, and its launch has
no parallel size, so a twin reports none, and its frontier is drawn per server (total
output tok/s itself) with the axis saying so. Without a count the same holds for any run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.report.data import CellPoint

# Launch flags whose product is the number of GPUs a vLLM server uses.
_PARALLEL_FLAGS = {
    "--tensor-parallel-size": "tp", "-tp": "tp",
    "--pipeline-parallel-size": "pp", "-pp": "pp",
    "--data-parallel-size": "dp", "-dp": "dp",
}  # fmt: skip
_MAX_GPUS = 100_000  # a count beyond this is no count (hostile or broken input)


@dataclass(frozen=True)
class GpuCount:
    n: int | None  # None: not known (a twin, or nothing recorded)
    source: str  # what it was taken from, for the axis and the docs

    def short_label(self) -> str:
        """The y axis itself; `axis_label` adds where the count came from."""
        return "total output tok/s per " + ("server" if self.n is None else "GPU")

    def axis_label(self) -> str:
        if self.n is None:
            return f"total output tok/s per server ({self.source})"
        unit = "GPU" if self.n == 1 else "GPUs"
        return f"total output tok/s per GPU ({self.n} {unit}: {self.source})"


NO_GPUS_TWIN = GpuCount(None, "a twin: no GPUs")
NO_GPUS_RECORDED = GpuCount(None, "GPU count not recorded")


def parallel_size(words: Sequence[str]) -> int | None:
    """tensor x pipeline x data parallel size of a vLLM launch's argv; None when it names
    none of them (a single-GPU launch says nothing) or a value is no positive integer."""
    sizes: dict[str, int] = {}
    i = 0
    while i < len(words):
        flag, eq, value = words[i].partition("=")
        kind = _PARALLEL_FLAGS.get(flag)
        if kind is not None:
            if not eq:
                value = words[i + 1] if i + 1 < len(words) else ""
                i += 1
            if not value.isdigit() or not 0 < int(value) <= _MAX_GPUS:
                return None
            sizes[kind] = int(value)
        i += 1
    if not sizes:
        return None
    product = math.prod(sizes.values())
    return product if product <= _MAX_GPUS else None


def gpu_count(env: Mapping[str, Any] | None, *, twin: bool) -> GpuCount:
    """The GPUs that served a run, from its environment.json (a dict as read, or None)."""
    if twin:
        return NO_GPUS_TWIN
    if not isinstance(env, Mapping):
        return NO_GPUS_RECORDED
    gpu = env.get("gpu")
    gpus = gpu.get("gpus") if isinstance(gpu, Mapping) else None
    if isinstance(gpus, list | tuple) and 0 < len(gpus) <= _MAX_GPUS:
        return GpuCount(len(gpus), "environment.json GPU inventory")
    launch = env.get("launch")
    argv = launch.get("argv") if isinstance(launch, Mapping) else None
    if isinstance(argv, list | tuple) and all(isinstance(w, str) for w in argv):
        n = parallel_size(argv)
        if n is not None:
            return GpuCount(n, "the launch's parallel size")
    return NO_GPUS_RECORDED


def gpu_count_of_settings(settings: Mapping[str, str], *, twin: bool) -> GpuCount:
    """The same from a verdict's `RunFigures.settings` (gpu_count from the inventory,
    launch_flags as the sorted flags text): what the compare page has of a run."""
    if twin:
        return NO_GPUS_TWIN
    count = settings.get("gpu_count", "")
    if count.isdigit() and 0 < int(count) <= _MAX_GPUS:
        return GpuCount(int(count), "environment.json GPU inventory")
    n = parallel_size(settings.get("launch_flags", "").split())
    if n is not None:
        return GpuCount(n, "the launch's parallel size")
    return NO_GPUS_RECORDED


@dataclass(frozen=True)
class FrontierPoint:
    concurrency: int
    per_user_tok_s: float  # x
    total_tok_s: float  # over all GPUs; y is this / the divisor the plot uses
    flagged: bool = False  # not_ready: drawn hollow, never on the front


def points_of(cells: Iterable[CellPoint]) -> dict[str, list[FrontierPoint]]:
    """Context label -> its points by concurrency, in the cells' order of contexts."""
    out: dict[str, list[FrontierPoint]] = {}
    for c in sorted(cells, key=lambda c: (c.prompt_tokens, c.concurrency)):
        if c.total_tok_s is None or c.per_request_tok_s is None:
            continue
        point = FrontierPoint(
            c.concurrency, c.per_request_tok_s, c.total_tok_s, flagged=c.status != "valid"
        )
        out.setdefault(c.context_label, []).append(point)
    return out


def pareto(points: Iterable[FrontierPoint]) -> list[FrontierPoint]:
    """The points no other (unflagged) point dominates, by ascending per-user tok/s."""
    clean = [p for p in points if not p.flagged]

    def dominated(p: FrontierPoint) -> bool:
        return any(
            q.per_user_tok_s >= p.per_user_tok_s
            and q.total_tok_s >= p.total_tok_s
            and (q.per_user_tok_s > p.per_user_tok_s or q.total_tok_s > p.total_tok_s)
            for q in clean
        )

    return sorted((p for p in clean if not dominated(p)), key=lambda p: p.per_user_tok_s)


def common_scale(counts: Sequence[GpuCount]) -> tuple[list[float], str]:
    """The divisor of each run's total tok/s and the y-axis label of one plot: per GPU when
    every run has a count, else per server for all of them (one axis, one unit)."""
    known = [c.n for c in counts if c.n is not None]
    if counts and len(known) == len(counts):
        if len({c.axis_label() for c in counts}) == 1:
            return [float(n) for n in known], counts[0].axis_label()
        shown = ", ".join(f"{c.n}" for c in counts)
        return [float(n) for n in known], f"total output tok/s per GPU (GPUs per run: {shown})"
    missing = next(c for c in counts if c.n is None) if counts else NO_GPUS_RECORDED
    return [1.0] * len(counts), f"total output tok/s per server ({missing.source})"


X_LABEL = "per-user output tok/s (1000 / median time between tokens, ms)"
