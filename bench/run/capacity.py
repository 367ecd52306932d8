"""The server's KV capacity in tokens, and the over-capacity rule of the card.

Source order, first found wins:
1. `--kv-budget`: the user said so; nothing the server reports overrides it.
2. another engine's own report (bench.engines: SGLang's `sglang:max_total_num_tokens`,
   llama.cpp's `/props`, TensorRT-LLM's `kvCacheStats`), given as `engine`;
3. the `kv_cache_size_tokens` label of `vllm:cache_config_info` (what the engine sized);
4. the start-up log line "GPU KV cache size: N tokens" ("CPU ..." on vLLM-CPU), when the
   server's log is at hand (`bench run --server-log`; the orchestrator passes it);
5. `num_gpu_blocks x block_size` from `vllm:cache_config_info`: last among the measured
   sources because it overstates hybrid models such as Qwen3.5 (several KV groups share
   the blocks);
6. unknown: every cell is run and the plan says so.
"""

from __future__ import annotations

import re
from pathlib import Path

from bench import bounds
from bench.engines.base import Capacity
from bench.results import KvCapacity
from bench.stream.metrics import CACHE_CONFIG, Snapshot

# vLLM logs "GPU KV cache size: 1,835,008 tokens" once per engine start (vLLM-CPU: "CPU").
_LOG_LINE = re.compile(r"\b([A-Z]PU) KV cache size: ([\d,]+) tokens")


def _int(labels: dict[str, str], key: str) -> int | None:
    """A label's whole number through bench.bounds ("inf", "1e999", "2.5", "²": None)."""
    raw = labels.get(key)
    if raw is None:
        return None
    return bounds.count(raw)


def kv_tokens_from_log(text: str) -> tuple[int, str] | None:
    """(N, the line's words) of the last start-up line in a log: a log that spans several
    starts of the server describes the one running now last."""
    found = None
    for m in _LOG_LINE.finditer(text):
        found = (int(m.group(2).replace(",", "")), m.group(0))
    return found


def _from_log(path: Path) -> tuple[KvCapacity | None, str]:
    """The log's capacity, or None and why it gave none (said in the plan's detail)."""
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return None, f"server log {path} unreadable ({exc.strerror})"
    got = kv_tokens_from_log(text)
    if got is None:
        return None, f'no "KV cache size: N tokens" line in {path}'
    tokens, line = got
    return KvCapacity(tokens=tokens, source="startup_log", detail=f'{path}: "{line}"'), ""


def _from_engine(engine: Capacity, server_log: Path | None) -> KvCapacity:
    """The engine's own capacity, corrected by its start-up log when one is given and says
    more (llama.cpp's unified cache)."""
    source = "engine_metrics" if engine.source.startswith("metrics:") else "engine_endpoint"
    if engine.from_log is not None and server_log is not None:
        try:
            corrected = engine.from_log(server_log.read_text(errors="replace"))
        except OSError:
            corrected = None
        if corrected is not None:
            tokens, line = corrected
            return KvCapacity(tokens=tokens, source="startup_log", detail=f'{server_log}: "{line}"')
    return KvCapacity(tokens=engine.tokens, source=source, detail=engine.detail)


def kv_capacity(
    snapshot: Snapshot | None,
    kv_budget_tokens: int | None,
    server_log: Path | None = None,
    engine: Capacity | None = None,
) -> KvCapacity:
    if kv_budget_tokens is not None:
        return KvCapacity(tokens=kv_budget_tokens, source="kv_budget", detail="--kv-budget")
    if engine is not None:
        return _from_engine(engine, server_log)
    labels = snapshot.info.get(CACHE_CONFIG, {}) if snapshot is not None else {}
    size = _int(labels, "kv_cache_size_tokens")
    if size:
        return KvCapacity(
            tokens=size,
            source="kv_cache_size_tokens",
            detail=f"{CACHE_CONFIG} kv_cache_size_tokens={size}",
        )
    why_not_log = "no --server-log"
    if server_log is not None:
        from_log, why_not_log = _from_log(server_log)
        if from_log is not None:
            return from_log
    blocks, block_size = _int(labels, "num_gpu_blocks"), _int(labels, "block_size")
    if blocks and block_size:
        return KvCapacity(
            tokens=blocks * block_size,
            source="num_gpu_blocks_x_block_size",
            detail=f"{CACHE_CONFIG} num_gpu_blocks={blocks} x block_size={block_size} "
            f"(may overstate hybrid models; {why_not_log})",
        )
    why = "no /metrics" if snapshot is None else f"no {CACHE_CONFIG} in /metrics"
    return KvCapacity(
        tokens=None, source="unknown", detail=f"{why} and no --kv-budget; {why_not_log}"
    )


def kv_needed(concurrency: int, prompt_tokens: int, max_tokens: int) -> int:
    return concurrency * (prompt_tokens + max_tokens)


def over_capacity_reason(needed: int, capacity: KvCapacity) -> str | None:
    if capacity.tokens is None or needed <= capacity.tokens:
        return None
    return f"needs {needed:,} KV tokens, the server has {capacity.tokens:,}"
