"""The twin's truth log, and a run's figures from it.

The truth: the twin's `--ground-truth-log` line per request (arrival, prompt and output tokens,
each token chunk's send time). For one request, TTFT = first token chunk's send - arrival,
TPOT = (last chunk - first chunk) / (output tokens - 1); for a tool's run (its requests are
the truth lines whose arrival falls between that tool's start and end: the runs never
overlap), achieved rate = requests / (last chunk - first arrival) and output tok/s = output
tokens / that span. Medians interpolate as numpy's (and every tool's) p50 does. The traffic
table shows what each run's truth says of its traffic: prompt tokens, and how far its
arrivals (from its first) fell from the schedule.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Figures:
    """A run's four headline figures: achieved requests/s and output tokens/s, p50 TTFT and
    p50 TPOT in milliseconds; n: the requests they are over; prompt: mean prompt tokens (the
    twin's count) where known."""

    req_s: float
    out_tok_s: float
    ttft_p50_ms: float
    tpot_p50_ms: float
    n: int = 0
    prompt: float | None = None

    def values(self) -> tuple[float, float, float, float]:
        return (self.req_s, self.out_tok_s, self.ttft_p50_ms, self.tpot_p50_ms)


def read_truth(path: Path) -> list[dict[str, Any]]:
    """The truth log's lines (a line cut short at the end is skipped)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def window(lines: Iterable[Mapping[str, Any]], start: float, end: float) -> list[Mapping[str, Any]]:
    """The finished requests that arrived in [start, end] with at least one token chunk."""
    return [
        x
        for x in lines
        if start <= float(x["arrival"]) <= end
        and x.get("outcome") == "finished"
        and any(tokens > 0 for _, tokens in x["chunks"])
    ]


def truth_figures(lines: Sequence[Mapping[str, Any]]) -> Figures:
    """The four figures from truth-log lines (see the module's docstring)."""
    if not lines:
        raise ValueError("no requests in the truth log's window")
    ttft, tpot = [], []
    first_arrival = min(float(x["arrival"]) for x in lines)
    last_chunk = first_arrival
    out_tokens = 0
    for x in lines:
        sent = [float(t) for t, tokens in x["chunks"] if tokens > 0]
        ttft.append(sent[0] - float(x["arrival"]))
        n_out = int(x["output_tokens"])
        if n_out > 1:
            tpot.append((sent[-1] - sent[0]) / (n_out - 1))
        out_tokens += n_out
        last_chunk = max(last_chunk, sent[-1])
    span = last_chunk - first_arrival
    return Figures(
        req_s=len(lines) / span,
        out_tok_s=out_tokens / span,
        ttft_p50_ms=statistics.median(ttft) * 1e3,
        tpot_p50_ms=statistics.median(tpot) * 1e3 if tpot else float("nan"),
        n=len(lines),
        prompt=statistics.fmean(int(x["prompt_tokens"]) for x in lines),
    )


@dataclass(frozen=True)
class TrafficSeen:
    """A run's traffic as the truth log shows it: prompt tokens (the twin's count), and its
    arrival gaps against the schedule's, in server ms: each arrival's distance from its due
    time once the run's common shift (the median distance) is taken out, p50 and max."""

    prompt_mean: float
    prompt_min: int
    prompt_max: int
    off_p50_ms: float
    off_max_ms: float


def traffic_seen(
    lines: Sequence[Mapping[str, Any]], at_s: Sequence[float], speed: float
) -> TrafficSeen:
    """Arrivals and due times, both sorted (two sends microseconds apart may reach the twin
    in either order), each counted from its first; wall-clock seconds x speed are server
    time. A tool whose first request alone goes late (AIPerf's, by a few ms) shifts every
    other one by as much: the median distance is that shift, and taking it out leaves how
    well the gaps were kept. The count must be the schedule's."""
    if len(lines) != len(at_s) or not lines:
        raise ValueError(f"{len(lines)} requests in the truth log for {len(at_s)} scheduled")
    arrivals = sorted(float(x["arrival"]) for x in lines)
    due = sorted(at_s)
    dist = [(t - arrivals[0]) * speed - (d - due[0]) for t, d in zip(arrivals, due, strict=True)]
    shift = statistics.median(dist)
    off = [abs(x - shift) * 1e3 for x in dist]
    counts = [int(x["prompt_tokens"]) for x in lines]
    return TrafficSeen(statistics.fmean(counts), min(counts), max(counts),
                       statistics.median(off), max(off))  # fmt: skip
