"""What each engine exposes, as `ServerInfo.facts_source` values (docs/engines.md): for
running, waiting, spec-decode and prefix-cache metrics, for the way output tokens are
counted, and for the KV capacity bench.run.capacity settled on."""

from __future__ import annotations

from bench.engines.base import EngineKind
from bench.results import KvCapacity
from bench.stream import metrics
from bench.stream.metrics import Snapshot


def metric_facts(engine: EngineKind, snapshot: Snapshot | None) -> dict[str, str]:
    """running, waiting, spec_decode, prefix_cache: the engine's metric when the snapshot
    has it, else how bench does without."""
    have = snapshot.values if snapshot is not None else {}
    keys = {
        "running": (metrics.RUNNING,),
        "waiting": (metrics.WAITING,),
        "spec_decode": (
            metrics.SPEC_ACCEPTED,
            metrics.SPEC_ACCEPT_RATE,
            metrics.SPEC_ACCEPT_LENGTH,
        ),
        "prefix_cache": (metrics.PREFIX_HITS, metrics.PREFIX_HIT_RATE),
    }
    without = {
        "running": "fallback:the client's own in-flight count",
        "waiting": "fallback:none (the gate counts the client's requests in flight)",
        "spec_decode": "fallback:none (not reported)",
        "prefix_cache": "fallback:none (not reported)",
    }
    out = {}
    for fact, canonical in keys.items():
        name = engine.metric_names.get(fact)
        present = any(k in have for k in canonical)
        out[fact] = f"metrics:{name}" if present and name else without[fact]
    return out


def token_facts(engine: EngineKind, tokenizer: str | None) -> dict[str, str]:
    """How output tokens will be counted on this engine (bench.stream.tokens), and the
    tokenizer that takes over where the engine's own way fails (a server too old for it);
    each cell's `extras.token_source` says which it used."""
    if engine.continuous_usage:
        own = "endpoint:stream usage on every chunk (stream_options.continuous_usage_stats)"
    elif engine.chunk_count is not None:
        own = f"endpoint:stream {engine.chunk_count_name} on every chunk"
    else:
        own = "fallback:none (no per-chunk count)"
    text = f"fallback:streamed text tokenized by {tokenizer}" if tokenizer else None
    if text and own.startswith("fallback:"):
        return {"output_tokens": text}
    return {"output_tokens": own} | ({"output_tokens_fallback": text} if text else {})


def kv_fact(kv: KvCapacity, engine_source: str | None) -> str:
    """facts_source["kv_capacity"] for the capacity bench.run.capacity settled on."""
    if kv.source in ("engine_metrics", "engine_endpoint") and engine_source:
        return engine_source
    return {
        "kv_budget": "fallback:--kv-budget",
        "kv_cache_size_tokens": f"metrics:{metrics.CACHE_CONFIG} kv_cache_size_tokens",
        "startup_log": "fallback:the server log's KV cache size line",
        "num_gpu_blocks_x_block_size": f"metrics:{metrics.CACHE_CONFIG} num_gpu_blocks x "
        "block_size",
    }.get(kv.source, "fallback:unknown (every cell is run)")
