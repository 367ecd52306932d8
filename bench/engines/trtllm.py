"""TensorRT-LLM's `trtllm-serve`: `/metrics` answers JSON iteration statistics.

Source (NVIDIA/TensorRT-LLM): the trtllm-serve documentation
(docs/source/commands/trtllm-serve) describes `/metrics` as a JSON list of per-iteration
statistics, drained by each call (an idle server answers `[]`), with `numActiveRequests`,
`numQueuedRequests` and `kvCacheStats` (`maxNumBlocks`, `tokensPerBlock`, `usedNumBlocks`,
`cacheHitRate`). The newest entry counts. Not checked against a running server: what is
absent falls back as for a server without metrics.
"""

from __future__ import annotations

import json
import math

from bench.engines.base import Capacity, EngineKind, Probes, dig, positive_int
from bench.stream import metrics
from bench.stream.metrics import PREFIX_HIT_RATE, Snapshot

KV_STATS = "kvCacheStats"
_MAX_ENTRIES = 10_000


def _entries(text: str) -> list[dict[str, object]]:
    try:
        got = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if not isinstance(got, list):
        return []
    return [e for e in got[-_MAX_ENTRIES:] if isinstance(e, dict)]


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def parse(text: str, t_s: float) -> Snapshot:
    snap = Snapshot(t_s=t_s)
    entries = _entries(text)
    if not entries:
        return snap
    last = entries[-1]
    for key, name in (
        ("numActiveRequests", metrics.RUNNING),
        ("numQueuedRequests", metrics.WAITING),
    ):
        if (v := _number(last.get(key))) is not None:
            snap.values[name] = v
    if (rate := _number(dig(last, KV_STATS, "cacheHitRate"))) is not None:
        snap.values[PREFIX_HIT_RATE] = rate
    blocks = positive_int(dig(last, KV_STATS, "maxNumBlocks"))
    per_block = positive_int(dig(last, KV_STATS, "tokensPerBlock"), 1 << 20)
    if blocks and per_block:
        snap.info[KV_STATS] = {"maxNumBlocks": str(blocks), "tokensPerBlock": str(per_block)}
    return snap


def _capacity(snapshot: Snapshot | None, probes: Probes) -> Capacity | None:
    stats = snapshot.info.get(KV_STATS) if snapshot is not None else None
    if not stats:
        return None
    blocks, per_block = int(stats["maxNumBlocks"]), int(stats["tokensPerBlock"])
    return Capacity(
        blocks * per_block,
        "metrics:kvCacheStats.maxNumBlocks x tokensPerBlock",
        f"/metrics kvCacheStats maxNumBlocks={blocks} x tokensPerBlock={per_block}",
    )


ENGINE = EngineKind(
    name="trtllm",
    parse=parse,
    metric_names={
        "running": "numActiveRequests",
        "waiting": "numQueuedRequests",
        "prefix_cache": "kvCacheStats.cacheHitRate",
        "kv_capacity": "kvCacheStats.maxNumBlocks",
    },
    capacity=_capacity,
)


def looks_like(metrics_text: str) -> bool:
    """A JSON list whose entries carry iteration statistics."""
    entries = _entries(metrics_text) if metrics_text.lstrip().startswith("[") else []
    return any("iter" in e or KV_STATS in e or "numActiveRequests" in e for e in entries)
