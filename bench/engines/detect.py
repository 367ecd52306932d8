"""Which engine serves: read from what the server really offers, never from a flag.

Order: the families of `/metrics` (`sglang:`, `llamacpp:`, `vllm:`, or TensorRT-LLM's JSON
iteration statistics); without those, the engine's own endpoints (`/get_server_info` or
`/server_info` or `/get_model_info`: SGLang; `/props`: llama.cpp); else vLLM, as bench
always assumed (`facts_source.engine` then says "fallback:..."). The endpoints of the
engine found are read too: they carry facts the metrics lack (KV capacity, context size).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from bench.engines import llamacpp, sglang, trtllm, vllm
from bench.engines.base import EngineKind
from bench.results import EngineName, ServerInfo
from bench.stream.client import Client

ENGINES: dict[EngineName, EngineKind] = {
    e.name: e for e in (vllm.ENGINE, sglang.ENGINE, llamacpp.ENGINE, trtllm.ENGINE)
}
_FAMILY = re.compile(r"^(vllm|sglang|llamacpp):", re.MULTILINE)


@dataclass
class Detected:
    engine: EngineKind
    how: str  # a facts_source value: "metrics:sglang:*", "endpoint:/props", "fallback:..."
    metrics_text: str | None  # /metrics when it answered 200
    probes: dict[str, Any] = field(default_factory=dict)  # path -> JSON object answered


def _json_object(text: str) -> dict[str, Any] | None:
    try:
        got = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return got if isinstance(got, dict) else None


def family(metrics_text: str) -> EngineName | None:
    """The engine whose metric families the text has (the first family line decides)."""
    m = _FAMILY.search(metrics_text)
    if m is not None:
        name = m.group(1)
        return "vllm" if name == "vllm" else "sglang" if name == "sglang" else "llamacpp"
    return "trtllm" if trtllm.looks_like(metrics_text) else None


async def _probe(client: Client, paths: tuple[str, ...], into: dict[str, Any]) -> None:
    for path in paths:
        if path in into:
            continue
        status, text = await client.get(path)
        obj = _json_object(text) if status == 200 else None
        if obj is not None:
            into[path] = obj


async def detect(client: Client) -> Detected:
    status, text = await client.get("/metrics")
    metrics_text = text if status == 200 else None
    probes: dict[str, Any] = {}
    found = family(metrics_text or "")
    if found is not None:
        engine = ENGINES[found]
        await _probe(client, tuple(p for p in engine.probes if p != "/version"), probes)
        how = "metrics:JSON iteration stats" if found == "trtllm" else f"metrics:{found}:*"
        return Detected(engine, how, metrics_text, probes)
    await _probe(client, sglang.ENGINE.probes, probes)
    if sglang.looks_like(probes):
        path = next(p for p in sglang.ENGINE.probes if p in probes)
        return Detected(sglang.ENGINE, f"endpoint:{path}", metrics_text, probes)
    await _probe(client, llamacpp.ENGINE.probes, probes)
    if llamacpp.looks_like(probes):
        return Detected(llamacpp.ENGINE, "endpoint:/props", metrics_text, probes)
    why = "no engine metric families or endpoints; vLLM assumed"
    return Detected(vllm.ENGINE, f"fallback:{why}", metrics_text, probes)


def request_extras(info: ServerInfo) -> dict[str, Any]:
    """The engine's own request fields (llama.cpp: per-token timings)."""
    return dict(ENGINES[info.engine].request_extras) if info.engine is not None else {}


def engine_of(info: ServerInfo) -> EngineKind:
    """The engine detection found (vLLM for a results.json from before detection)."""
    return ENGINES[info.engine] if info.engine is not None else vllm.ENGINE
