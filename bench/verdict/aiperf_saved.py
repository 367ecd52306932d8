"""Runs exported by NVIDIA's AIPerf (`aiperf profile`) as `RunFigures`, for `bench compare`.

AIPerf (ai-dynamo/aiperf, its 0.13.0 package read: aiperf/exporters/metrics_json_exporter.py,
aiperf/config/phases.py, aiperf/metrics/types/*.py) writes one `profile_export_aiperf.json`
per run into its --artifact-dir (`<prefix>.json` with --profile-export-prefix): one JSON
object holding `schema_version`, `aiperf_version`, `input_config` (the run's configuration,
defaults left out), `was_cancelled`, `is_complete`, `error_summary`, and a stats object per
metric: {"unit": "ms", "avg", "p1" ... "p50" ... "p99", "min", "max", "std", "count"} (a
run-level metric has "avg" only). Its keys `aiperf_version`, `input_config`, `was_cancelled`
and `is_complete` tell it from any other JSON. A path here is such a file, or a folder
(without results.json) holding them up to 4 levels down (an artifact dir, a sweep's
profile_runs/run_NNNN/); other JSON in it (inputs.json, aggregates) is passed over.

Each file is one run of one phase of traffic, keyed as `workload_cells` keys a workload point
(its `input_config.phases` entry of kind "profiling"):
  type "poisson" / "gamma" / "constant", `rate` R  -> ("workload", "R/s", 0)   open loop
  type "concurrency", `concurrency` C (default 1)  -> ("workload", "closed", C)
  type "fixed_schedule"                            -> ("workload", "trace", 0)
Files of the same key are that cell's trials. Refused (one line): a rate phase capped at a
concurrency, ramps, rate series, cancellation, user_centric phases, several profiling
phases, an endpoint other than chat or completions.

Figures, each converted to ours (seconds; AIPerf states the unit of every metric, "ns", "us",
"ms" or "sec", and 0.13.0 writes latencies in ms):
  output_token_throughput.avg    total output tokens / benchmark duration (first request
                                 sent to last content response)      -> wl_output_tok_s
  time_to_first_token.p50, .p99  request start to its first content response
                                                                     -> wl_ttft_p50_s, _p99_s
  inter_token_latency.p50, .p99  per request (latency - TTFT) / (output tokens - 1), latency
                                 ending at the last content response: vLLM's TPOT and ours,
                                 the first token excluded            -> wl_tpot_p50_s, _p99_s
AIPerf's percentiles are linear between order statistics over its valid requests, as ours.
Its clock starts just before the request is written (about 1 ms earlier than ours: docs/
workloads.md, the peers), a measurement difference left in its TTFT.

Not taken: output tok/s and ITL unless the run used --use-server-token-count (otherwise
AIPerf counts output tokens with its own tokenizer on the text; ours are the server's usage
counts); ITL under --per-chunk-usage (its divisor is then output tokens minus the first
chunk's, not minus 1); AIPerf's "inter_chunk_latency" (per chunk, ours is per request), the
adj_* percentiles (failed requests as +inf), request throughput, goodput and the rest.

A run with failed requests is an invalid cell, a cancelled or incomplete one interrupted, as
a bench point. Single-trial noise is estimated from the export's own order statistics as
`workload_cells` does (p50 from p50 and p90; output tok/s from ITL's spread); a p99 has none.
The file is outside input: bounded in size and count, every field type-checked, one line of
error naming the file and field when it is not what AIPerf writes.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from bench.errors import UsageError
from bench.verdict import saved_files
from bench.verdict.cells import Key, RunFigures, mean_rse, median_rse
from bench.verdict.saved_files import as_object as _dict
from bench.verdict.saved_files import short as _short
from bench.verdict.saved_points import Points, PointTrial, closed_point, rate_point

MAX_BYTES = 64 * 1024 * 1024  # one export is ~20 KB; bounded all the same
HEAD_BYTES = 1024 * 1024
MAX_CONCURRENCY = 1_000_000  # requests in flight a run can have, and a rate it can offer
MAX_RATE = 1e9
MAX_SECONDS = 1e8  # a run's benchmark_duration taken into server_s (a longer one is not)
SOURCE = "AIPerf profile_export_aiperf.json"  # the kind of file, in a run's metadata
SIGNATURE = frozenset({"aiperf_version", "input_config", "was_cancelled", "is_complete"})
_SECONDS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "sec": 1.0, "s": 1.0}
_RATE_TYPES = frozenset({"poisson", "gamma", "constant"})
_APIS = {"chat": "chat", "completions": "completions"}
# Phase fields that change the traffic away from any point bench runs.
_REFUSED_FIELDS = (
    "rate_ramp",
    "rate_series",
    "concurrency_ramp",
    "prefill_concurrency",
    "prefill_ramp",
    "cancellation",
)


def _looks_exported(path: Path) -> bool:
    """A .json file whose head has AIPerf's export keys (read no further than that)."""
    head = saved_files.json_head(path, HEAD_BYTES)
    return head is not None and all(f'"{key}"' in head for key in SIGNATURE)


def recognises(path: Path) -> bool:
    """An AIPerf profile export, or a folder of them without results.json."""
    return saved_files.recognises(path, _looks_exported, "AIPerf exports")


def _read(path: Path) -> tuple[dict[str, Any], bytes]:
    try:
        size = path.stat().st_size
        if size > MAX_BYTES:
            raise UsageError(
                f"{path}: {size} bytes, over the {MAX_BYTES} an AIPerf export may have"
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not UTF-8 text") from None
    except (ValueError, RecursionError):
        raise UsageError(f"{path}: not JSON") from None
    if not isinstance(value, dict):
        raise UsageError(f"{path}: not a JSON object")
    missing = sorted(SIGNATURE - value.keys())
    if missing:
        raise UsageError(f"{path}: not an AIPerf profile export (no {', '.join(missing)})")
    return value, raw


def _finite(value: Any, where: str, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise UsageError(f"{where}: {name} is {_short(value)}, not a number")
    return float(value)


def _stat(data: dict[str, Any], metric: str, stat: str, where: str) -> float | None:
    """`data[metric][stat]` in seconds (a time) or as is (tok/s, counts); None if absent."""
    if metric not in data:
        return None
    m = _dict(data[metric], where, metric)
    if stat not in m:
        return None
    value = _finite(m[stat], where, f"{metric}.{stat}")
    if stat == "count":
        return value
    unit = m.get("unit")
    if not isinstance(unit, str):
        raise UsageError(f"{where}: {metric}.unit is {_short(unit)}, not a unit")
    if metric in ("time_to_first_token", "inter_token_latency"):
        if unit not in _SECONDS:
            raise UsageError(f"{where}: {metric}.unit is {_short(unit)}, not a time unit")
        return value * _SECONDS[unit]
    if metric == "output_token_throughput" and unit != "tokens/sec":
        raise UsageError(f"{where}: {metric}.unit is {_short(unit)}, not tokens/sec")
    return value


def _flag(config: dict[str, Any], name: str, where: str) -> bool:
    value = config.get(name, False)
    if not isinstance(value, bool):
        raise UsageError(f"{where}: input_config.endpoint.{name} is {_short(value)}, not a flag")
    return value


def _key(config: dict[str, Any], where: str) -> tuple[Key, str]:
    """The point the run's profiling phase is, and its arrivals in words."""
    phases = config.get("phases")
    if not isinstance(phases, list) or not all(isinstance(p, dict) for p in phases):
        raise UsageError(f"{where}: input_config.phases is {_short(phases)}, not a list of phases")
    profiling = [
        p
        for p in phases
        if p.get("kind", "profiling" if p.get("name") == "profiling" else None) == "profiling"
    ]
    if len(profiling) != 1:
        raise UsageError(
            f"{where}: {len(profiling)} profiling phases in input_config.phases, not one",
            hint="one AIPerf run of one phase is one workload point",
        )
    (phase,) = profiling
    kind = phase.get("type")
    if not isinstance(kind, str):
        raise UsageError(f"{where}: profiling phase type {_short(kind)}, not a phase type")
    for name in _REFUSED_FIELDS:
        if phase.get(name) is not None:
            raise UsageError(
                f"{where}: its profiling phase has {name}: traffic no bench point sends",
                hint="only a fixed rate, a fixed concurrency or a fixed schedule lines up",
            )
    if kind == "concurrency":
        c = phase.get("concurrency", 1)
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_CONCURRENCY:
            raise UsageError(f"{where}: concurrency is {_short(c)}, not a count of requests")
        return closed_point(c)
    if kind in _RATE_TYPES:
        rate = _finite(phase.get("rate"), where, "the phase's rate")
        if not 0 < rate <= MAX_RATE:
            raise UsageError(f"{where}: the phase's rate is {rate:g}, not a rate")
        cap = phase.get("concurrency")
        capped = None if cap is None else _short(cap)
        return rate_point(kind, rate, capped, where, "run AIPerf without --concurrency")
    if kind == "fixed_schedule":
        return ("workload", "trace", 0), "fixed schedule"
    raise UsageError(
        f"{where}: profiling phase type {_short(kind)}: no bench workload point",
        hint="bench reads AIPerf's request-rate, concurrency and fixed-schedule runs",
    )


def _errors(data: dict[str, Any], where: str) -> int:
    """How many requests failed (error_request_count, else error_summary's counts)."""
    count = _stat(data, "error_request_count", "avg", where)
    if count is not None:
        return round(count)
    summary = data.get("error_summary") or []
    if not isinstance(summary, list):
        raise UsageError(f"{where}: error_summary is {_short(summary)}, not a list")
    total = 0
    for item in summary:
        n = _dict(item, where, "an error_summary entry").get("count", 1)
        total += round(_finite(n, where, "error_summary count"))
    return total


def _rse(data: dict[str, Any], metric: str, of: str) -> float | None:
    """A single trial's relative error of `metric`'s median or of a mean over its requests,
    from the export's count, avg, p50 and p90 (as `workload_cells`); None without them."""
    try:
        n, mean, p50, p90 = (_stat(data, metric, s, "") for s in ("count", "avg", "p50", "p90"))
    except UsageError:
        return None
    if n is None or mean is None or p50 is None or p90 is None or not 0 <= n < 1e12:
        return None
    return median_rse(int(n), p50, p90) if of == "median" else mean_rse(int(n), mean, p50, p90)


def _figures(
    data: dict[str, Any], endpoint: dict[str, Any], where: str
) -> tuple[dict[str, float], dict[str, float]]:
    """(figures in seconds and tok/s, their single-trial relative errors)."""
    server_counts = _flag(endpoint, "use_server_token_count", where)
    per_chunk = _flag(endpoint, "per_chunk_usage", where)
    values: dict[str, float] = {}
    rse: dict[str, float] = {}
    taken = [("ttft", "time_to_first_token")]
    if server_counts and not per_chunk:
        taken.append(("tpot", "inter_token_latency"))
    for name, metric in taken:
        p50 = _stat(data, metric, "p50", where)
        p99 = _stat(data, metric, "p99", where)
        if p50 is None or p99 is None:
            continue
        values[f"wl_{name}_p50_s"] = p50
        values[f"wl_{name}_p99_s"] = p99
        if (r := _rse(data, metric, "median")) is not None:
            rse[f"wl_{name}_p50_s"] = r
    if server_counts:
        tok_s = _stat(data, "output_token_throughput", "avg", where)
        if tok_s is not None:
            values["wl_output_tok_s"] = tok_s
            if (r := _rse(data, "inter_token_latency", "mean")) is not None:
                rse["wl_output_tok_s"] = r
    return values, rse


def _run_of(data: dict[str, Any], where: str) -> tuple[Key, PointTrial, dict[str, str]]:
    """(key, the trial it is, what the run was) of one export."""
    config = _dict(data["input_config"], where, "input_config")
    endpoint = _dict(config.get("endpoint", {}), where, "input_config.endpoint")
    api = _APIS.get(str(endpoint.get("type", "chat")))
    if api is None:
        raise UsageError(
            f"{where}: endpoint type {_short(endpoint.get('type'))}: not a generation endpoint "
            "bench runs (chat, completions)"
        )
    key, arrivals = _key(config, where)
    models = _dict(config.get("models", {}), where, "input_config.models").get("items")
    model = "?"
    if isinstance(models, list) and models and isinstance(models[0], dict):
        model = str(models[0].get("name", "?"))[:200]
    about = {"model": model, "api": api, "arrivals": arrivals}
    if data["was_cancelled"] is not False or data["is_complete"] is not True:
        why = "AIPerf's run was cancelled or did not complete"
        return key, PointTrial("interrupted", why, {}, {}), about
    failed = _errors(data, where)
    completed = _stat(data, "request_count", "avg", where)
    if failed > 0:
        return key, PointTrial("invalid", f"{failed} failed requests", {}, {}), about
    if completed is not None and completed <= 0:
        return key, PointTrial("failed", "no request completed", {}, {}), about
    values, rse = _figures(data, endpoint, where)
    if not values:
        raise UsageError(
            f"{where}: no figure bench reads (time_to_first_token needs --streaming; output "
            "tok/s and ITL need --use-server-token-count)"
        )
    return key, PointTrial("valid", None, values, rse), about


def load(path: Path) -> RunFigures:
    """The AIPerf exports at `path` as one run (see the module docstring)."""
    points = Points()
    for file in saved_files.files(path, _looks_exported, "AIPerf exports"):
        data, raw = _read(file)
        where = str(file)
        key, trial, about = _run_of(data, where)
        duration = _stat(data, "benchmark_duration", "avg", where) or 0.0
        points.point(key, trial, about, duration if 0.0 <= duration <= MAX_SECONDS else 0.0)
        points.file(raw, data["aiperf_version"])
    if not points.by_key:
        raise UsageError(f"{path}: holds no AIPerf profile exports")
    return points.run(path, tool="AIPerf", verb="exported", source=SOURCE, what="runs")
