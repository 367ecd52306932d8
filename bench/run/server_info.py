"""What the server under test is: model, max_model_len, version, speed, endpoints."""

from __future__ import annotations

import json
import math
from typing import Any

from bench.errors import ServerError, UsageError
from bench.results import ServerInfo, SpeedSource
from bench.stream.client import Client
from bench.stream.metrics import Snapshot, parse


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: hostile nesting
        return None


def _reported_speed(payload: dict[str, Any]) -> float | None:
    """A twin reports its speed in /version, as `speed` or `twin.speed`."""
    twin = payload.get("twin")
    for value in (payload.get("speed"), twin.get("speed") if isinstance(twin, dict) else None):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value) if math.isfinite(value) else None
    return None


async def detect(
    client: Client, *, model: str | None, speed_factor: float | None, now_s: float
) -> tuple[ServerInfo, Snapshot | None]:
    """Ask the server; the /metrics snapshot comes back too (KV capacity lives there)."""
    status, text = await client.get("/v1/models")
    if status in (401, 403):
        raise UsageError(
            f"the server refused the API key ({status} on /v1/models)",
            hint="set BENCH_API_KEY or VLLM_API_KEY in the environment",
        )
    payload = _json(text)
    if status != 200 or not isinstance(payload, dict) or not payload.get("data"):
        raise ServerError(f"/v1/models answered {status} without a model list")
    data = payload["data"]
    models: list[dict[str, Any]] = (
        [m for m in data if isinstance(m, dict) and isinstance(m.get("id"), str)]
        if isinstance(data, list)
        else []
    )
    if not models:
        raise ServerError(
            "/v1/models answered 200, but its data is not a list of models with an id",
            hint="bench run needs a vLLM-compatible server",
        )
    chosen = models[0]
    if model is not None:
        named = [m for m in models if m.get("id") == model]
        if not named:
            ids = ", ".join(str(m.get("id")) for m in models)
            raise UsageError(f"model {model!r} is not served here", hint=f"served: {ids}")
        chosen = named[0]
    max_model_len = chosen.get("max_model_len")
    if (
        not isinstance(max_model_len, int)
        or isinstance(max_model_len, bool)
        or not 0 < max_model_len < 1 << 40
    ):
        raise ServerError(
            f"/v1/models does not give max_model_len for {chosen.get('id')!r}",
            hint="bench run needs a vLLM-compatible server",
        )

    version_payload: dict[str, Any] = {}
    status, text = await client.get("/version")
    got = _json(text) if status == 200 else None
    if isinstance(got, dict):
        version_payload = got
    source: SpeedSource = "default"
    speed = 1.0
    if speed_factor is not None:
        speed, source = speed_factor, "flag"
    elif (reported := _reported_speed(version_payload)) is not None:
        speed, source = reported, "version"
    if speed <= 0:
        raise UsageError(f"speed factor {speed:g} is not positive", hint="use --speed-factor > 0")

    status, text = await client.get("/metrics")
    snapshot = parse(text, now_s) if status == 200 else None
    if snapshot is not None and not snapshot.values and not snapshot.info:
        snapshot = None  # a /metrics without vllm:* families is as good as none

    model_id = str(chosen.get("id"))
    tok_status, tok = await client.post_json("/tokenize", {"model": model_id, "prompt": "hello"})
    has_tokenize = tok_status == 200 and isinstance(tok, dict) and "count" in tok

    info = ServerInfo(
        url=client.base_url,
        model=model_id,
        max_model_len=max_model_len,
        version=str(version_payload["version"]) if "version" in version_payload else None,
        version_payload=version_payload,
        speed_factor=speed,
        speed_source=source,
        has_metrics=snapshot is not None,
        has_tokenize=has_tokenize,
    )
    return info, snapshot
