"""vLLM's Prometheus `/metrics`: parsing the `vllm:*` families and sampling them.

Values of one family are summed over label sets (several engines or models behind one
server add up); `*_info` families keep their labels instead.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from bench import bounds

# A vllm:* sample line is a name, a few labels and a number: far below this.
MAX_METRICS_LINE = 16_384
_LINE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

# Gauges some engines export instead of vLLM's counters (averaged by the engine itself),
# under keys of their own (bench.engines writes them; bench.run.figures reads them).
SPEC_ACCEPT_RATE = "engine:spec_accept_rate"  # accepted / draft tokens
SPEC_ACCEPT_LENGTH = "engine:spec_accept_length"  # tokens per step, 1 + accepted / drafts
PREFIX_HIT_RATE = "engine:prefix_cache_hit_rate"
RATES = frozenset({SPEC_ACCEPT_RATE, SPEC_ACCEPT_LENGTH, PREFIX_HIT_RATE})

# Requests running or waiting on one server: far above any engine's limit (vLLM's
# max_num_seqs is in the thousands), far below what only a broken or hostile server says.
MAX_REQUESTS = 1_000_000
RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
CACHE_CONFIG = "vllm:cache_config_info"
GENERATION_TOKENS = "vllm:generation_tokens_total"
SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
PREFIX_QUERIES = "vllm:prefix_cache_queries_total"


@dataclass(slots=True)
class Snapshot:
    t_s: float
    values: dict[str, float] = field(default_factory=dict)
    info: dict[str, dict[str, str]] = field(default_factory=dict)

    def get(self, name: str) -> float | None:
        return self.values.get(name)


def parse(text: str, t_s: float) -> Snapshot:
    """The `vllm:*` families of a Prometheus text exposition (`prometheus` with vLLM's own
    names). Whatever the text: lines over MAX_METRICS_LINE, values that are not finite
    numbers and sums that overflow are passed over, never raised on (the body itself is
    capped by bench.stream.client's MAX_METRICS_BODY_BYTES)."""
    return prometheus(text, "vllm:", {}, t_s)


def prometheus(text: str, prefix: str, rename: Mapping[str, str], t_s: float) -> Snapshot:
    """The `prefix` families of a Prometheus text, renamed to canonical keys (others keep
    their name). Values of one family are summed over label sets (several data-parallel
    ranks add up), except the rates in RATES, which are averaged; `*_info` families keep
    their labels. Lines over MAX_METRICS_LINE, values that are not finite numbers and sums
    that overflow are passed over, never raised on."""
    snap = Snapshot(t_s=t_s)
    seen: dict[str, int] = {}
    for line in text.splitlines():
        if not line.startswith(prefix) or len(line) > MAX_METRICS_LINE:
            continue
        m = _LINE.match(line)
        if m is None:
            continue
        name, labels, raw = m.group(1), m.group(2), m.group(3)
        try:
            value = float(raw)
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        if name.endswith("_info"):
            snap.info[name] = dict(_LABEL.findall(labels or ""))
            continue
        if name.endswith("_bucket"):
            continue
        key = rename.get(name, name)
        total = snap.values.get(key, 0.0) + value
        seen[key] = seen.get(key, 0) + 1
        snap.values[key] = total
    for key in list(snap.values):
        if not math.isfinite(snap.values[key]):
            del snap.values[key]  # a sum that overflows is no reading
        elif key in (RUNNING, WAITING) and bounds.count(snap.values[key], MAX_REQUESTS) is None:
            # A request count no server can have (2.3e16 running, or 2.2e-86 waiting, from
            # the fuzzer) is no reading: the drain barrier waited out its time-out on it.
            del snap.values[key]
        elif key in RATES:
            snap.values[key] /= seen[key]
    return snap


def delta(first: Snapshot | None, last: Snapshot | None, name: str) -> float | None:
    if first is None or last is None:
        return None
    a, b = first.get(name), last.get(name)
    if a is None or b is None:
        return None
    return b - a
