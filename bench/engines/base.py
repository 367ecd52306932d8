"""The shape of one engine's facts (`EngineKind`) and a bounded Prometheus text reader.

Canonical keys: an engine's parser writes its families under the names bench.stream.metrics
reads (`vllm:num_requests_running`, ...), so one snapshot means the same whatever the
engine. Gauges with no vLLM counterpart (an engine's own acceptance or hit *rate*) go under
the `engine:*` keys below.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from bench.results import EngineName
from bench.stream.metrics import (
    Snapshot,
)

Probes = Mapping[str, Any]  # path -> the JSON an endpoint answered (detection's probes)


@dataclass(frozen=True)
class Capacity:
    """KV capacity an engine reports: tokens, and where (a `facts_source` value)."""

    tokens: int
    source: str  # "metrics:<name>" or "endpoint:<path> <field>"
    detail: str
    # The server's log (`bench run --server-log`) may correct it: text -> (tokens, detail).
    from_log: Callable[[str], tuple[int, str] | None] | None = None


def positive_int(value: object, limit: int = 1 << 40) -> int | None:
    """A count from hostile JSON: an int (or integral float) in (0, limit), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        return None
    n = int(value)
    return n if 0 < n < limit else None


def dig(obj: object, *keys: str) -> object:
    """obj[k1][k2]... through dicts only; None where a step is missing."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


@dataclass(frozen=True)
class EngineKind:
    """One engine: how to read its metrics and endpoints, and how it streams tokens."""

    name: EngineName
    parse: Callable[[str, float], Snapshot]  # its /metrics -> canonical snapshot
    # canonical fact -> the engine's own metric name (for `facts_source`)
    metric_names: Mapping[str, str]
    # endpoints detection reads for this engine (in order; the first answer counts)
    probes: tuple[str, ...] = ()
    capacity: Callable[[Snapshot | None, Probes], Capacity | None] = lambda s, p: None
    max_model_len: Callable[[Probes], tuple[int, str] | None] = lambda p: None
    # extra fields of every streamed request (llama.cpp: per-token timings)
    request_extras: Mapping[str, Any] = field(default_factory=dict)
    # a per-chunk cumulative output count the engine itself puts in each chunk, when
    # it cannot send usage on every chunk (llama.cpp's timings.predicted_n), and its name
    chunk_count: re.Pattern[bytes] | None = None
    chunk_count_name: str | None = None
    # True: usage on every chunk when asked (stream_options.continuous_usage_stats)
    continuous_usage: bool = True
    # fields of an answer-fingerprint request (bench.run.fingerprint) that ask the server for
    # the answer's token ids, by API: OpenAI's logprobs, whose entries carry an `id` on
    # llama.cpp; vLLM names the token "token_id:N" with return_tokens_as_token_ids
    answer_ids_fields: Mapping[str, Mapping[str, Any]] = field(
        default_factory=lambda: {
            "chat": {"logprobs": True, "top_logprobs": 1},
            "completions": {"logprobs": 1},
        }
    )
    # the text tokenizer: path, body for a text, and how to read the answer
    tokenize_path: str = "/tokenize"
    tokenize_body: Callable[[str, str], dict[str, Any]] = lambda model, text: {
        "model": model,
        "prompt": text,
        "add_special_tokens": False,
    }
