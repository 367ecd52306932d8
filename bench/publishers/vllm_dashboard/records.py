"""The dashboard's records, one a metric: a record's fields, and one test's facts from its
records.

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
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.errors import CardError
from bench.publishers.vllm_dashboard.facts import _model, _Point, _Test
from bench.publishers.vllm_dashboard.figures import _figure_kind, _figure_value, _split
from bench.publishers.vllm_dashboard.values import (
    DO,
    _date,
    _json_type,
    _keep,
    _opt_text,
    _scalars,
    _short,
    _text,
    _timestamp,
)


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
