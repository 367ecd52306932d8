"""A point's schedule: when each request is sent (server seconds from the point's start),
how long its prompt is and how many tokens it asks for, drawn from the workload's seed.

    arrivals   constant: gaps of exactly 1/R. poisson: exponential gaps of mean 1/R.
               gamma: gaps ~ Gamma(shape b, scale 1/(R b)) (mean 1/R; b = 1 is Poisson,
               b < 1 burstier), vLLM's `--burstiness`. The first request goes at 0.
               R = inf: every request at 0.
    lengths    vllm: uniform integers on [floor(L(1 - r)), ceil(L(1 + r))] (vLLM's
               RandomDataset since it took floor and ceil; at least 1).
               sglang (InferenceX's client, a fork of vLLM's older one, too): uniform
               integers on [max(int(L r), 1), L]. r = 0 under vllm is exactly L.

Same workload, same seed, same point: the same schedule, value for value (Python's
`random.Random` seeded with text is the same on every platform and version 3.2 on), so A and
B of a compare get identical traffic. Each point and each stream of draws has its own seed
text: adding a point does not change the others.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from bench.workload_spec import Lengths, Process, Workload


@dataclass(frozen=True, slots=True)
class Planned:
    """One request of a point as scheduled."""

    index: int
    at_s: float  # server seconds from the point's start (0 for closed-count)
    input_tokens: int  # the drawn prompt length, shared prefix included
    output_tokens: int
    group: int  # its shared-prefix group (index // group_size)


def gaps(
    process: Process, rate: float, burstiness: float, n: int, rng: random.Random
) -> list[float]:
    """n - 1 gaps between n sends at `rate` (requests per server second)."""
    if n < 2 or math.isinf(rate):
        return [0.0] * max(n - 1, 0)
    if process == "constant":
        return [1.0 / rate] * (n - 1)
    if process == "poisson":
        return [rng.expovariate(rate) for _ in range(n - 1)]
    return [rng.gammavariate(burstiness, 1.0 / (rate * burstiness)) for _ in range(n - 1)]


def length_bounds(nominal: int, ratio: float, rule: str) -> tuple[int, int]:
    """The inclusive range a length is drawn from (module docstring)."""
    if rule == "vllm":
        return max(math.floor(nominal * (1 - ratio)), 1), max(math.ceil(nominal * (1 + ratio)), 1)
    return max(int(nominal * ratio), 1), nominal


def draw_lengths(lengths: Lengths, n: int, rng: random.Random) -> list[tuple[int, int]]:
    """n (input, output) pairs; inputs drawn first for all, then outputs (as vLLM does)."""
    lo_in, hi_in = length_bounds(lengths.input_tokens, lengths.range_ratio, lengths.semantics)
    lo_out, hi_out = length_bounds(lengths.output_tokens, lengths.range_ratio, lengths.semantics)
    ins = [rng.randint(lo_in, hi_in) for _ in range(n)]
    outs = [rng.randint(lo_out, hi_out) for _ in range(n)]
    return list(zip(ins, outs, strict=True))


def point_seed(workload: Workload, point: int, trial: int, stream: str) -> str:
    return f"bench-workload/{workload.seed}/{point}/{trial}/{stream}"


def plan_point(
    workload: Workload, point: int, trial: int = 0, *, warmup: bool = False
) -> list[Planned]:
    """The requests of point `point` (its index in the workload's rates or concurrencies)."""
    a = workload.arrivals
    if a.kind == "rate":
        n = a.warmups if warmup else a.requests
        rate = a.rates[point]
    else:
        c = a.concurrencies[point]
        n = c * (a.warmups_per_stream if warmup else a.requests_per_stream)
        rate = math.inf
    stream = "warmup" if warmup else "measured"
    lengths = draw_lengths(
        workload.lengths, n, random.Random(point_seed(workload, point, trial, f"{stream}/lengths"))
    )
    times = [0.0]
    if a.kind == "rate" and not warmup:
        rng = random.Random(point_seed(workload, point, trial, "arrivals"))
        for gap in gaps(a.process, rate, a.burstiness, n, rng):
            times.append(times[-1] + gap)
    else:
        times = [0.0] * n
    g = workload.prefix.group_size
    return [Planned(i, times[i], inp, out, i // g) for i, (inp, out) in enumerate(lengths)]
