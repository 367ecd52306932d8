"""bench.publishers.vllm_dashboard: vLLM's serving results and dashboard records as cards."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.errors import CardError
from bench.publishers import vllm_dashboard as vd
from bench.publishers.model import PublisherCard

DATA = Path(__file__).resolve().parent.parent / "data" / "publishers" / "vllm-dashboard"
SHAREGPT = DATA / "serving_llama8B_tp1_sharegpt_qps_4.json"
RANDOM = DATA / "serving_qwen3_8b_tp1_random_in1k_out2k_qps_10_concurrency_200.json"
RECORDS = DATA / "vllm-dashboard-records.json"
COMMIT_A = "7c1f0a3e52d94b86a0e1d2c3b4a5968778695a4b"
COMMIT_B = "e2d8b9c4a1f07e3d5c6b7a8990a1b2c3d4e5f601"
QPS_1 = "serving_llama8B_tp1_sharegpt_qps_1"

# A row of an InferenceX-like database dump, and an MLPerf log summary: not vLLM's.
INFERENCEX_ROWS = [
    {
        "model": "llama70b",
        "hw": "h100",
        "framework": "vllm",
        "precision": "fp8",
        "isl": 1024,
        "osl": 1024,
        "conc": 64,
        "tput_per_gpu": 1234.5,
        "median_ttft": 0.21,
    }
]
# Another publisher's file: a real MLPerf summary of the mlperf fixtures.
MLPERF_SUMMARY = (DATA.parent / "mlperf" / "offline_mlperf_log_summary.txt").read_text()
LATENCY_FIELDS = {"ttft", "tpot", "itl", "e2el"}


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _head(path: Path) -> str:
    return path.read_bytes()[:4096].decode("utf-8", errors="replace")


def _write(tmp_path: Path, data: Any, name: str = "result.json") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


def _figure_fields(result: dict[str, Any]) -> set[str]:
    """The fields of a result that are figures, by vLLM's naming."""
    out = set()
    for key, value in result.items():
        rates = {"request_throughput", "output_throughput", "total_token_throughput"}
        if key in rates | {"max_output_tokens_per_s"} or (
            key == "request_goodput" and value is not None
        ):
            out.add(key)
        parts = key.split("_")
        if key.endswith("_ms") and len(parts) == 3 and parts[1] in LATENCY_FIELDS:
            out.add(key)
    return out


def _error(path: Path, select: dict[str, str] | None = None) -> str:
    with pytest.raises(CardError) as caught:
        vd.read(path, select or {})
    message = str(caught.value)
    assert "\n" not in message
    assert path.name in message
    return message


# -- looks_like ------------------------------------------------------------------------


@pytest.mark.parametrize("path", [SHAREGPT, RANDOM, RECORDS])
def test_looks_like_vllms_files(path: Path) -> None:
    assert vd.looks_like(_head(path))


@pytest.mark.parametrize(
    "head",
    [
        json.dumps(INFERENCEX_ROWS),
        MLPERF_SUMMARY,
        "",
        "not json at all",
        json.dumps({"model": "x", "tput_per_gpu": 1.0, "model_id": "y", "num_prompts": 1}),
        json.dumps([{"benchmark": {"name": "other"}, "metric": {}}]),
    ],
)
def test_looks_like_other_files(head: str) -> None:
    assert not vd.looks_like(head)


# -- format (a): one `vllm bench serve --save-result` JSON ------------------------------


def test_sharegpt_result_every_field() -> None:
    card = vd.read(SHAREGPT, {})
    assert card.publisher == "vllm-dashboard"
    assert card.source == SHAREGPT.name
    assert card.point_id == "serving_llama8B_tp1_sharegpt_qps_4"
    assert card.model == "meta-llama/Meta-Llama-3.1-8B-Instruct"
    assert card.date == "2025-03-01T04:15:22"
    assert card.gpu_count == 1
    assert card.gpu_model is None and card.precision is None
    assert card.engine.name == "vllm"
    assert card.engine.commit is None and card.engine.version is None
    assert card.engine.parallelism == {"tp": 1}
    assert card.engine.launch_flags == ()
    assert card.samples_published == 1
    w = card.workload
    assert (w.arrivals, w.request_rate, w.burstiness) == ("poisson", 4.0, 1.0)
    assert (w.dataset, w.num_prompts, w.concurrency) == ("sharegpt", 200, None)
    assert w.input_tokens is None and w.output_tokens is None and w.range_ratio is None
    assert w.length_rule is not None and "ShareGPT" in w.length_rule
    assert any(m.startswith("launch flags") for m in card.missing)
    assert any(m.startswith("image") for m in card.missing)
    assert "the vLLM commit" in card.missing
    assert "GPU model" in card.missing
    assert "the ShareGPT sample (dataset file and seed)" in card.missing
    # per-request arrays are named, never figures
    arrays = card.extra["note.per_request_arrays"]
    for name in ("input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors"):
        assert name in arrays
        assert card.figure(name) is None
    assert card.extra["total_output_tokens"] == "40876"
    assert card.extra["tensor_parallel_size"] == "1"
    assert "load-format dummy" in card.extra["note.weights"]


def test_sharegpt_result_figures() -> None:
    card = vd.read(SHAREGPT, {})
    result = _load(SHAREGPT)
    assert {f.name for f in card.figures} == _figure_fields(result)
    by_name = {f.name: f for f in card.figures}
    assert by_name["request_throughput"].unit == "req/s"
    assert by_name["request_throughput"].computed_as == "request_rate"
    assert by_name["output_throughput"].unit == "tok/s"
    assert by_name["output_throughput"].computed_as == "output_tok_s"
    assert by_name["total_token_throughput"].computed_as == "total_tok_s"
    assert by_name["median_tpot_ms"].unit == "ms"
    assert by_name["median_tpot_ms"].computed_as == "tpot_median_ms"
    assert "excludes the first token" in by_name["median_tpot_ms"].definition
    assert by_name["p99_ttft_ms"].computed_as == "ttft_p99_ms"
    assert by_name["mean_itl_ms"].computed_as == "itl_mean_ms"
    assert "pooled" in by_name["mean_itl_ms"].definition
    assert by_name["std_ttft_ms"].computed_as is None


def test_random_result_every_field() -> None:
    card = vd.read(RANDOM, {})
    assert card.point_id == RANDOM.stem
    assert card.model == "Qwen/Qwen3-8B"
    assert card.gpu_count == 1
    w = card.workload
    assert (w.arrivals, w.request_rate, w.concurrency) == ("poisson", 10.0, 200)
    assert (w.dataset, w.input_tokens, w.output_tokens, w.num_prompts) == (
        "random",
        1024,
        2048,
        200,
    )
    assert w.range_ratio is None
    assert w.length_rule is not None and "range ratio" in w.length_rule
    assert "name" in card.extra["note.lengths"]
    assert card.extra["note.per_request_arrays"] == "latencies, queue_times"
    by_name = {f.name: f for f in card.figures}
    assert by_name["p99_e2el_ms"].computed_as == "e2el_p99_ms"
    assert by_name["mean_e2el_ms"].computed_as == "e2el_mean_ms"
    assert by_name["p90_tpot_ms"].computed_as is None
    assert "90th percentile" in by_name["p90_tpot_ms"].definition
    assert by_name["max_output_tokens_per_s"].computed_as is None
    assert card.figure("request_goodput") is None  # null: no --goodput
    assert card.figure("max_concurrent_requests") is None


@pytest.mark.parametrize("path", [SHAREGPT, RANDOM])
def test_result_round_trip(path: Path) -> None:
    result = _load(path)
    exported = vd.export(vd.read(path, {}))
    fields = _figure_fields(result)
    assert set(exported) == fields
    for name in fields:
        assert exported[name] == result[name]


def test_result_metadata_mapped(tmp_path: Path) -> None:
    result = _load(SHAREGPT) | {
        "vllm_version": "0.8.5",
        "commit": "abcdef0123456789",
        "gpu_type": "H100",
        "dtype": "bfloat16",
        "pipeline_parallel_size": "2",
        "server_command": "vllm serve meta-llama/Llama-3.1-8B -tp 1 --load-format dummy",
        "load_format": "dummy",
        "request_rate": "inf",
        "max_concurrency": 16,
        "test_name": "serving_named",
    }
    card = vd.read(_write(tmp_path, result), {"commit": "abcdef0"})
    assert card.point_id == "serving_named"
    assert card.engine.version == "0.8.5" and card.engine.commit == "abcdef0123456789"
    assert card.engine.parallelism == {"tp": 1, "pp": 2}
    assert card.gpu_count == 2
    assert card.gpu_model == "H100" and card.precision == "bfloat16"
    assert card.engine.launch_flags[:2] == ("vllm", "serve")
    assert not any(m.startswith("launch flags") for m in card.missing)
    assert (card.workload.arrivals, card.workload.request_rate) == ("burst", None)
    assert card.workload.burstiness is None and card.workload.concurrency == 16
    assert "closed-loop" in card.extra["note.concurrency"]
    assert any("dummy" in n for n in card.not_reproducible)


def test_gamma_arrivals_and_ramp_up(tmp_path: Path) -> None:
    result = _load(SHAREGPT) | {"burstiness": 0.5}
    card = vd.read(_write(tmp_path, result), {})
    assert (card.workload.arrivals, card.workload.burstiness) == ("gamma", 0.5)
    ramp = _load(SHAREGPT) | {
        "request_rate": "inf",
        "ramp_up_strategy": "linear",
        "ramp_up_start_rps": 1,
        "ramp_up_end_rps": 8,
    }
    card = vd.read(_write(tmp_path, ramp, "ramp.json"), {})
    assert any("ramp-up" in n for n in card.not_reproducible)


def test_random_range_ratio_goes_to_extra(tmp_path: Path) -> None:
    result = _load(RANDOM) | {"random_range_ratio": 0.5, "dataset_name": "random"}
    card = vd.read(_write(tmp_path, result), {})
    assert card.workload.range_ratio is None
    assert "0.5" in card.extra["note.range_ratio"]
    rule = card.workload.length_rule or ""
    assert "1 - 0.5" in rule and "1 + 0.5" in rule and "int(0.5 x L), L" in rule


def test_appended_results_need_a_select(tmp_path: Path) -> None:
    first = _load(SHAREGPT)
    second = first | {"request_rate": 16.0}
    path = _write(tmp_path, json.dumps(first) + "\n" + json.dumps(second) + "\n")
    assert "two records with one id" in _error(path)
    card = vd.read(path, {"request_rate": "16"})
    assert card.workload.request_rate == 16.0


# -- format (b): the dashboard's records -----------------------------------------------


def test_records_select_one_test_of_one_commit() -> None:
    card = vd.read(RECORDS, {"id": QPS_1, "commit": COMMIT_A})
    assert card.point_id == QPS_1
    assert card.engine.commit == COMMIT_A
    assert card.model == "meta-llama/Meta-Llama-3.1-8B-Instruct"
    assert card.gpu_model == "NVIDIA H100 80GB HBM3"
    assert card.gpu_count == 1 and card.engine.parallelism == {"tp": 1}
    assert card.date == "2025-10-09T09:05:12"
    w = card.workload
    assert (w.arrivals, w.request_rate, w.dataset, w.num_prompts) == (
        "poisson",
        1.0,
        "sharegpt",
        200,
    )
    assert (w.ignore_eos, w.warmups, w.concurrency) == (False, 0, None)
    assert card.extra["runner.gpu_count"] == "8"
    assert card.extra["head_branch"] == "main"
    assert card.extra["note.records"] == "12"
    assert "the ShareGPT sample (dataset file and seed)" not in card.missing
    assert "the vLLM commit" not in card.missing


def test_records_round_trip() -> None:
    records = [
        r
        for r in _load(RECORDS)
        if r["head_sha"] == COMMIT_B and r["metric"]["name"] != "avg_latency"
    ]
    exported = vd.export(vd.read(RECORDS, {"commit": COMMIT_B}))
    for record in records:
        name = record["metric"]["name"]
        assert exported[name] == record["metric"]["benchmark_values"][0]
    info = records[0]["metric"]["extra_info"]
    for name in ("request_throughput", "output_throughput", "total_token_throughput"):
        assert exported[name] == info[name]
    assert len(exported) == 12 + 4


def test_records_by_any_field_and_commit_prefix() -> None:
    card = vd.read(RECORDS, {"request_rate": "inf"})
    assert card.point_id == "serving_llama8B_tp1_sharegpt_qps_inf"
    assert (card.workload.arrivals, card.workload.request_rate) == ("burst", None)
    assert "burst" in card.extra["note.arrivals"]
    card = vd.read(RECORDS, {"id": QPS_1, "commit": COMMIT_B[:8]})
    assert card.engine.commit == COMMIT_B


def test_records_as_json_lines(tmp_path: Path) -> None:
    lines = "\n".join(json.dumps(r) for r in _load(RECORDS))
    path = _write(tmp_path, lines, "benchmark_results.json")
    card = vd.read(path, {"id": QPS_1, "commit": COMMIT_A})
    assert card.engine.commit == COMMIT_A and len(card.figures) == 16


def test_records_before_upload_have_no_commit(tmp_path: Path) -> None:
    keep = ("benchmark", "model", "metric")
    raw = [
        {k: r[k] for k in keep}
        for r in _load(RECORDS)
        if r["head_sha"] == COMMIT_A
        and r["benchmark"]["extra_info"]["args"].get("request_rate") == 1.0
    ]
    card = vd.read(_write(tmp_path, raw, "x.pytorch.json"), {})
    assert card.engine.commit is None and card.gpu_model is None
    assert "the vLLM commit" in card.missing


# -- errors: each a CardError, one line naming the file --------------------------------


def test_several_match() -> None:
    message = _error(RECORDS)
    assert "3 serving tests in the file" in message
    assert QPS_1 in message and "add --select KEY=VALUE" in message
    message = _error(RECORDS, {"id": QPS_1})
    assert "2 serving tests match id=" + QPS_1 in message
    assert COMMIT_A[:12] in message and COMMIT_B[:12] in message


def test_none_match() -> None:
    message = _error(RECORDS, {"id": "serving_nothing"})
    assert "no serving test matches id=serving_nothing" in message
    assert "3 serving tests" in message
    assert "no test has nosuch" in _error(RECORDS, {"nosuch": "1"})


def test_two_records_with_one_id(tmp_path: Path) -> None:
    records = _load(RECORDS)
    twin = next(r for r in records if r["head_sha"] == COMMIT_B)
    path = _write(tmp_path, [*records, twin])
    message = _error(path, {"commit": COMMIT_B})
    assert "two records with one id" in message and twin["metric"]["name"] in message


def test_no_serving_test(tmp_path: Path) -> None:
    latency = [r for r in _load(RECORDS) if r["metric"]["name"] == "avg_latency"]
    assert "no serving test in the file" in _error(_write(tmp_path, latency))


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, "12.5", True, None, -1.0, 2e12, [1.0]]
)
def test_bad_figure_value(tmp_path: Path, value: Any) -> None:
    text = json.dumps(_load(SHAREGPT) | {"median_ttft_ms": value})  # NaN / Infinity in JSON
    assert "median_ttft_ms" in _error(_write(tmp_path, text))


@pytest.mark.parametrize("value", [math.nan, math.inf, "inf", "fast", None, [2.0]])
def test_bad_record_value(tmp_path: Path, value: Any) -> None:
    records = _load(RECORDS)
    records[0]["metric"]["benchmark_values"] = [value]
    message = _error(_write(tmp_path, records), {"id": QPS_1, "commit": COMMIT_A})
    assert records[0]["metric"]["name"] in message


def test_record_with_two_values(tmp_path: Path) -> None:
    records = _load(RECORDS)
    records[0]["metric"]["benchmark_values"] = [1.0, 2.0]
    message = _error(_write(tmp_path, records), {"id": QPS_1, "commit": COMMIT_A})
    assert "not one value" in message


def test_unknown_unit(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, _load(SHAREGPT) | {"mean_ttft_s": 0.02}))
    assert "unknown unit 's'" in message and "mean_ttft_s" in message
    records = _load(RECORDS)
    records[0]["metric"]["name"] = "p99_ttft_us"
    message = _error(_write(tmp_path, records, "r.json"), {"id": QPS_1, "commit": COMMIT_A})
    assert "p99_ttft_us" in message and "unknown unit" in message
    records[0]["metric"]["name"] = "tokens_per_joule"
    message = _error(_write(tmp_path, records, "r.json"), {"id": QPS_1, "commit": COMMIT_A})
    assert "not one of vLLM's serving figures" in message


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("request_rate", 0),
        ("request_rate", "fast"),
        ("request_rate", None),
        ("burstiness", -1),
        ("num_prompts", 0),
        ("max_concurrency", "many"),
        ("tensor_parallel_size", "x"),
        ("model_id", 7),
    ],
)
def test_bad_config_value(tmp_path: Path, field: str, value: Any) -> None:
    message = _error(_write(tmp_path, _load(SHAREGPT) | {field: value}))
    assert field in message or (field == "model_id" and "model" in message)


def test_inferencex_dump_is_not_vllm(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, INFERENCEX_ROWS))
    assert "InferenceX" in message


def test_mlperf_summary_is_not_vllm(tmp_path: Path) -> None:
    message = _error(_write(tmp_path, MLPERF_SUMMARY, "mlperf_log_summary.txt"))
    assert "MLPerf" in message


@pytest.mark.parametrize(
    "raw",
    [b"\xff\xfe{\x00}", b'{"model_id": "\xe9t\xe9"}', b'[{"a": "\xc3"}]'],
)
def test_not_utf8(tmp_path: Path, raw: bytes) -> None:
    path = tmp_path / "bad.json"
    path.write_bytes(raw)
    assert "UTF-8" in _error(path)


@pytest.mark.parametrize(
    "text", ["", "{", "[1, 2]", '"text"', "{}", '{"a": 1}\n{"b": 2}', "[{}]", "[" + "[" * 5000]
)
def test_not_a_result(tmp_path: Path, text: str) -> None:
    _error(_write(tmp_path, text))


def test_missing_file(tmp_path: Path) -> None:
    _error(tmp_path / "absent.json")


def test_export_refuses_another_publishers_card() -> None:
    card = vd.read(SHAREGPT, {}).model_copy(update={"publisher": "mlperf"})
    with pytest.raises(CardError):
        vd.export(card)


# -- whatever the bytes: a card or a CardError -----------------------------------------

JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=30,
)
KEYS = st.sampled_from(
    [
        "request_rate",
        "burstiness",
        "max_concurrency",
        "num_prompts",
        "model_id",
        "median_tpot_ms",
        "p99_ttft_ms",
        "tensor_parallel_size",
        "dataset_name",
        "random_input_len",
        "random_range_ratio",
        "date",
        "server_command",
        "test_name",
        "commit",
    ]
)


def _outcome(path: Path, select: dict[str, str]) -> None:
    try:
        card = vd.read(path, select)
    except CardError as exc:
        message = str(exc)
    else:
        assert isinstance(card, PublisherCard)
        assert vd.export(card)
        return
    assert "\n" not in message


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=JSON)
def test_any_json(tmp_path_factory: pytest.TempPathFactory, data: Any) -> None:
    path = tmp_path_factory.mktemp("any") / "any.json"
    path.write_text(json.dumps(data))
    _outcome(path, {})


@settings(max_examples=100, deadline=None)
@given(changes=st.dictionaries(KEYS, JSON, max_size=4))
def test_a_result_changed(tmp_path_factory: pytest.TempPathFactory, changes: Any) -> None:
    path = tmp_path_factory.mktemp("changed") / "serving_x_random_in1k_out2k_tp1.json"
    path.write_text(json.dumps(_load(RANDOM) | changes))
    _outcome(path, {})


@settings(max_examples=100, deadline=None)
@given(changes=st.dictionaries(st.sampled_from(["args", "info", "metric"]), JSON, max_size=3))
def test_a_record_changed(tmp_path_factory: pytest.TempPathFactory, changes: Any) -> None:
    records = _load(RECORDS)[:12]
    for where, value in changes.items():
        if where == "args":
            records[0]["benchmark"]["extra_info"]["args"] = value
        elif where == "info":
            records[1]["metric"]["extra_info"] = value
        else:
            records[2]["metric"]["name"] = value
    path = tmp_path_factory.mktemp("record") / "records.json"
    path.write_text(json.dumps(records))
    _outcome(path, {})


@settings(max_examples=150, deadline=None)
@given(raw=st.binary(max_size=300), prefix=st.sampled_from([b"", b"{", b"[", b'{"model_id":']))
def test_any_bytes(tmp_path_factory: pytest.TempPathFactory, raw: bytes, prefix: bytes) -> None:
    path = tmp_path_factory.mktemp("bytes") / "any.json"
    path.write_bytes(prefix + raw)
    _outcome(path, {"id": "x"} if raw[:1] == b"x" else {})


def test_a_p50_is_computed_as_the_median_it_is() -> None:
    card = vd.read(RANDOM, {})
    for name, key in (("p50_ttft_ms", "ttft_median_ms"), ("p50_tpot_ms", "tpot_median_ms")):
        f = card.figure(name)
        if f is not None:
            assert f.computed_as == key
    assert any(card.figure(n) is not None for n in ("p50_ttft_ms", "p50_tpot_ms"))
