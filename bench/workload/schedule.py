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
    datasets   a ShareGPT file's conversations, n drawn from the seed without replacement
               while enough remain, then with (vLLM's); lengths their estimates, group the
               conversation's place in the file (bench.workload.datasets).
    trace      a mooncake trace: one point, its timestamps (from its first) / speedup, its
               lengths, group its first block's id (bench.workload.trace).

Same workload, same seed, same point: the same schedule, value for value (Python's
`random.Random` seeded with text is the same on every platform and version 3.2 on), so A and
B of a compare get identical traffic. Each point and each stream of draws has its own seed
text: adding a point does not change the others.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path

from bench.errors import UsageError
from bench.workload import datafile, datasets, trace
from bench.workload_spec import Lengths, Process, Workload


@dataclass(frozen=True, slots=True)
class Planned:
    """One request of a point as scheduled."""

    index: int
    at_s: float  # server seconds from the point's start (0 for closed-count)
    input_tokens: int  # the drawn prompt length, shared prefix included (a dataset's estimate)
    output_tokens: int
    group: int  # its shared-prefix group (index // group_size); a dataset's conversation's
    # place in its file; a trace request's first block id (-1: none)


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
    """The requests of point `point` (its index in the workload's rates or concurrencies;
    a trace's one point is 0)."""
    a = workload.arrivals
    if a.kind == "trace":
        return _plan_trace(workload, warmup)
    if a.kind == "rate":
        n = a.warmups if warmup else a.requests
        rate = a.rates[point]
    else:
        c = a.concurrencies[point]
        n = c * (a.warmups_per_stream if warmup else a.requests_per_stream)
        rate = math.inf
    stream = "warmup" if warmup else "measured"
    drawn = _draw(workload, n, point_seed(workload, point, trial, stream))
    times = [0.0]
    if a.kind == "rate" and not warmup:
        rng = random.Random(point_seed(workload, point, trial, "arrivals"))
        for gap in gaps(a.process, rate, a.burstiness, n, rng):
            times.append(times[-1] + gap)
    else:
        times = [0.0] * n
    return [Planned(i, times[i], inp, out, group) for i, (inp, out, group) in enumerate(drawn)]


def _draw(workload: Workload, n: int, seed: str) -> list[tuple[int, int, int]]:
    """n (input, output, group): drawn lengths, or a dataset's conversations."""
    if workload.prompts.source == "sharegpt":
        data = dataset_of(workload)
        picks = data.sample(n, random.Random(f"{seed}/dataset"))
        return [(data.prompt_tokens[k], data.output_tokens[k], data.entry[k]) for k in picks]
    g = workload.prefix.group_size
    lengths = draw_lengths(workload.lengths, n, random.Random(f"{seed}/lengths"))
    return [(inp, out, i // g) for i, (inp, out) in enumerate(lengths)]


def longest_request(workload: Workload) -> tuple[int, int]:
    """(input, output) tokens of the longest request the workload can send: the length
    rules' tops, or the data's request with the most input + output."""
    if not workload.data_driven():
        ln = workload.lengths
        tops = [length_bounds(n, ln.range_ratio, ln.semantics)[1]
                for n in (ln.input_tokens, ln.output_tokens)]  # fmt: skip
        return tops[0], tops[1]
    if workload.arrivals.kind == "trace":
        t = trace_of(workload)
        pairs = zip(t.inputs, t.outputs, strict=True)
    else:
        data = dataset_of(workload)
        pairs = zip(data.prompt_tokens, data.output_tokens, strict=True)
    return max(pairs, key=sum)


def _plan_trace(workload: Workload, warmup: bool) -> list[Planned]:
    """The trace's requests; warm-ups: its first `warmups` lengths, all at 0."""
    a, t = workload.arrivals, trace_of(workload)
    n = min(a.warmups, len(t)) if warmup else len(t)
    at = [0.0 if warmup else (t.at_ms[i] - t.at_ms[0]) / 1000.0 / a.speedup for i in range(n)]
    return [Planned(i, at[i], t.inputs[i], t.outputs[i], t.group(i)) for i in range(n)]


def dataset_of(workload: Workload, base: Path | None = None) -> datasets.ShareGptData:
    """The workload's dataset, read once (its sha256 checked against the workload's)."""
    p = workload.prompts
    data = datasets.load(datafile.resolve(p.path, ".json", base))
    _same(p.sha256, data.sha256, data.path)
    return data


def trace_of(workload: Workload, base: Path | None = None) -> trace.MooncakeTrace:
    """The workload's trace, read once (its sha256 checked against the workload's)."""
    a = workload.arrivals
    got = trace.load(datafile.resolve(a.path, ".jsonl", base), a.max_requests)
    _same(a.sha256, got.sha256, got.path)
    return got


def _same(expected: str | None, got: str, path: str) -> None:
    if expected is not None and expected != got:
        raise UsageError(
            f"{path} has sha256 {got[:12]}..., not the workload's {expected[:12]}...",
            hint="the file changed: give its new sha256, or none",
        )


def with_data(workload: Workload, base: Path) -> Workload:
    """`workload` with its data file read (any problem one UsageError line), its path made
    absolute from `base` (the workload file's folder) and its sha256 filled in."""
    if workload.arrivals.kind == "trace":
        a = workload.arrivals
        t = trace_of(workload, base)
        path = a.path if datafile.is_name(a.path) else t.path
        arrivals = a.model_copy(update={"path": path, "sha256": t.sha256})
        return workload.model_copy(update={"arrivals": arrivals})
    p = workload.prompts
    data = dataset_of(workload, base)
    path = p.path if datafile.is_name(p.path) else data.path
    prompts = p.model_copy(update={"path": path, "sha256": data.sha256})
    return workload.model_copy(update={"prompts": prompts})
