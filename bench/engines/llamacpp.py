"""llama.cpp's `llama-server`: `llamacpp:*` metrics, `/props`, `/health`, `/tokenize`.

Sources (ggml-org/llama.cpp, tools/server/: server-context.cpp and, before the split,
server.cpp; the server's README.md):
- `/metrics` (only with `--metrics`): the gauges `llamacpp:requests_processing` (requests
  in slots) and `llamacpp:requests_deferred` (waiting for a slot), the counter
  `llamacpp:tokens_predicted_total`, and in recent builds the speculative counters
  `llamacpp:spec_decode_num_draft_tokens_total`, `..._accepted_tokens_total`,
  `..._drafts_total`. No KV capacity is exported there.
- `/props`: `default_generation_settings.n_ctx` is one slot's context and `total_slots`
  the number of parallel slots. With `-np` given the cache is split (observed on b11312:
  `-np 4 -c 32768` gives n_ctx 8,192 per slot, and the log says
  "n_slots = 4, n_ctx_slot = 8192, kv_unified = 'false'"): capacity is n_ctx x total_slots.
  With a unified cache (`--kv-unified`, or recent builds choosing the slot count
  themselves) every slot reports the whole cache as n_ctx: /props cannot tell, the
  server's log can (`bench run --server-log`), and then capacity is n_ctx.
- streaming: no `continuous_usage_stats`; usage comes with the last chunk. With
  `timings_per_token: true` every chunk carries `timings` whose `predicted_n` is the
  cumulative count of generated tokens: that is the per-chunk count bench reads.
- `/tokenize` takes `{"content": ...}` (and `with_pieces`) and answers `tokens`, a list of
  ids or of `{"id", "piece"}` objects. It applies no chat template, so prompt sizing stays
  on usage calibration; it counts streamed text.
"""

from __future__ import annotations

import re
from typing import Any

from bench.engines.base import Capacity, EngineKind, Probes, dig, positive_int
from bench.stream import metrics
from bench.stream.metrics import Snapshot, prometheus

RUNNING = "llamacpp:requests_processing"
WAITING = "llamacpp:requests_deferred"
GENERATION = "llamacpp:tokens_predicted_total"
DRAFT_TOKENS = "llamacpp:spec_decode_num_draft_tokens_total"
ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
DRAFTS = "llamacpp:spec_decode_num_drafts_total"
PROPS = "/props"

_RENAME = {
    RUNNING: metrics.RUNNING,
    WAITING: metrics.WAITING,
    GENERATION: metrics.GENERATION_TOKENS,
    DRAFT_TOKENS: metrics.SPEC_DRAFT_TOKENS,
    ACCEPTED: metrics.SPEC_ACCEPTED,
    DRAFTS: metrics.SPEC_DRAFTS,
}
# Inside `timings` of a streamed chunk; JSON escapes quotes in text, so only a key matches.
PREDICTED_N = re.compile(rb'"predicted_n":\s*(\d+)')


def parse(text: str, t_s: float) -> Snapshot:
    return prometheus(text, "llamacpp:", _RENAME, t_s)


def _slot_ctx(probes: Probes) -> int | None:
    return positive_int(dig(probes.get(PROPS), "default_generation_settings", "n_ctx"))


# llama-server's start-up line on how it split the context among its slots.
_SLOTS_LINE = re.compile(r"n_ctx_slot = (\d+), kv_unified = '(true|false)'")


def _unified_from_log(text: str) -> tuple[int, str] | None:
    """(n_ctx, the line) when the log's last start says the KV cache is unified."""
    found = None
    for m in _SLOTS_LINE.finditer(text):
        found = m
    if found is None or found.group(2) != "true":
        return None
    return int(found.group(1)), found.group(0)


def _capacity(snapshot: Snapshot | None, probes: Probes) -> Capacity | None:
    n_ctx = _slot_ctx(probes)
    if n_ctx is None:
        return None
    slots = positive_int(dig(probes.get(PROPS), "total_slots"), 1 << 16) or 1
    return Capacity(
        n_ctx * slots,
        "endpoint:/props default_generation_settings.n_ctx x total_slots",
        f"/props n_ctx={n_ctx} per slot x total_slots={slots} (a split cache; a unified one "
        "is n_ctx: give --server-log or --kv-budget)",
        from_log=_unified_from_log,
    )


def _max_model_len(probes: Probes) -> tuple[int, str] | None:
    n = _slot_ctx(probes)
    return None if n is None else (n, "endpoint:/props default_generation_settings.n_ctx")


def _tokenize_body(model: str, text: str) -> dict[str, Any]:
    return {"content": text, "add_special": False, "with_pieces": True}


ENGINE = EngineKind(
    name="llamacpp",
    parse=parse,
    metric_names={
        "running": RUNNING,
        "waiting": WAITING,
        "spec_decode": ACCEPTED,
    },
    probes=(PROPS,),
    capacity=_capacity,
    max_model_len=_max_model_len,
    request_extras={"timings_per_token": True},
    chunk_count=PREDICTED_N,
    chunk_count_name="timings.predicted_n",
    continuous_usage=False,
    tokenize_body=_tokenize_body,
    # Its OpenAI-compatible endpoints take logprobs (entries with the token's `id`); n_probs
    # is its own name for the same on /completion-style requests.
    answer_ids_fields={
        "chat": {"logprobs": True, "top_logprobs": 1, "n_probs": 1},
        "completions": {"logprobs": 1, "n_probs": 1},
    },
)


def looks_like(probes: Probes) -> bool:
    """/props with `default_generation_settings` or `total_slots`."""
    props = probes.get(PROPS)
    return isinstance(props, dict) and (
        "default_generation_settings" in props or "total_slots" in props
    )
