"""The twin's engine flavors: what SGLang or llama.cpp would answer where vLLM does.

`--engine vllm` (default) is the twin as it always was. The others keep the same simulated
engine and change only what a client sees (docs/engines.md cites each engine's source):

- sglang: `/get_server_info` and `/server_info` (server arguments, and `internal_states`
  with `max_total_num_tokens`), `/get_model_info`, the `sglang:*` gauges and counters on
  /metrics (labelled `model_name`), and usage on every content chunk when
  `stream_options.continuous_usage_stats` is asked, with or without `include_usage`.
- llamacpp: `/props` (`default_generation_settings.n_ctx`, `total_slots`), `/health`
  answering `{"status": "ok"}`, `/tokenize` taking `content` (with `with_pieces`), the
  unlabelled `llamacpp:*` families, no `max_model_len` in /v1/models (`meta.n_ctx`), no
  continuous usage, and `timings.predicted_n` on every chunk when `timings_per_token` is
  asked. Completions: usage and timings on the finish chunk, asked or not. Chat: with
  `include_usage` a last chunk with empty choices carries usage and timings; without it
  no usage at all, timings on the finish chunk. The KV cache is split into slots as
  `-np N -c C` does: as many slots of max_model_len as the profile's capacity holds (at
  least one, at most max_num_seqs), n_ctx = capacity / slots. The simulated engine does
  not defer requests beyond the slots, and /version stays (it carries the twin's speed).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from bench.twin.engine import TwinScheduler
from bench.twin.profile import Profile
from bench.twin.tokenizer import Tokenizer

Flavor = Literal["vllm", "sglang", "llamacpp"]
FLAVORS: tuple[Flavor, ...] = ("vllm", "sglang", "llamacpp")
# GET endpoints of each flavor besides /health, /v1/models, /version, /metrics.
GET_ROUTES: dict[Flavor, tuple[str, ...]] = {
    "vllm": (),
    "sglang": ("/get_server_info", "/server_info", "/get_model_info"),
    "llamacpp": ("/props",),
}


def llamacpp_slots(p: Profile) -> tuple[int, int]:
    """(total_slots, n_ctx per slot): a split cache whose slots hold the capacity."""
    slots = max(1, min(p.max_num_seqs, p.kv_capacity_tokens // p.max_model_len))
    return slots, p.kv_capacity_tokens // slots


def model_card(flavor: Flavor, p: Profile) -> dict[str, Any]:
    card: dict[str, Any] = {
        "id": p.model,
        "object": "model",
        "created": int(time.time()),
        "owned_by": {"vllm": "vllm", "sglang": "sglang", "llamacpp": "llamacpp"}[flavor],
    }
    if flavor == "llamacpp":
        card["meta"] = {
            "n_ctx": llamacpp_slots(p)[1],
            "n_ctx_train": p.max_model_len,
            "n_vocab": 151_936,
        }
        return card
    card.update(root=p.model, parent=None, max_model_len=p.max_model_len)
    if flavor == "vllm":
        card["permission"] = []
    return card


def get_json(flavor: Flavor, path: str, p: Profile, version: str) -> dict[str, Any]:
    """The answer of one of GET_ROUTES[flavor]."""
    if path in ("/get_server_info", "/server_info"):
        return {
            "model_path": p.model,
            "context_length": p.max_model_len,
            "max_running_requests": p.max_num_seqs,
            "page_size": p.block_size,
            "version": version,
            "internal_states": [{"max_total_num_tokens": p.kv_capacity_tokens}],
        }
    if path == "/get_model_info":
        return {"model_path": p.model, "tokenizer_path": p.model, "is_generation": True}
    # /props
    slots, n_ctx = llamacpp_slots(p)
    return {
        "default_generation_settings": {
            "n_ctx": n_ctx,
            "params": {"n_predict": -1, "timings_per_token": False},
        },
        "total_slots": slots,
        "model_alias": p.model,
        "model_path": f"/models/{p.model}.gguf",
        "endpoint_metrics": True,
        "build_info": f"twin-{version}",
    }


def health(flavor: Flavor) -> tuple[bytes, str]:
    if flavor == "llamacpp":
        return b'{"status":"ok"}', "application/json"
    return b"", "text/plain"


def tokenize_llamacpp(obj: dict[str, Any], tok: Tokenizer) -> dict[str, Any]:
    """llama.cpp's /tokenize: `content`, ids, or {"id", "piece"} with `with_pieces`."""
    content = obj.get("content", "")
    text = content if isinstance(content, str) else ""
    ids, pieces = tok.encode(text), tok.pieces(text)
    if obj.get("with_pieces") is True:
        return {"tokens": [{"id": i, "piece": s} for i, s in zip(ids, pieces, strict=True)]}
    return {"tokens": ids}


def _lines(name: str, kind: str, value: float, labels: str, help_: str) -> list[str]:
    shown = f"{{{labels}}}" if labels else ""
    return [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name}{shown} {float(value)!r}"]


def render_sglang(engine: TwinScheduler) -> list[str]:
    p, c = engine.profile, engine.counters
    lab = f'model_name="{p.model}"'
    out: list[str] = []
    for name, kind, value, help_ in (
        ("num_running_reqs", "gauge", len(engine.running), "The number of running requests."),
        ("num_queue_reqs", "gauge", len(engine.waiting), "The number of requests waiting."),
        ("token_usage", "gauge", engine.kv_usage(), "The token usage."),
        ("max_total_num_tokens", "gauge", p.kv_capacity_tokens, "KV cache pool tokens."),
        ("cache_hit_rate", "gauge", c.prefix_hits / max(c.prefix_queries, 1), "Hit rate."),
        ("prompt_tokens_total", "counter", c.prompt_tokens, "Prefill tokens processed."),
        ("generation_tokens_total", "counter", c.generation_tokens, "Generation tokens."),
    ):
        out += _lines(f"sglang:{name}", kind, value, lab, help_)
    if p.num_speculative_tokens:
        rate = c.accepted_tokens / max(c.draft_tokens, 1)
        length = 1 + c.accepted_tokens / max(c.drafts, 1)
        out += _lines("sglang:spec_accept_rate", "gauge", rate, lab, "Acceptance rate.")
        out += _lines("sglang:spec_accept_length", "gauge", length, lab, "Acceptance length.")
    return out


def render_llamacpp(engine: TwinScheduler) -> list[str]:
    p, c = engine.profile, engine.counters
    out: list[str] = []
    for name, kind, value, help_ in (
        ("prompt_tokens_total", "counter", c.prompt_tokens, "Number of prompt tokens processed."),
        ("tokens_predicted_total", "counter", c.generation_tokens, "Number of tokens predicted."),
        ("requests_processing", "gauge", len(engine.running), "Number of requests processing."),
        ("requests_deferred", "gauge", len(engine.waiting), "Number of requests deferred."),
    ):
        out += _lines(f"llamacpp:{name}", kind, value, "", help_)
    if p.num_speculative_tokens:
        for name, value in (
            ("spec_decode_num_drafts_total", c.drafts),
            ("spec_decode_num_draft_tokens_total", c.draft_tokens),
            ("spec_decode_num_accepted_tokens_total", c.accepted_tokens),
        ):
            out += _lines(f"llamacpp:{name}", "counter", value, "", name)
    return out
