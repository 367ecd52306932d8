"""Runs saved by GuideLLM (`guidellm run --output kind=json`) as `RunFigures`, for `bench compare`.

GuideLLM (vllm-project/guidellm, its 0.8.1 package read: guidellm/benchmark/schemas/report.py,
benchmark.py, metrics.py, guidellm/schemas/base/statistics.py, request_stats.py,
guidellm/scheduler/strategies.py) writes one `benchmarks.json` per run: its
`GenerativeBenchmarksReport` as JSON, {"metadata": {"version": 2, "guidellm_version", ...},
"config", "benchmarks": [...], "conclusions"}. Its `metadata.guidellm_version` and
`benchmarks` tell it from any other JSON. A path here is such a file, or a folder (without
results.json) holding them up to 4 levels down; other JSON in it is passed over. GuideLLM's
YAML, CSV and HTML outputs are not read.

Each benchmark of a file is one workload point, keyed as `workload_cells` keys one by its
`config.strategy` (`type_`), the limit on requests in flight read from `config.profile`
(`max_concurrency`, the user's; the strategy's own is GuideLLM's default cap):
  "constant" / "poisson", `rate` R           -> ("workload", "R/s", 0)   open loop
  "throughput" (every request at once)       -> ("workload", "inf/s", 0)
  "throughput" capped at C in flight         -> ("workload", "closed", C)
  "concurrent", `streams` C                  -> ("workload", "closed", C)
  "synchronous"                              -> ("workload", "closed", 1)
  "trace"                                    -> ("workload", "trace", 0)
Benchmarks of the same key (in one file or several) are that cell's trials. Refused (one
line): a rate capped at a concurrency, a ramp-up (`rampup_duration` > 0), another strategy,
a request format other than chat or completions, a backend other than openai_http.

Figures, each converted to ours (GuideLLM writes latencies in ms; a summary is
`metrics.<name>.successful`: mean, median, count, percentiles p001 ... p50 ... p99, p999):
  output_tokens_per_second.mean  a rate over the measurement window weighted by time, whose
                                 mean is the output tokens of the completed requests over
                                 the window (first request start to last request end when
                                 no warm-up or cool-down is set)  -> wl_output_tok_s
  time_to_first_token_ms p50, p99  request start (just before it is sent) to the first
                                 streamed token                   -> wl_ttft_p50_s, _p99_s
  inter_token_latency_ms p50, p99  per request (last token - first token) / (output tokens
                                 - 1): vLLM's TPOT and ours       -> wl_tpot_p50_s, _p99_s
Where GuideLLM's definitions differ from ours:
  - its `time_per_output_token_ms` is (last token - request start) / output tokens: the first
    token (TTFT) included. It is not our TPOT and is not taken.
  - its inter-token latency distribution weighs each request by its output tokens - 1, so its
    percentiles are per token. They are per request, as ours, only when every completed
    request has the same output length (`output_token_count` min = max, as under
    ignore_eos, which GuideLLM's synthetic data sets): TPOT is taken only then.
  - its percentiles are order statistics, not interpolated: the first value whose cumulative
    share reaches p (float rounding decides a tie; of 20 requests its p50 is the 11th
    smallest, ours the mean of the 10th and 11th; under 100 requests its p99 is the largest).
  - output tokens are the server's usage counts, or GuideLLM counts stream iterations when
    the server sends no usage (its `output_metrics.total_tokens` is then null). A file whose
    per-request stats show that gives TTFT only. Its clock starts just before the request is
    sent, as AIPerf's (about 1 ms before ours: docs/workloads.md, the peers).
A non-streaming benchmark (`backend.stream` false) gives output tok/s only.

Not taken: means, request latency, requests/s, concurrency, the per-token rates, goodput.

A benchmark with errored requests is an invalid cell, one with no completed request failed.
Incomplete requests (those GuideLLM cancels when a max_duration ends its run) are not in its
summaries, as requests still running at the end are not in ours; the cell says nothing of
them. Single-trial noise is estimated from the summaries' order statistics as
`workload_cells` does (p50 from p50 and p90 over the completed requests; output tok/s from
the TPOT spread); a p99 has none. The file is outside input: read bounded
(`run_files.read_json`), bounded in count, every field taken type-checked and range-checked
(`bench.bounds`), one line of error naming the file, benchmark and field when it is not what
GuideLLM writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, NamedTuple

from bench import bounds
from bench.errors import UsageError
from bench.run_files import read_json
from bench.verdict import saved_files
from bench.verdict.cells import Key, RunFigures, Status, mean_rse, median_rse
from bench.verdict.saved_files import as_object as _dict
from bench.verdict.saved_files import short as _short
from bench.verdict.saved_points import Points, PointTrial, closed_point, rate_point

MAX_BYTES = 256 * 1024 * 1024  # ~95 KB of summaries a benchmark, ~3.5 KB a request kept
MAX_BENCHMARKS = 4096  # benchmarks in all the files read
HEAD_BYTES = 1024 * 1024
MAX_CONCURRENCY = 1_000_000  # requests in flight a run can have, and a rate it can offer
MAX_RATE = 1e9
MAX_MS = 1e12  # a latency in ms (bench.bounds.FIGURE_MAX in seconds would be 1e15 ms)
SOURCE = "GuideLLM benchmarks.json"  # the kind of file, in a run's metadata
SIGNATURE = ('"guidellm_version"', '"benchmarks"')
_APIS = {"/v1/chat/completions": "chat", "/v1/completions": "completions"}
_RATE_TYPES = frozenset({"constant", "poisson"})


class GuidellmPoint(NamedTuple):
    """One GuideLLM benchmark as a workload point: its key, the trial it is (status and
    figures)."""

    key: Key
    trial: PointTrial
    about: dict[str, str]  # model, api, arrivals
    seconds: float  # its measurement window
    identity: str  # its config.id_


def _looks_saved(path: Path) -> bool:
    """A .json file whose head has GuideLLM's report keys (read no further than that)."""
    head = saved_files.json_head(path, HEAD_BYTES)
    return head is not None and all(key in head for key in SIGNATURE)


def recognises(path: Path) -> bool:
    """A GuideLLM benchmarks.json, or a folder of them without results.json."""
    return saved_files.recognises(path, _looks_saved, "GuideLLM reports")


def _number(value: Any, where: str, name: str, hi: float) -> float:
    got = bounds.number(value, 0.0, hi)
    if got is None:
        raise UsageError(f"{where}: {name} is {_short(value)}, not a number in 0..{hi:g}")
    return got


def _count(value: Any, where: str, name: str) -> int:
    got = bounds.count(value) if not isinstance(value, str) else None
    if got is None:
        raise UsageError(f"{where}: {name} is {_short(value)}, not a count")
    return got


def _read(path: Path) -> tuple[dict[str, Any], list[Any], bytes]:
    """(metadata, benchmarks, the file's bytes) of one report."""
    data = read_json(path, error=UsageError, max_bytes=MAX_BYTES)
    if not isinstance(data, dict):
        raise UsageError(f"{path}: not a JSON object")
    meta = data.get("metadata")
    if not isinstance(meta, dict) or "guidellm_version" not in meta or "benchmarks" not in data:
        raise UsageError(
            f"{path}: not a GuideLLM report (no metadata.guidellm_version and benchmarks)"
        )
    benchmarks = data["benchmarks"]
    if not isinstance(benchmarks, list):
        raise UsageError(f"{path}: benchmarks is {_short(benchmarks)}, not a list")
    try:
        raw = path.read_bytes()  # read_json bounded it; hashed for the run's identity
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    return meta, benchmarks, raw


def _cap(config: dict[str, Any], kind: str, where: str) -> int | None:
    """The user's limit on requests in flight (config.profile.max_concurrency), None for
    none; a ramp-up refused (its traffic is no one point)."""
    strategy = _dict(config.get("strategy"), where, "config.strategy")
    ramp = strategy.get("rampup_duration", 0.0)
    if ramp is not None and ramp != 0:
        raise UsageError(
            f"{where}: its {kind} strategy has rampup_duration {_short(ramp)}: traffic no "
            "bench point sends",
            hint="only a fixed rate or a fixed concurrency lines up",
        )
    profile = _dict(config.get("profile", {}), where, "config.profile")
    if profile.get("max_concurrency") is None:
        return None
    cap = _count(profile["max_concurrency"], where, "config.profile.max_concurrency")
    if not 1 <= cap <= MAX_CONCURRENCY:
        raise UsageError(f"{where}: config.profile.max_concurrency is {cap}, not a limit")
    return cap


def _key(config: dict[str, Any], where: str) -> tuple[Key, str]:
    """The point the benchmark's strategy is, and its arrivals in words."""
    strategy = _dict(config.get("strategy"), where, "config.strategy")
    kind = strategy.get("type_")
    if not isinstance(kind, str):
        raise UsageError(f"{where}: strategy type_ {_short(kind)}, not a strategy type")
    cap = _cap(config, kind, where)
    if kind in _RATE_TYPES:
        rate = _number(strategy.get("rate"), where, "the strategy's rate", MAX_RATE)
        if rate <= 0:
            raise UsageError(f"{where}: the strategy's rate is {rate:g}, not a rate")
        capped = None if cap is None else str(cap)
        return rate_point(kind, rate, capped, where, "run GuideLLM without max_concurrency")
    if kind == "throughput":
        if cap is None:
            return ("workload", "inf/s", 0), "every request at once"
        return closed_point(cap)
    if kind in ("concurrent", "synchronous"):
        c = 1 if kind == "synchronous" else strategy.get("streams")
        if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= MAX_CONCURRENCY:
            raise UsageError(f"{where}: streams is {_short(c)}, not a count of requests")
        return closed_point(c)
    if kind == "trace":
        return ("workload", "trace", 0), "trace replay"
    raise UsageError(
        f"{where}: strategy type_ {_short(kind)}: no bench workload point",
        hint="bench reads GuideLLM's constant, poisson, throughput, concurrent, synchronous "
        "and trace benchmarks",
    )


def _summary(metrics: dict[str, Any], name: str, where: str) -> dict[str, Any] | None:
    """`metrics[name].successful` (a distribution summary), None when absent."""
    if metrics.get(name) is None:
        return None
    by_status = _dict(metrics[name], where, f"metrics.{name}")
    if by_status.get("successful") is None:
        return None
    return _dict(by_status["successful"], where, f"metrics.{name}.successful")


def _stat(summary: dict[str, Any], stat: str, where: str, name: str, hi: float) -> float:
    """A summary's mean, or one of its percentiles ("p50"), in 0..hi."""
    if stat == "mean":
        return _number(summary.get("mean"), where, f"metrics.{name}.successful.mean", hi)
    pcts = _dict(summary.get("percentiles"), where, f"metrics.{name}.successful.percentiles")
    return _number(pcts.get(stat), where, f"metrics.{name}.successful.percentiles.{stat}", hi)


def _server_counts(requests: Any, where: str) -> bool:
    """Whether the output token counts are the server's: no completed request's
    output_metrics.total_tokens is null (GuideLLM then counts stream iterations). A
    benchmark that kept no per-request stats does not say, and is taken at its word."""
    if not isinstance(requests, dict) or not isinstance(requests.get("successful"), list):
        return True
    for r in requests["successful"]:
        out = r.get("output_metrics") if isinstance(r, dict) else None
        if not isinstance(out, dict) or out.get("total_tokens") is None:
            return False
    return True


def _same_lengths(metrics: dict[str, Any], where: str) -> bool:
    """Every completed request generated as many tokens (output_token_count min = max)."""
    counts = _summary(metrics, "output_token_count", where)
    if counts is None:
        return False
    lo = _number(counts.get("min"), where, "metrics.output_token_count.successful.min", 1e12)
    hi = _number(counts.get("max"), where, "metrics.output_token_count.successful.max", 1e12)
    return lo == hi and lo >= 2


def _figures(
    metrics: dict[str, Any], n: int, stream: bool, server_counts: bool, where: str
) -> tuple[dict[str, float], dict[str, float]]:
    """(figures in seconds and tok/s, their single-trial relative errors)."""
    values: dict[str, float] = {}
    rse: dict[str, float] = {}
    taken = [("ttft", "time_to_first_token_ms")] if stream else []
    if stream and server_counts and _same_lengths(metrics, where):
        taken.append(("tpot", "inter_token_latency_ms"))
    for name, metric in taken:
        summary = _summary(metrics, metric, where)
        if summary is None:
            continue
        p50, p90, p99 = (_stat(summary, p, where, metric, MAX_MS) for p in ("p50", "p90", "p99"))
        values[f"wl_{name}_p50_s"] = p50 / 1000.0
        values[f"wl_{name}_p99_s"] = p99 / 1000.0
        if (r := median_rse(n, p50, p90)) is not None:
            rse[f"wl_{name}_p50_s"] = r
        if name == "tpot":
            mean = _stat(summary, "mean", where, metric, MAX_MS)
            if (r := mean_rse(n, mean, p50, p90)) is not None:
                rse["wl_output_tok_s"] = r
    tok_s = _summary(metrics, "output_tokens_per_second", where) if server_counts else None
    if tok_s is not None:
        values["wl_output_tok_s"] = _stat(
            tok_s, "mean", where, "output_tokens_per_second", bounds.FIGURE_MAX
        )
    else:
        rse.pop("wl_output_tok_s", None)
    return values, rse


def _about(config: dict[str, Any], where: str) -> tuple[dict[str, str], bool]:
    """(model and api of the benchmark's backend, whether it streamed)."""
    backend = _dict(config.get("backend", {}), where, "config.backend")
    kind = backend.get("kind", "openai_http")
    if kind != "openai_http":
        raise UsageError(
            f"{where}: backend {_short(kind)}: not a server over HTTP (openai_http)",
            hint="bench compares servers: GuideLLM's in-process vLLM backends are not one",
        )
    api = _APIS.get(str(backend.get("request_format", "/v1/chat/completions")))
    if api is None:
        raise UsageError(
            f"{where}: request_format {_short(backend.get('request_format'))}: not a "
            "generation endpoint bench runs (chat, completions)"
        )
    stream = backend.get("stream", True)
    if not isinstance(stream, bool):
        raise UsageError(f"{where}: config.backend.stream is {_short(stream)}, not a flag")
    model = str(backend.get("model") or "?")[:200]
    return {"model": model, "api": api}, stream


def _point(bench: Any, where: str) -> GuidellmPoint:
    """One benchmark of a report as a workload point."""
    b = _dict(bench, where, "the benchmark")
    config = _dict(b.get("config"), where, "config")
    key, arrivals = _key(config, where)
    about, stream = _about(config, where)
    about["arrivals"] = arrivals
    ident = config.get("id_")
    identity = f"guidellm benchmark {str(ident)[:80]}" if isinstance(ident, str) else ""
    duration = bounds.number(b.get("duration"), 0.0, bounds.SECONDS_MAX) or 0.0
    metrics = _dict(b.get("metrics"), where, "metrics")
    totals = _dict(metrics.get("request_totals"), where, "metrics.request_totals")
    ok, errored = (
        _count(totals.get(s), where, f"metrics.request_totals.{s}")
        for s in ("successful", "errored")
    )

    def point(
        status: Status, detail: str | None, v: dict[str, float], r: dict[str, float]
    ) -> GuidellmPoint:
        return GuidellmPoint(key, PointTrial(status, detail, v, r), about, duration, identity)

    if errored > 0:
        return point("invalid", f"{errored} failed requests", {}, {})
    if ok == 0:
        return point("failed", "no request completed", {}, {})
    values, rse = _figures(metrics, ok, stream, _server_counts(b.get("requests"), where), where)
    if not values:
        raise UsageError(
            f"{where}: no figure bench reads (time_to_first_token_ms needs streaming; output "
            "tok/s and ITL need the server's usage counts)"
        )
    return point("valid", None, values, rse)


def load(path: Path) -> RunFigures:
    """The GuideLLM reports at `path` as one run (see the module docstring)."""
    points = Points()
    count = 0
    for file in saved_files.files(path, _looks_saved, "GuideLLM reports"):
        meta, benchmarks, raw = _read(file)
        points.file(raw, meta["guidellm_version"])
        for i, bench in enumerate(benchmarks):
            count += 1
            if count > MAX_BENCHMARKS:
                raise UsageError(f"{path}: over {MAX_BENCHMARKS} GuideLLM benchmarks")
            p = _point(bench, f"{file}: benchmark {i + 1}")
            points.point(p.key, p.trial, p.about, p.seconds)
            if p.identity in points.identities:
                raise UsageError(
                    f"{file}: benchmark {i + 1} ({p.identity}) is in {path} twice: "
                    "one benchmark is one trial",
                    hint="give each GuideLLM report once",
                )
            if p.identity:
                points.identities.add(p.identity)
    if not points.by_key:
        raise UsageError(f"{path}: holds no GuideLLM benchmarks")
    return points.run(path, tool="GuideLLM", verb="written", source=SOURCE, what="benchmarks")
