"""vLLM: its `vllm:*` families are the canonical keys already (bench.stream.metrics).

Sources (vllm-project/vllm): the metric names in vllm/v1/metrics/loggers.py (running,
waiting, spec-decode and prefix-cache counters, `vllm:cache_config_info` with
`num_gpu_blocks`, `block_size` and, in recent versions, `kv_cache_size_tokens`); `/version`,
`/tokenize` (`count`, `tokens`, `token_strs` with `return_token_strs`) and
`stream_options.continuous_usage_stats` in vllm/entrypoints/openai/. KV capacity stays with
bench.run.capacity (its log-line and label rules are vLLM's).
"""

from __future__ import annotations

from typing import Any

from bench.engines.base import EngineKind
from bench.stream import metrics

ENGINE = EngineKind(
    name="vllm",
    parse=metrics.parse,
    metric_names={
        "running": metrics.RUNNING,
        "waiting": metrics.WAITING,
        "spec_decode": metrics.SPEC_ACCEPTED,
        "prefix_cache": metrics.PREFIX_HITS,
        "kv_capacity": metrics.CACHE_CONFIG,
    },
    probes=("/version",),
    # The sampled token's own logprob entry, named "token_id:N" (vLLM's OpenAI server).
    answer_ids_fields={
        "chat": {"logprobs": True, "top_logprobs": 1, "return_tokens_as_token_ids": True},
        "completions": {"logprobs": 1, "return_tokens_as_token_ids": True},
    },
)


def looks_like(version_payload: Any) -> bool:
    """vLLM's /version answers {"version": "..."}."""
    return isinstance(version_payload, dict) and isinstance(version_payload.get("version"), str)
