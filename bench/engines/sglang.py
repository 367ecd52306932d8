"""SGLang: `sglang:*` metrics, `/get_server_info` (or `/server_info`), `/get_model_info`.

Sources (sgl-project/sglang):
- python/sglang/srt/metrics/collector.py: the gauges `sglang:num_running_reqs`,
  `sglang:num_queue_reqs`, `sglang:max_total_num_tokens` (tokens of the KV pool),
  `sglang:spec_accept_rate`, `sglang:spec_accept_length` and `sglang:cache_hit_rate`
  (averages the scheduler computes itself, not counters), and the counter
  `sglang:generation_tokens_total`. Metrics exist only with `--enable-metrics`.
- python/sglang/srt/entrypoints/openai/protocol.py: `StreamOptions` has
  `continuous_usage_stats`; serving_chat.py / serving_completions.py then put cumulative
  usage on every content chunk. The model card of `/v1/models` carries `max_model_len`.
- `/get_server_info`: the server's arguments and scheduler state; `max_total_num_tokens` is
  read from it (top level, or the first of `internal_states`) only when the metrics lack it.
"""

from __future__ import annotations

from bench.engines.base import Capacity, EngineKind, Probes, dig, positive_int
from bench.stream import metrics
from bench.stream.metrics import (
    PREFIX_HIT_RATE,
    SPEC_ACCEPT_LENGTH,
    SPEC_ACCEPT_RATE,
    Snapshot,
    prometheus,
)

RUNNING = "sglang:num_running_reqs"
WAITING = "sglang:num_queue_reqs"
MAX_TOTAL_TOKENS = "sglang:max_total_num_tokens"
ACCEPT_RATE = "sglang:spec_accept_rate"
ACCEPT_LENGTH = "sglang:spec_accept_length"
HIT_RATE = "sglang:cache_hit_rate"
GENERATION = "sglang:generation_tokens_total"
SERVER_INFO = ("/get_server_info", "/server_info")

_RENAME = {
    RUNNING: metrics.RUNNING,
    WAITING: metrics.WAITING,
    GENERATION: metrics.GENERATION_TOKENS,
    ACCEPT_RATE: SPEC_ACCEPT_RATE,
    ACCEPT_LENGTH: SPEC_ACCEPT_LENGTH,
    HIT_RATE: PREFIX_HIT_RATE,
}


def parse(text: str, t_s: float) -> Snapshot:
    return prometheus(text, "sglang:", _RENAME, t_s)


def _capacity(snapshot: Snapshot | None, probes: Probes) -> Capacity | None:
    if snapshot is not None:
        n = positive_int(snapshot.get(MAX_TOTAL_TOKENS))
        if n is not None:
            return Capacity(n, f"metrics:{MAX_TOTAL_TOKENS}", f"{MAX_TOTAL_TOKENS}={n}")
    for path in SERVER_INFO:
        info = probes.get(path)
        states = dig(info, "internal_states")
        first = states[0] if isinstance(states, list) and states else None
        for where in (info, first):
            n = positive_int(dig(where, "max_total_num_tokens"))
            if n is not None:
                return Capacity(
                    n, f"endpoint:{path} max_total_num_tokens", f"{path} max_total_num_tokens={n}"
                )
    return None


def _max_model_len(probes: Probes) -> tuple[int, str] | None:
    for path in SERVER_INFO:
        n = positive_int(dig(probes.get(path), "context_length"))
        if n is not None:
            return n, f"endpoint:{path} context_length"
    return None


ENGINE = EngineKind(
    name="sglang",
    parse=parse,
    metric_names={
        "running": RUNNING,
        "waiting": WAITING,
        "spec_decode": ACCEPT_RATE,
        "prefix_cache": HIT_RATE,
        "kv_capacity": MAX_TOTAL_TOKENS,
    },
    probes=(*SERVER_INFO, "/get_model_info"),
    capacity=_capacity,
    max_model_len=_max_model_len,
)


def looks_like(probes: Probes) -> bool:
    """A /get_server_info (or /server_info) object, or /get_model_info's `model_path`."""
    if any(isinstance(probes.get(p), dict) for p in SERVER_INFO):
        return True
    return isinstance(dig(probes.get("/get_model_info"), "model_path"), str)
