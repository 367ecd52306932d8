"""The server's KV capacity in tokens, and the over-capacity rule of the card.

Source order: the `kv_cache_size_tokens` label of `vllm:cache_config_info`; else
`num_gpu_blocks x block_size` from the same family (it overstates hybrid models such
as Qwen3.5, which is why the label wins); else the user's `--kv-budget`; else unknown
(every cell is run and the plan says so).
"""

from __future__ import annotations

from bench.metrics import CACHE_CONFIG, Snapshot
from bench.results import KvCapacity


def _int(labels: dict[str, str], key: str) -> int | None:
    raw = labels.get(key)
    if raw is None or raw in ("", "None"):
        return None
    try:
        return int(float(raw))
    except ValueError:
        return None


def kv_capacity(snapshot: Snapshot | None, kv_budget_tokens: int | None) -> KvCapacity:
    labels = snapshot.info.get(CACHE_CONFIG, {}) if snapshot is not None else {}
    size = _int(labels, "kv_cache_size_tokens")
    if size:
        return KvCapacity(
            tokens=size,
            source="kv_cache_size_tokens",
            detail=f"{CACHE_CONFIG} kv_cache_size_tokens={size}",
        )
    blocks, block_size = _int(labels, "num_gpu_blocks"), _int(labels, "block_size")
    if blocks and block_size:
        return KvCapacity(
            tokens=blocks * block_size,
            source="num_gpu_blocks_x_block_size",
            detail=f"{CACHE_CONFIG} num_gpu_blocks={blocks} x block_size={block_size}",
        )
    if kv_budget_tokens is not None:
        return KvCapacity(tokens=kv_budget_tokens, source="kv_budget", detail="--kv-budget")
    why = "no /metrics" if snapshot is None else f"no {CACHE_CONFIG} in /metrics"
    return KvCapacity(tokens=None, source="unknown", detail=f"{why} and no --kv-budget")


def kv_needed(concurrency: int, prompt_tokens: int, max_tokens: int) -> int:
    return concurrency * (prompt_tokens + max_tokens)


def over_capacity_reason(needed: int, capacity: KvCapacity) -> str | None:
    if capacity.tokens is None or needed <= capacity.tokens:
        return None
    return f"needs {needed:,} KV tokens, the server has {capacity.tokens:,}"
