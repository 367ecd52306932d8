"""vLLM's Prometheus `/metrics`: parsing the `vllm:*` families and sampling them.

Values of one family are summed over label sets (several engines or models behind one
server add up); `*_info` families keep their labels instead.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

# A vllm:* sample line is a name, a few labels and a number: far below this.
MAX_METRICS_LINE = 16_384
_LINE = re.compile(r"^(vllm:[A-Za-z0-9_:]+)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')

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
    """The `vllm:*` families of a Prometheus text exposition. Whatever the text: lines over
    MAX_METRICS_LINE and values that are not finite numbers are passed over, never raised on
    (the body itself is capped by bench.stream.client's MAX_METRICS_BODY_BYTES)."""
    snap = Snapshot(t_s=t_s)
    for line in text.splitlines():
        if not line.startswith("vllm:") or len(line) > MAX_METRICS_LINE:
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
        # Counters are exported with and without the _total suffix by some versions;
        # histograms' _bucket/_sum/_count lines are not needed here.
        if name.endswith("_bucket"):
            continue
        snap.values[name] = snap.values.get(name, 0.0) + value
    return snap


def delta(first: Snapshot | None, last: Snapshot | None, name: str) -> float | None:
    if first is None or last is None:
        return None
    a, b = first.get(name), last.get(name)
    if a is None or b is None:
        return None
    return b - a
