"""What the server under test is: engine, model, max_model_len, version, speed, endpoints,
and where each of those facts came from (`ServerInfo.facts_source`, docs/engines.md)."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable
from typing import Any

from bench import bounds
from bench.engines import base, tokenizers
from bench.engines.detect import ENGINES
from bench.engines.detect import detect as detect_engine
from bench.engines.facts import kv_fact, metric_facts, token_facts
from bench.errors import ServerError, UsageError
from bench.results import KvCapacity, ServerInfo, SpeedSource
from bench.stream import tokens
from bench.stream.client import Client
from bench.stream.metrics import Snapshot


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: hostile nesting
        return None


def _reported_speed(payload: dict[str, Any]) -> float | None:
    """A twin reports its speed in /version, as `speed` or `twin.speed`. One outside
    bench.bounds' speed range (1e-6 made a 2 s window last 2,000 hours; 1e300 made every
    latency 0) is refused: ServerError, unless --speed-factor overrides it."""
    twin = payload.get("twin")
    for value in (payload.get("speed"), twin.get("speed") if isinstance(twin, dict) else None):
        if isinstance(value, int | float) and not isinstance(value, bool):
            if isinstance(value, float) and not math.isfinite(value):
                return None  # NaN or inf says nothing: ignored, as a missing speed
            speed = bounds.number(value, bounds.SPEED_MIN, bounds.SPEED_MAX)
            if speed is None:
                raise ServerError(
                    f"/version reports a speed factor of {float(value):g}, outside "
                    f"{bounds.SPEED_MIN:g} to {bounds.SPEED_MAX:g}",
                    hint="give --speed-factor N to say how fast the server runs",
                )
            return speed
    return None


async def _served_model(client: Client, model: str | None) -> dict[str, Any]:
    """The entry of /v1/models to measure: `model` when given, else the first."""
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
    return chosen


async def _speed(
    client: Client, speed_factor: float | None
) -> tuple[dict[str, Any], float, SpeedSource]:
    """/version's payload, and the speed factor: --speed-factor, else what /version says
    (the twin), else 1."""
    version_payload: dict[str, Any] = {}
    status, text = await client.get("/version")
    got = _json(text) if status == 200 else None
    if isinstance(got, dict):
        version_payload = got
    source: SpeedSource = "default"
    speed = 1.0
    if speed_factor is not None:  # the flag wins, and /version's speed is not read
        speed, source = speed_factor, "flag"
    elif (reported := _reported_speed(version_payload)) is not None:
        speed, source = reported, "version"
    if speed <= 0:
        raise UsageError(f"speed factor {speed:g} is not positive", hint="use --speed-factor > 0")
    return version_payload, speed, source


async def detect(
    client: Client, *, model: str | None, speed_factor: float | None, now_s: float
) -> tuple[ServerInfo, Snapshot | None, base.Capacity | None]:
    """Ask the server; the /metrics snapshot (normalised by its engine) and the KV capacity
    the engine itself reports (None for vLLM: bench.run.capacity reads its labels) come
    back too."""
    chosen = await _served_model(client, model)
    found = await detect_engine(client)
    engine = found.engine
    facts = {"engine": found.how}
    max_model_len = base.positive_int(chosen.get("max_model_len"))
    facts["max_model_len"] = "endpoint:/v1/models max_model_len"
    if max_model_len is None and (own := engine.max_model_len(found.probes)) is not None:
        max_model_len, facts["max_model_len"] = own
    if max_model_len is None:
        raise ServerError(
            f"/v1/models does not give max_model_len for {chosen.get('id')!r}",
            hint="bench run needs a vLLM-compatible server",
        )

    version_payload, speed, source = await _speed(client, speed_factor)

    scraped = found.metrics_text
    snapshot: Snapshot | None = engine.parse(scraped, now_s) if scraped is not None else None
    if snapshot is not None and not snapshot.values and not snapshot.info:
        snapshot = None  # a /metrics without the engine's families is as good as none
    facts.update(metric_facts(engine, snapshot))

    model_id = str(chosen.get("id"))
    tok_status, tok = await client.post_json(
        "/tokenize", {"model": model_id, "prompt": "hello"}, idempotent=True
    )
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
        engine=engine.name,
        facts_source=facts,
    )
    return info, snapshot, engine.capacity(snapshot, found.probes)


async def engine_setup(
    client: Client,
    info: ServerInfo,
    kv: KvCapacity,
    engine_kv: base.Capacity | None,
    tokenizer_client: Client | None = None,
) -> tuple[ServerInfo, Callable[[str, float], Snapshot], tokens.Tokenize | None]:
    """After the capacity is settled: its fact and the way tokens are counted recorded,
    the client told how to count chunks without usage; the engine's /metrics parser and
    the text tokenizer (the user's `--tokenizer-url`, else the server's own), probed only
    where it will be used (not on vLLM: `--tokenizer-url` is then ignored, and stderr says
    so)."""
    engine = ENGINES[info.engine or "vllm"]
    tokenize, where = None, None
    if not tokenizers.uses_text_tokenizer(engine):  # vLLM counts by usage only, as always
        if tokenizer_client is not None:
            print(
                f"bench: --tokenizer-url ignored: the server ({engine.name}) reports token "
                "counts in usage on every chunk",
                file=sys.stderr,
                flush=True,
            )
    elif tokenizer_client is not None:
        tokenize = await tokenizers.url_tokenizer(tokenizer_client)
        where = f"{tokenizer_client.base_url}/tokenize (--tokenizer-url)"
        if tokenize is None:
            raise UsageError(
                f"--tokenizer-url {tokenizer_client.base_url}: its /tokenize does not count",
                hint="point it at a llama.cpp, vLLM or SGLang server of the same model",
            )
    else:
        tokenize = await tokenizers.server_tokenizer(client, engine, info.model)
        where = engine.tokenize_path if tokenize is not None else None
    client.counting = tokenizers.counting_for(engine, tokenize is not None)
    facts = {
        **info.facts_source,
        "kv_capacity": kv_fact(kv, engine_kv.source if engine_kv else None),
    } | token_facts(engine, where)
    return info.model_copy(update={"facts_source": facts}), engine.parse, tokenize
