"""vLLM's performance dashboard: one serving test of one commit as a card, and back.

vLLM runs its serving tests on every merged commit and publishes them on the "vLLM
performance dashboard" (hud.pytorch.org/benchmark/llms?repoName=vllm-project/vllm,
its docs page benchmarking/dashboard). A user holds one of two files; both are read here.

(a) The JSON `vllm bench serve --save-result` writes (vllm-project/vllm
    vllm/benchmarks/serve.py: `main_async`, `benchmark`, `calculate_metrics`; before it
    benchmarks/benchmark_serving.py), one serving test, one object:
    - date (`%Y%m%d-%H%M%S`, the client's local time), backend (and endpoint_type), label,
      model_id, tokenizer_id, num_prompts, then each `--metadata KEY=VALUE` as a top-level
      string: the suite passes tensor_parallel_size=N (later also compilation_config.mode,
      optimization_level);
    - request_rate (a number, or the string "inf"), burstiness, max_concurrency (null: no
      cap), ramp_up_strategy / ramp_up_start_rps / ramp_up_end_rps when ramped;
    - duration (s), completed, failed, total_input_tokens, total_output_tokens;
    - the figures: request_throughput and request_goodput (req/s; goodput null without
      --goodput), output_throughput, total_token_throughput and max_output_tokens_per_s
      (tok/s), and mean_/median_/std_/pNN_ of ttft, tpot, itl, e2el in ms (`_ms`) for the
      --percentile-metrics (default ttft,tpot,itl) at the --metric-percentiles (default 99);
    - per-request arrays (input_lens, output_lens, ttfts, itls, start_times, latencies,
      queue_times, generated_texts, errors): serve.py drops most of them without
      --save-detailed but keeps latencies and queue_times; benchmark_serving.py deleted them
      before merging them in, so its files always carry them. They are not figures: skipped.
    `--append-result` appends one such object a line (JSON lines). The object does not name
    its test: vLLM's suite (.buildkite/nightly-benchmarks/ and later
    .buildkite/performance-benchmarks/scripts/run-performance-benchmarks.sh) names the file
    `<test>_qps_<qps>[_concurrency_<n>].json`, so the id is the file's stem (or `test_name`,
    which .buildkite/performance-benchmarks/scripts/convert-results-json-to-markdown.py
    adds, with tp_size, dtype, dataset_name, input_len, output_len, gpu_type and the server
    and client commands from the `.commands` file beside the result).

(b) The dashboard's records. With SAVE_TO_PYTORCH_BENCHMARK_FORMAT set, serve.py's
    `save_to_pytorch_benchmark_format` writes `<result>.pytorch.json` through
    `convert_to_pytorch_benchmark_format` (vllm/benchmarks/lib/utils.py; before,
    benchmarks/benchmark_utils.py): a list of records, one a metric, each
    {benchmark: {name: "vLLM benchmark", extra_info: {args: the client's argparse
    namespace, plus tensor_parallel_size from the metadata}}, model: {name},
    metric: {name, benchmark_values: [value], extra_info: every other result field}}.
    The twelve metrics are mean/median/std/p99 of ttft, tpot and itl (ms); the throughputs
    stay in metric.extra_info. pytorch/pytorch-integration-testing
    .github/scripts/upload_benchmark_results.py (run by .github/workflows/vllm-benchmark.yml
    on the `vllm-ci-postmerge-repo:<commit>` image) adds timestamp (the commit's date),
    schema_version "v3", name, repo, head_branch, head_sha (the vLLM commit), workflow_id,
    run_attempt, job_id and runners [{name, type: the GPU, gpu_count: the machine's, ...}],
    and uploads them as JSON lines to the oss_ci_benchmark_v3 table the dashboard reads
    (pytorch/test-infra torchci/clickhouse_queries/oss_ci_benchmark_llms). A test's id is its
    args.result_filename less `.json`; its commit is head_sha. Records of `vllm bench
    latency` / `throughput` tests (no request_rate anywhere) are skipped.

What maps to what:
- model_id / model.name -> model; head_sha (or metadata commit / vllm_commit) ->
  engine.commit; metadata version / vllm_version -> engine.version; engine.name "vllm";
- tensor_parallel_size (tp_size, tp) -> engine.parallelism["tp"] and gpu_count (times
  pipeline / data parallel sizes when given); runners[0].type (gpu_type) -> gpu_model;
  dtype -> precision; server_command -> engine.launch_flags;
- request_rate -> workload.request_rate; "inf" -> None with arrivals "burst": every request
  queued at once (with max_concurrency C, C in flight: the traffic of C closed-loop
  streams); otherwise burstiness 1 -> "poisson", else "gamma" with that shape
  (serve.py `get_request`: gamma intervals, shape burstiness, scale 1/(rate x burstiness));
- max_concurrency -> concurrency (a cap); num_prompts; num_warmups -> warmups; ignore_eos;
- dataset_name, else the test's name -> dataset ("sharegpt", "random", ...);
  random_input_len / random_output_len, else the name (`random_in1k_out2k`: 1024 / 2048,
  `random_128_128`) -> input_tokens / output_tokens;
- random_range_ratio -> extra only. Current vLLM (vllm/benchmarks/datasets/random.py,
  `get_sampling_params`) draws integer lengths uniform on [floor(L(1-r)), ceil(L(1+r))]
  (input L less the special tokens the tokenizer adds; r in [0, 1), default 0);
  benchmark_serving.py drew from [int(r L), L] (default r = 1). The file does not say which
  vLLM ran, and the current rule is not the card's [r L, L], so range_ratio stays None and
  length_rule says the rule.

Figures keep vLLM's names and units (ms stay ms). Definitions (serve.py
`calculate_metrics`), over the completed requests: TTFT, request sent to first streamed
token; TPOT excludes the first token, (latency - TTFT) / (output tokens - 1), over requests
with more than one output token; ITL, the gaps between streamed chunks, pooled over all
requests; E2EL, request sent to last token; request_throughput = completed / duration;
output_throughput = output tokens / duration; total_token_throughput = (input + output
tokens) / duration; percentiles are numpy's (linear). Each figure is one run: one sample.

Weights: the suite's serving-tests*.json launch most servers with `--load-format dummy`
(random weights); neither file records it. Random weights do the same matrix work per token
as real ones, so for a dense model a reproduction with real weights measures the same server
work when every request makes as many tokens: random weights almost never emit EOS, so their
outputs run to max_tokens; send ignore_eos and compare total_output_tokens. What random
weights change is not reproducible with real ones: MoE expert routing (balanced by chance)
and speculative decoding acceptance.
"""

from __future__ import annotations

import codecs
import json
import math
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from bench.errors import CardError, one_line, validation_message
from bench.publishers.model import (
    ComputedAs,
    PublishedEngine,
    PublishedFigure,
    PublishedWorkload,
    PublisherCard,
)
from bench.publishers.source import head, iter_json_items, read_text

WHAT = "a vLLM serving benchmark result"

DO = (
    "give the JSON `vllm bench serve --save-result` wrote or the dashboard's records "
    "(<result>.pytorch.json, or the uploaded JSON lines)"
)
MAX_FIGURE = 1e12
MAX_EXTRA = 300  # text fields kept in a card's extra
MAX_TEXT = 500  # characters of one extra value
MAX_KEYS = 10_000  # distinct tests remembered for messages
MAX_FLAGS = 400
MAX_RECORDS = 1000  # records of one test (vLLM writes 12)

# Latency metrics: what vLLM measured, and over what its statistics are taken.
_LATENCY: dict[str, tuple[str, str]] = {
    "ttft": (
        "time to first token: from sending the request to its first streamed token, client side",
        "over completed requests",
    ),
    "tpot": (
        "time per output token, which excludes the first token: (latency - TTFT) / "
        "(output tokens - 1) per request",
        "over completed requests with more than one output token",
    ),
    "itl": (
        "inter-token latency: the gap between successive streamed chunks",
        "over all gaps of all completed requests, pooled",
    ),
    "e2el": (
        "end-to-end latency: from sending the request to its last token, client side",
        "over completed requests",
    ),
    "client_queue_time": (
        "time a request waited in the client for a --max-concurrency slot",
        "over completed requests",
    ),
    "e2el_including_client_queue": (
        "end-to-end latency plus the client's queueing time",
        "over completed requests",
    ),
}
_COMPUTED: dict[str, ComputedAs] = {
    "mean_ttft_ms": "ttft_mean_ms",
    "median_ttft_ms": "ttft_median_ms",
    "p99_ttft_ms": "ttft_p99_ms",
    "mean_tpot_ms": "tpot_mean_ms",
    "median_tpot_ms": "tpot_median_ms",
    "p99_tpot_ms": "tpot_p99_ms",
    "mean_itl_ms": "itl_mean_ms",
    "median_itl_ms": "itl_median_ms",
    "p99_itl_ms": "itl_p99_ms",
    "mean_e2el_ms": "e2el_mean_ms",
    "median_e2el_ms": "e2el_median_ms",
    "p99_e2el_ms": "e2el_p99_ms",
    # p50 is np.percentile(x, 50), which is np.median(x): the median's definition.
    "p50_ttft_ms": "ttft_median_ms",
    "p50_tpot_ms": "tpot_median_ms",
    "p50_itl_ms": "itl_median_ms",
    "p50_e2el_ms": "e2el_median_ms",
    "request_throughput": "request_rate",
    "output_throughput": "output_tok_s",
    "total_token_throughput": "total_tok_s",
}
_RATES: dict[str, tuple[str, str]] = {
    "request_throughput": ("req/s", "completed requests / benchmark duration"),
    "output_throughput": ("tok/s", "output tokens of completed requests / benchmark duration"),
    "total_token_throughput": (
        "tok/s",
        "(input + output tokens) of completed requests / benchmark duration",
    ),
    "request_goodput": (
        "req/s",
        "completed requests within every --goodput limit / benchmark duration",
    ),
    "max_output_tokens_per_s": (
        "tok/s",
        "the most output tokens streamed in any one 1 s window of the run",
    ),
}
_STAT = re.compile(r"(mean|median|std|p(\d{1,3}(?:\.\d+)?))_([a-z0-9_]+)_([a-z]+)")
_STAT_WORDS = {
    "mean": "mean",
    "median": "median",
    "std": "standard deviation (numpy.std, population)",
}
_ARRAYS = "note.per_request_arrays"
_NAME_LENGTHS = (
    re.compile(r"random_in(\d{1,6})(k?)_out(\d{1,6})(k?)(?:_|$)"),
    re.compile(r"random_(\d{1,6})_(\d{1,6})(?:_|$)"),
)
_NAME_TP = re.compile(r"_tp(\d{1,3})(?:_|$)")
_INF = frozenset({"inf", "+inf", "infinity", "+infinity"})
_ID_KEYS = ("head_sha", "commit", "vllm_commit")
_VERSION_KEYS = ("vllm_version", "version")


@dataclass
class _Test:
    """One serving test as found in the file: its items (a result, or a test's records)."""

    key: tuple[str, str]  # (commit or "", id)
    kind: str  # "result" or "records"
    items: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    metrics: dict[str, int] = field(default_factory=dict)  # a records test's metric: item


@dataclass
class _Found:
    """What the scan saw: the first matching test whole, the other matches counted."""

    test: _Test | None = None
    duplicate: str | None = None
    matches: set[tuple[str, str]] = field(default_factory=set)
    tests: set[tuple[str, str]] = field(default_factory=set)
    keys_seen: set[str] = field(default_factory=set)
    skipped: int = 0


# -- reading ---------------------------------------------------------------------------


def looks_like(head: str) -> bool:
    """Whether a file's first 4 KiB look like a vLLM serving result or dashboard records."""
    text = head.lstrip("\ufeff \t\r\n")
    if not text.startswith(("{", "[")) or '"tput_per_gpu"' in text:
        return False
    result = '"model_id"' in text and ('"num_prompts"' in text or '"request_rate"' in text)
    records = '"benchmark"' in text and ('"vLLM benchmark"' in text or '"benchmark_values"' in text)
    return result or records


def read(path: Path, select: Mapping[str, str]) -> PublisherCard:
    """The card of the one serving test in PATH that SELECT picks (id, commit, any field)."""
    wanted = {str(k).strip(): str(v).strip() for k, v in select.items()}
    first = _first_char(path)
    found = _Found()
    for index, item in enumerate(_items(path, first), 1):
        _take(path, index, item, wanted, found)
    test = _chosen(path, wanted, found)
    if test.kind == "result":
        return _card(path, _from_result(path, test))
    return _card(path, _from_records(path, test))


def export(card: PublisherCard) -> dict[str, Any]:
    """The card's figures under vLLM's own field names and units, as a result file has them."""
    if card.publisher != "vllm-dashboard":
        raise CardError(f"{card.source}: a {card.publisher} card is not {WHAT}; export it as one")
    return {f.name: f.value for f in card.figures}


def _first_char(path: Path) -> str:
    raw = head(path)
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(raw, final=False)
    except UnicodeDecodeError as exc:
        raise CardError(f"{path} is not UTF-8 text (byte {exc.start}): not {WHAT}; {DO}") from None
    first = text.lstrip("\ufeff \t\r\n")[:1]
    if first not in ("{", "["):
        raise CardError(f"{path} is not JSON: not {WHAT}{_looks_other(text)}; {DO}")
    return first


def _looks_other(text: str) -> str:
    if "tput_per_gpu" in text:
        return " (it looks like InferenceX's database dump: tput_per_gpu)"
    if "MLPerf" in text or "SUT name" in text or "Scenario :" in text:
        return " (it looks like an MLPerf log summary)"
    return ""


def _items(path: Path, first: str) -> Iterator[Any]:
    """The file's items: an array's, streamed; else one object, or JSON lines of them."""
    if first == "[":
        yield from iter_json_items(path, WHAT)
        return
    text = read_text(path, WHAT).lstrip("\ufeff")
    try:
        yield _loads(path, text, None)
        return
    except _ExtraData:
        pass
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                yield _loads(path, line, number)
            except _ExtraData:
                raise CardError(
                    f"{path} line {number}: more than one JSON value: not {WHAT}; {DO}"
                ) from None


class _ExtraData(Exception):
    pass


def _loads(path: Path, text: str, line: int | None) -> Any:
    where = f"{path} line {line}" if line else str(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            raise _ExtraData from None
        at = f"{path} line {line or exc.lineno}"
        raise CardError(f"{at}: not JSON ({exc.msg}): not {WHAT}; {DO}") from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, nesting too deep
        why = "nested too deep" if isinstance(exc, RecursionError) else "a number too long"
        raise CardError(f"{where}: JSON {why}: not {WHAT}; {DO}") from None


# -- choosing the test -----------------------------------------------------------------


def _take(path: Path, index: int, item: Any, wanted: dict[str, str], found: _Found) -> None:
    """Sort one item: a result (a test), a record (one metric of a test), or an error."""
    kind = _kind(path, index, item)
    if kind == "skip":
        found.skipped += 1
        return
    fields = _fields_of_result(path, item) if kind == "result" else _fields_of_record(item)
    key = (fields.get("commit", ""), fields["id"])
    if len(found.tests) < MAX_KEYS:
        found.tests.add(key)
    found.keys_seen.update(k for k in wanted if k in fields)
    if not all(_same(k, fields.get(k), v) for k, v in wanted.items()):
        return
    if found.test is None:
        found.test = _Test(key, kind)
    if key != found.test.key:
        if len(found.matches) < MAX_KEYS:
            found.matches.add(key)
        return
    test = found.test
    found.matches.add(key)
    if found.duplicate:
        return
    if test.items and (kind == "result" or test.kind == "result"):
        found.duplicate = f"{_name(key)} is in items {test.items[0][0]} and {index}"
        return
    if kind == "records":
        metric = item["metric"].get("name")
        name = metric if isinstance(metric, str) else "\0" + json.dumps(metric)
        if name in test.metrics:
            found.duplicate = (
                f"{_name(key)} has metric {_short(metric)} in items {test.metrics[name]} "
                f"and {index}"
            )
            return
        if len(test.items) >= MAX_RECORDS:
            raise CardError(
                f"{path}: test {_name(key)} has more than {MAX_RECORDS} records: not one "
                f"serving test's; {DO}"
            )
        test.metrics[name] = index
    test.items.append((index, item))


def _kind(path: Path, index: int, item: Any) -> str:
    if not isinstance(item, dict):
        raise CardError(
            f"{path}: item {index} is {_json_type(item)}, not a JSON object: not {WHAT}; {DO}"
        )
    if isinstance(item.get("metric"), dict) and isinstance(item.get("benchmark"), dict):
        args, info = _args(item), _info(item)
        serving = "request_rate" in args or "request_throughput" in info or "model_id" in info
        return "records" if serving else "skip"
    if any(k in item for k in ("model_id", "request_throughput", "mean_ttft_ms")):
        return "result"
    keys = ", ".join(_short(k, 30) for k in list(item)[:6]) or "none"
    raise CardError(
        f"{path}: item {index} is neither a vLLM serving result nor a dashboard record "
        f"(its keys: {keys}): not {WHAT}{_looks_other(json.dumps(list(item)[:50]))}; {DO}"
    )


def _chosen(path: Path, wanted: dict[str, str], found: _Found) -> _Test:
    asked = ", ".join(f"{k}={_short(v)}" for k, v in wanted.items()) or "no --select"
    if found.test is None:
        if not found.tests:
            skipped = f" ({found.skipped} records of other tests)" if found.skipped else ""
            raise CardError(f"{path}: no serving test in the file{skipped}: not {WHAT}; {DO}")
        absent = [k for k in wanted if k not in found.keys_seen]
        no_key = f"; no test has {', '.join(_short(k, 30) for k in absent)}" if absent else ""
        raise CardError(
            f"{path}: no serving test matches {asked}{no_key}; the file has "
            f"{_count_text(found.tests)} ({_names(found.tests)}); change --select KEY=VALUE"
        )
    if len(found.matches) > 1:
        matched = f"match {asked}" if wanted else "in the file"
        raise CardError(
            f"{path}: {_count_text(found.matches)} {matched} ({_names(found.matches)}); "
            "add --select KEY=VALUE (id=TEST, commit=SHA, or any field) to pick one"
        )
    if found.duplicate:
        raise CardError(
            f"{path}: two records with one id: {found.duplicate}; keep one run's records, "
            "or add --select KEY=VALUE (request_rate, workflow_id ...) to pick one"
        )
    return found.test


def _count_text(keys: set[tuple[str, str]]) -> str:
    n = len(keys)
    more = "or more " if n >= MAX_KEYS else ""
    return f"{n:,} {more}serving test{'s' if n != 1 else ''}"


def _names(keys: set[tuple[str, str]]) -> str:
    shown = sorted(keys)[:3]
    return ", ".join(_name(k) for k in shown) + (", ..." if len(keys) > 3 else "")


def _name(key: tuple[str, str]) -> str:
    commit, test = key
    return _short(test, 80) + (f"@{commit[:12]}" if commit else "")


def _same(key: str, actual: str | None, wanted: str) -> bool:
    if actual is None:
        return False
    if actual == wanted:
        return True
    if key == "commit" and len(wanted) >= 7:
        return actual.startswith(wanted)
    try:
        a, w = float(actual), float(wanted)
    except ValueError:
        return False
    return a == w or (math.isinf(a) and math.isinf(w) and (a > 0) == (w > 0))


def _fields_of_result(path: Path, item: dict[str, Any]) -> dict[str, str]:
    fields = _scalars(item.items())
    fields["id"] = _text(item["test_name"]) if isinstance(item.get("test_name"), str) else ""
    fields["id"] = fields["id"] or path.stem
    commit = _first_text(item, _ID_KEYS)
    if commit:
        fields["commit"] = commit
    if isinstance(item.get("model_id"), str):
        fields.setdefault("model", item["model_id"])
    return fields


def _fields_of_record(item: dict[str, Any]) -> dict[str, str]:
    args, info = _args(item), _info(item)
    model = item["model"] if isinstance(item.get("model"), dict) else {}
    runner = _runner(item)
    fields: dict[str, str] = {"id": _record_id(item)}
    if isinstance(item.get("head_sha"), str) and item["head_sha"]:
        fields["commit"] = item["head_sha"]
    for key, value in _scalars(item.items()).items():
        fields.setdefault(key, value)
    if isinstance(model.get("name"), str):
        fields.setdefault("model", model["name"])
    for prefix, part in (("args.", args), ("", args), ("", info), ("runner.", runner)):
        for key, value in _scalars(part.items()).items():
            fields.setdefault(prefix + key, value)
    if isinstance(runner.get("type"), str):
        fields.setdefault("gpu", runner["type"])
    return fields


def _record_id(item: dict[str, Any]) -> str:
    args, info = _args(item), _info(item)
    name = args.get("result_filename") or info.get("test_name")
    if isinstance(name, str) and name.strip():
        stem = name.strip().rsplit("/", 1)[-1]
        return stem[: -len(".json")] if stem.endswith(".json") else stem
    model = item["model"].get("name") if isinstance(item.get("model"), dict) else None
    rate = _text(args.get("request_rate", info.get("request_rate")))
    return f"{_text(model)}@qps_{rate}"


def _args(item: dict[str, Any]) -> dict[str, Any]:
    extra = item["benchmark"].get("extra_info")
    args = extra.get("args") if isinstance(extra, dict) else None
    return args if isinstance(args, dict) else {}


def _info(item: dict[str, Any]) -> dict[str, Any]:
    info = item["metric"].get("extra_info")
    return info if isinstance(info, dict) else {}


def _runner(item: dict[str, Any]) -> dict[str, Any]:
    runners = item.get("runners")
    if isinstance(runners, list) and runners and isinstance(runners[0], dict):
        return runners[0]
    return {}


# -- one test as plain facts -----------------------------------------------------------


@dataclass
class _Point:
    """One test's facts, from whichever format, before they become a card."""

    id: str
    kind: str
    cfg: dict[str, Any]  # configuration fields by vLLM's names (args, metadata, result)
    figures: dict[str, float]
    model: str
    commit: str | None = None
    gpu_model: str | None = None
    engine: str = "vllm"
    date: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    not_reproducible: list[str] = field(default_factory=list)


def _from_result(path: Path, test: _Test) -> _Point:
    ((_, item),) = test.items
    figures, extra = _split(path, item.items(), "")
    model = _model(path, item.get("model_id"))
    point = _Point(test.key[1], "result", dict(item), figures, model)
    point.commit = test.key[0] or None
    point.gpu_model = _opt_text(item.get("gpu_type"))
    point.date = _date(item.get("date"))
    point.extra.update(extra)
    point.extra["note.format"] = "vllm bench serve --save-result JSON"
    return point


def _from_records(path: Path, test: _Test) -> _Point:
    first = test.items[0][1]
    args, info, runner = _args(first), _info(first), _runner(first)
    figures, extra = _split(path, info.items(), "")
    for index, record in test.items:
        name, value = _record_figure(path, index, record)
        if name in figures and figures[name] != value:
            raise CardError(f"{path}: item {index}: {name} disagrees with the other records")
        figures[name] = value
        others, _ = _split(path, _info(record).items(), f"item {index}: ")
        for key, other in others.items():
            if key in figures and figures[key] != other:
                raise CardError(
                    f"{path}: item {index}: {key} disagrees with item {test.items[0][0]}"
                )
    model_part = first["model"] if isinstance(first.get("model"), dict) else {}
    model = _model(path, model_part.get("name") or args.get("model") or info.get("model_id"))
    point = _Point(test.key[1], "records", {**info, **args}, figures, model)
    point.commit = test.key[0] or None
    point.gpu_model = _opt_text(runner.get("type")) or _opt_text(runner.get("gpu_info"))
    point.date = _date(info.get("date")) or _timestamp(first.get("timestamp"))
    bench_name = first["benchmark"].get("name")
    if isinstance(bench_name, str) and "sglang" in bench_name.lower():
        point.engine = "sglang"
    point.extra.update(extra)
    point.extra["note.format"] = "dashboard records (PyTorch benchmark format, one a metric)"
    point.extra["note.records"] = str(len(test.items))
    _keep(point.extra, _scalars(first.items()), "")
    _keep(point.extra, _scalars(args.items()), "args.")
    _keep(point.extra, _scalars(runner.items()), "runner.")
    if not _record_id_published(first):
        point.extra["note.point_id"] = "made by bench: the records name no result_filename"
    return point


def _record_id_published(item: dict[str, Any]) -> bool:
    name = _args(item).get("result_filename") or _info(item).get("test_name")
    return isinstance(name, str) and bool(name.strip())


def _record_figure(path: Path, index: int, record: dict[str, Any]) -> tuple[str, float]:
    metric = record["metric"]
    name = metric.get("name")
    if not isinstance(name, str) or _figure_kind(path, name) is None:
        raise CardError(
            f"{path}: item {index}: metric {_short(name)} is not one of vLLM's serving figures "
            "(mean/median/std/pNN of ttft, tpot, itl, e2el in ms; request_throughput ...): "
            f"an unknown unit or metric; {DO}"
        )
    values = metric.get("benchmark_values")
    if not isinstance(values, list) or len(values) != 1:
        count = len(values) if isinstance(values, list) else _json_type(values)
        raise CardError(
            f"{path}: item {index}: {name} has benchmark_values of {count}, not one value; "
            "give one run's records"
        )
    return name, _figure_value(path, f"item {index}: {name}", values[0])


def _split(
    path: Path, pairs: Iterable[tuple[Any, Any]], where: str
) -> tuple[dict[str, float], dict[str, str]]:
    """A result's fields split: figures by name, and the other scalars as text; arrays
    (per-request data) are named in extra, never read."""
    figures: dict[str, float] = {}
    extra: dict[str, str] = {}
    arrays: list[str] = []
    for key, value in pairs:
        if not isinstance(key, str):
            continue
        if _figure_kind(path, key, where) is None:
            if isinstance(value, list | dict):
                arrays.append(key)
            elif value is not None and len(extra) < MAX_EXTRA:
                extra[key] = _text(value)[:MAX_TEXT]
            continue
        if value is None and key == "request_goodput":
            continue  # no --goodput: vLLM writes null
        figures[key] = _figure_value(path, where + key, value)
    if arrays:
        extra[_ARRAYS] = _short(", ".join(arrays), MAX_TEXT)
    return figures, extra


def _figure_kind(path: Path, name: str, where: str = "") -> str | None:
    """'rate' or 'latency' for one of vLLM's figures, None for another field; a latency
    statistic in another unit than ms is an error."""
    if name in _RATES:
        return "rate"
    m = _STAT.fullmatch(name) if len(name) <= 100 else None
    if m is None or m.group(3) not in _LATENCY:
        return None
    if m.group(4) != "ms":
        raise CardError(
            f"{path}: {where}{_short(name)}: unknown unit {m.group(4)!r}, vLLM publishes "
            f"{m.group(3)} in ms ({m.group(1)}_{m.group(3)}_ms); {DO}"
        )
    return "latency"


def _figure_value(path: Path, what: str, value: Any) -> float:
    number = _number(value)
    if number is None or not math.isfinite(number):
        raise CardError(
            f"{path}: {_short(what, 120)} is {_short(_text(value))}, not a finite number; {DO}"
        )
    if not 0.0 <= number <= MAX_FIGURE:
        raise CardError(f"{path}: {_short(what, 120)} is {number!r}, outside 0..1e12; {DO}")
    return number


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _model(path: Path, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CardError(f"{path}: the test names no model (model_id / model.name); {DO}")
    return value.strip()


# -- the card --------------------------------------------------------------------------


def _card(path: Path, p: _Point) -> PublisherCard:
    if not p.figures:
        raise CardError(f"{path}: test {_short(p.id)} has no figures: not {WHAT}; {DO}")
    workload = _workload(path, p)
    engine = _engine(path, p)
    gpus = math.prod(engine.parallelism.values()) if "tp" in engine.parallelism else None
    _notes(p, engine, gpus)
    try:
        return PublisherCard(
            publisher="vllm-dashboard",
            source=path.name,
            point_id=p.id,
            date=p.date,
            model=p.model,
            precision=_opt_text(p.cfg.get("dtype")),
            gpu_model=p.gpu_model,
            gpu_count=gpus,
            engine=engine,
            workload=workload,
            figures=tuple(_figure(name, value) for name, value in p.figures.items()),
            missing=tuple(dict.fromkeys(p.missing)),
            not_reproducible=tuple(dict.fromkeys(p.not_reproducible)),
            extra=p.extra,
        )
    except ValidationError as exc:
        raise CardError(f"{path}: {validation_message(exc)}: not {WHAT}; {DO}") from None


def _figure(name: str, value: float) -> PublishedFigure:
    if name in _RATES:
        unit, words = _RATES[name]
        return PublishedFigure(
            name=name, value=value, unit=unit, definition=words, computed_as=_COMPUTED.get(name)
        )
    m = _STAT.fullmatch(name)
    assert m is not None  # a figure's name was matched when it was read
    what, over = _LATENCY[m.group(3)]
    stat = m.group(1)
    words = _STAT_WORDS.get(stat) or f"{m.group(2)}th percentile (numpy.percentile, linear)"
    return PublishedFigure(
        name=name,
        value=value,
        unit="ms",
        definition=f"{what}; the {words} {over}",
        computed_as=_COMPUTED.get(name),
    )


def _engine(path: Path, p: _Point) -> PublishedEngine:
    parallelism: dict[str, int] = {}
    for short, names in (
        ("tp", ("tensor_parallel_size", "tp_size", "tp")),
        ("pp", ("pipeline_parallel_size", "pp_size", "pp")),
        ("dp", ("data_parallel_size", "dp_size", "dp")),
    ):
        size = _size(path, p.cfg, names)
        if size is not None:
            parallelism[short] = size
    try:
        return PublishedEngine(
            name=p.engine,
            version=_first_text(p.cfg, _VERSION_KEYS),
            commit=p.commit,
            launch_flags=_flags(p.cfg.get("server_command")),
            parallelism=parallelism,
        )
    except ValidationError as exc:
        raise CardError(f"{path}: {validation_message(exc)}: not {WHAT}; {DO}") from None


def _size(path: Path, cfg: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = cfg.get(name)
        if value is None or value == "":
            continue
        size = _integer(value)
        if size is None or not 1 <= size <= 100_000:
            raise CardError(f"{path}: {name} is {_short(_text(value))}, not a parallel size; {DO}")
        return size
    return None


def _flags(command: Any) -> tuple[str, ...]:
    if not isinstance(command, str) or not command.strip():
        return ()
    try:
        words = shlex.split(command)
    except ValueError:  # unbalanced quotes: split on white space
        words = command.split()
    return tuple(w[:MAX_TEXT] for w in words[:MAX_FLAGS])


def _workload(path: Path, p: _Point) -> PublishedWorkload:
    cfg = p.cfg
    rate = _rate(path, cfg.get("request_rate"))
    burstiness = _positive(path, cfg, "burstiness")
    dataset = _dataset(cfg, p)
    lengths = _lengths(path, cfg, p, dataset)
    if rate is None:
        arrivals = "burst"
        p.extra["note.arrivals"] = (
            "request_rate inf: every request sent at once (request_rate None, arrivals burst)"
        )
    else:
        arrivals = "poisson" if burstiness in (None, 1.0) else "gamma"
    if "ramp_up_strategy" in cfg and cfg["ramp_up_strategy"] is not None:
        p.not_reproducible.append(
            f"the ramp-up ({_short(_text(cfg['ramp_up_strategy']))} from "
            f"{_short(_text(cfg.get('ramp_up_start_rps')))} to "
            f"{_short(_text(cfg.get('ramp_up_end_rps')))} req/s): a card has one rate"
        )
    try:
        return PublishedWorkload(
            arrivals=arrivals,
            dataset=dataset,
            concurrency=_count(path, cfg, "max_concurrency", 1),
            request_rate=rate,
            burstiness=burstiness if arrivals != "burst" else None,
            input_tokens=lengths[0],
            output_tokens=lengths[1],
            range_ratio=None,
            length_rule=lengths[2],
            num_prompts=_count(path, cfg, "num_prompts", 1),
            warmups=_count(path, cfg, "num_warmups", 0),
            ignore_eos=cfg["ignore_eos"] if isinstance(cfg.get("ignore_eos"), bool) else None,
        )
    except ValidationError as exc:
        raise CardError(f"{path}: {validation_message(exc)}: not {WHAT}; {DO}") from None


def _rate(path: Path, value: Any) -> float | None:
    """The request rate in req/s; None for inf (all at once)."""
    if isinstance(value, str) and value.strip().lower() in _INF:
        return None
    number = _number(value)
    if number is not None and number == math.inf:
        return None
    if number is None and isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            number = None
    if number is None or not math.isfinite(number) or number <= 0:
        raise CardError(
            f"{path}: request_rate is {_short(_text(value))}, not a rate in req/s or inf; {DO}"
        )
    return number


def _positive(path: Path, cfg: Mapping[str, Any], name: str) -> float | None:
    value = cfg.get(name)
    if value is None:
        return None
    number = _number(value)
    if number is None or not math.isfinite(number) or number <= 0:
        raise CardError(f"{path}: {name} is {_short(_text(value))}, not a positive number; {DO}")
    return number


def _count(path: Path, cfg: Mapping[str, Any], name: str, minimum: int) -> int | None:
    value = cfg.get(name)
    if value is None:
        return None
    number = _integer(value)
    if number is None or not minimum <= number <= 10**9:
        raise CardError(f"{path}: {name} is {_short(_text(value))}, not a count; {DO}")
    return number


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    text = value.strip() if isinstance(value, str) else ""
    if text.isascii() and text.isdigit() and len(text) < 12:
        return int(text)
    return None


def _dataset(cfg: Mapping[str, Any], p: _Point) -> str:
    name = cfg.get("dataset_name")
    if isinstance(name, str) and name.strip():
        return name.strip()
    for known in ("sharegpt", "random", "sonnet", "burstgpt"):
        if known in p.id.lower():
            p.extra["note.dataset"] = "from the test's name; the file does not record it"
            return known
    p.missing.append("dataset (the file does not name it)")
    return "unknown"


def _lengths(
    path: Path, cfg: Mapping[str, Any], p: _Point, dataset: str
) -> tuple[int | None, int | None, str | None]:
    """(input tokens, output tokens, the rule in words) for the test's dataset."""
    if dataset == "sharegpt":
        out = _count(path, cfg, "sharegpt_output_len", 1)
        fixed = f"; every reply cut to {out} tokens (sharegpt_output_len)" if out else ""
        if cfg.get("dataset_path") is None or cfg.get("seed") is None:
            p.missing.append("the ShareGPT sample (dataset file and seed)")
        return (
            None,
            out,
            (
                "ShareGPT conversations: each request's prompt and its reference reply's length "
                "as max_tokens, sampled by vLLM's ShareGPT loader with the seed" + fixed
            ),
        )
    if dataset != "random":
        return None, None, None
    names = (("random_input_len", "input_len"), ("random_output_len", "output_len"))
    given = [next((cfg[n] for n in pair if cfg.get(n) is not None), None) for pair in names]
    if given[0] is None and given[1] is None:
        given = list(_name_lengths(p))
    size_in = None if given[0] is None else _count(path, {"input_len": given[0]}, "input_len", 1)
    size_out = None if given[1] is None else _count(path, {"output_len": given[1]}, "output_len", 1)
    if size_in is None or size_out is None:
        p.missing.append("the random dataset's input and output lengths")
    return size_in, size_out, _length_rule(path, cfg, p)


def _name_lengths(p: _Point) -> tuple[int | None, int | None]:
    for pattern in _NAME_LENGTHS:
        m = pattern.search(p.id[:300])
        if m is None:
            continue
        groups = m.groups()
        if len(groups) == 4:
            size_in = int(groups[0]) * (1024 if groups[1] else 1)
            size_out = int(groups[2]) * (1024 if groups[3] else 1)
        else:
            size_in, size_out = int(groups[0]), int(groups[1])
        p.extra["note.lengths"] = (
            "from the test's name (k = 1024); the file does not record them, and vLLM's own "
            "configs have misnamed one (an in10k test of 1024 input tokens): check the suite's "
            "serving-tests.json"
        )
        return size_in, size_out
    return None, None


def _length_rule(path: Path, cfg: Mapping[str, Any], p: _Point) -> str:
    value = cfg.get("random_range_ratio")
    if value is None:
        return (
            "vLLM's random dataset; the file does not record the range ratio: at its default "
            "(0 in current vLLM, 1 in benchmark_serving.py) every request asks for exactly "
            "the input and output lengths"
        )
    ratio = _number(value)
    if ratio is None or not 0.0 <= ratio <= 1.0:
        raise CardError(f"{path}: random_range_ratio is {_short(_text(value))}, not in 0..1; {DO}")
    p.extra["note.range_ratio"] = (
        f"random_range_ratio {ratio!r} kept here, not as the card's range_ratio: vLLM's rule "
        "is not [r x L, L] (see length_rule)"
    )
    if ratio == 0.0:
        return (
            "fixed: every request asks for exactly the input and output lengths (vLLM's random "
            "dataset, range ratio 0; the input count includes the tokenizer's special tokens)"
        )
    if ratio == 1.0:
        return (
            "fixed: range ratio 1 under benchmark_serving.py's rule, lengths uniform on "
            "[int(r x L), L] = [L, L] (current vLLM takes ratios below 1 only)"
        )
    return (
        f"integers uniform on [floor(L x (1 - {ratio})), ceil(L x (1 + {ratio}))] in current "
        "vLLM (vllm/benchmarks/datasets, input L less the tokenizer's special tokens); "
        f"benchmark_serving.py drew from [int({ratio} x L), L]; the file does not say which "
        "vLLM ran"
    )


def _notes(p: _Point, engine: PublishedEngine, gpus: int | None) -> None:
    """What a reproduction needs that the file does not give, and what it cannot redo."""
    if not engine.launch_flags:
        p.missing.append(
            "launch flags (the server command is not in the result; vLLM's suite keeps it in "
            "<test>.commands and serving-tests*.json)"
        )
    p.missing.append("image (the dashboard runs vllm-ci-postmerge-repo:<commit>, not recorded)")
    if p.commit is None:
        p.missing.append("the vLLM commit")
    if p.gpu_model is None:
        p.missing.append("GPU model")
    if p.cfg.get("dtype") is None:
        p.missing.append("precision (dtype)")
    if gpus is None:
        m = _NAME_TP.search(p.id[:300])
        said = f"; the test's name says tp{m.group(1)}" if m else ""
        p.missing.append(f"GPU count (no tensor parallel size published{said})")
    if p.cfg.get("load_format") == "dummy":
        p.not_reproducible.append(
            "what random (--load-format dummy) weights decide: MoE expert routing and "
            "speculative decoding acceptance differ with real weights"
        )
    if p.cfg.get("load_format") == "dummy" or p.id.startswith("serving_"):
        p.extra["note.weights"] = (
            "vLLM's serving tests run most servers with --load-format dummy (random weights; "
            "the file does not say). Per token the work is the same as with real weights for a "
            "dense model, so a reproduction with real weights measures the same server work "
            "when outputs run as long: send ignore_eos and compare total_output_tokens"
        )
    if p.cfg.get("max_concurrency") is not None and _rate_is_inf(p.cfg.get("request_rate")):
        p.extra["note.concurrency"] = (
            "inf with max_concurrency: every request queued at once, max_concurrency in "
            "flight: the traffic of that many closed-loop streams"
        )


def _rate_is_inf(value: Any) -> bool:
    return (isinstance(value, str) and value.strip().lower() in _INF) or value == math.inf


# -- small helpers ---------------------------------------------------------------------


def _scalars(pairs: Iterable[tuple[Any, Any]]) -> dict[str, str]:
    """The scalar fields as text (the select keys and extra's values)."""
    out: dict[str, str] = {}
    for key, value in pairs:
        if isinstance(key, str) and value is not None and not isinstance(value, list | dict):
            out[key] = _text(value)
    return out


def _keep(extra: dict[str, str], fields: Mapping[str, str], prefix: str) -> None:
    for key, value in fields.items():
        if len(extra) >= MAX_EXTRA:
            return
        extra.setdefault(prefix + key, value[:MAX_TEXT])


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    return _json_type(value)


def _opt_text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _first_text(item: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((v.strip() for k in keys if isinstance(v := item.get(k), str) and v.strip()), None)


def _short(value: Any, limit: int = 60) -> str:
    text = one_line(value if isinstance(value, str) else _text(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return names.get(type(value), type(value).__name__)


def _date(value: Any) -> str | None:
    """vLLM's `%Y%m%d-%H%M%S` (the client's local time) as ISO 8601; other text as it is."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return datetime.strptime(value.strip(), "%Y%m%d-%H%M%S").isoformat()
    except ValueError:
        return value.strip()[:MAX_TEXT]


def _timestamp(value: Any) -> str | None:
    number = _number(value)
    if number is None or not 0 < number < 1e11:
        return None
    return datetime.fromtimestamp(number, UTC).isoformat()
