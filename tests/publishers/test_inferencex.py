"""bench.publishers.inferencex: a row of InferenceX's database dump as a card, and back.

The fixture (tests/data/publishers/inferencex, its README says where each figure comes from) is a
dump in the release's layout: benchmark_results.json with configs.json and workflow_runs.json
beside it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.errors import CardError
from bench.publishers import inferencex as ix
from bench.publishers.model import PublisherCard

DATA = Path(__file__).resolve().parent.parent / "data" / "publishers" / "inferencex"
DUMP = DATA / "benchmark_results.json"
SHA_1 = "0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d"
SHA_2 = "9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b"
GPU_MISSING = "GPU count: a per-GPU figure cannot be computed"

VLLM_RESULT = {
    "date": "20250101-120000",
    "backend": "vllm",
    "model_id": "meta-llama/Llama-3.1-8B-Instruct",
    "num_prompts": 200,
    "request_rate": "inf",
    "duration": 31.2,
    "completed": 200,
    "request_throughput": 6.41,
    "output_throughput": 1312.5,
    "median_ttft_ms": 41.2,
}
# Another publisher's file: a real MLPerf summary of the mlperf fixtures.
MLPERF_SUMMARY = (DATA.parent / "mlperf" / "offline_mlperf_log_summary.txt").read_text()


def _rows(name: str = "benchmark_results.json") -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = json.loads((DATA / name).read_text())
    return rows


def _row(rid: str) -> dict[str, Any]:
    return next(r for r in _rows() if r["id"] == rid)


def _config(cid: int) -> dict[str, Any]:
    return next(c for c in _rows("configs.json") if c["id"] == cid)


def _one_line(call: Any, *words: str) -> str:
    with pytest.raises(CardError) as caught:
        call()
    line = caught.value.one_line()
    assert "\n" not in line and "\r" not in line, line
    for word in words:
        assert word in line, line
    return line


def _dump(tmp_path: Path, rows: Any, name: str = "benchmark_results.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(rows))
    return path


def _flat(rid: str) -> dict[str, Any]:
    """A fixture row in the shape process_result.py writes it: figures and config at the top."""
    row = _row(rid)
    cfg = _config(row["config_id"])
    return {
        "hw": cfg["hardware"],
        "conc": row["conc"],
        "image": row["image"],
        "model": "openai/gpt-oss-120b",
        "infmax_model_prefix": "gptoss",
        "framework": cfg["framework"],
        "precision": cfg["precision"],
        "spec_decoding": "none",
        "disagg": False,
        "isl": row["isl"],
        "osl": row["osl"],
        "is_multinode": False,
        "tp": cfg["decode_tp"],
        "ep": 1,
        "dp_attention": "false",
        **row["metrics"],
    }


# --- reading --------------------------------------------------------------------------------


def test_a_row_by_id_maps_every_field() -> None:
    card = ix.read(DUMP, {"id": "101"})
    assert isinstance(card, PublisherCard)
    assert (card.publisher, card.source, card.point_id) == ("inferencex", DUMP.name, "101")
    assert card.date == "2025-12-15"
    assert (card.model, card.precision, card.gpu_model) == ("gptoss120b", "fp4", "h100")
    assert (card.gpu_count, card.nodes, card.samples_published) == (2, 1, 1)
    e = card.engine
    assert (e.name, e.version, e.commit) == ("vllm", None, SHA_1)
    assert e.image == "vllm/vllm-openai:v0.11.2"
    assert e.launch_flags == ()
    assert e.parallelism == {"tp": 2, "ep": 1, "dp_attention": 0}
    w = card.workload
    assert (w.arrivals, w.dataset, w.concurrency) == ("closed", "random", 4)
    assert (w.input_tokens, w.output_tokens, w.range_ratio) == (1024, 1024, 0.8)
    assert (w.num_prompts, w.warmups, w.ignore_eos) == (40, 8, True)
    assert w.request_rate is None and w.prefix_caching is None
    assert w.length_rule is not None
    assert "client's rule" in w.length_rule and "0.8" in w.length_rule
    assert card.not_reproducible == ()
    assert len(card.missing) == 1 and card.missing[0].startswith("launch flags")
    assert SHA_1 in card.missing[0]
    x = card.extra
    assert x["workflow_run.github_run_id"] == "20218553330"
    assert x["workflow_run.html_url"].endswith("/actions/runs/20218553330")
    assert (x["config_id"], x["workflow_run_id"], x["spec_method"]) == ("1", "1", "none")
    assert (x["disagg"], x["is_multinode"], x["offload_mode"]) == ("false", "false", "off")
    assert x["num_decode_gpu"] == "2"
    assert all(len(v) <= 200 for v in x.values())
    assert "id" not in x and "metrics" not in x
    assert not any(k in x for k in ("tput_per_gpu", "metrics.tput_per_gpu"))


def test_figures_keep_the_publishers_names_units_and_definitions() -> None:
    card = ix.read(DUMP, {"id": "101"})
    metrics = _row("101")["metrics"]
    assert {f.name for f in card.figures} == set(metrics)
    assert [f.name for f in card.figures][:4] == [
        "tput_per_gpu",
        "output_tput_per_gpu",
        "input_tput_per_gpu",
        "median_ttft",
    ]
    expect = {
        "tput_per_gpu": ("tok/s/gpu", "input_output_tok_s_per_gpu"),
        "output_tput_per_gpu": ("tok/s/gpu", "output_tok_s_per_gpu"),
        "input_tput_per_gpu": ("tok/s/gpu", None),
        "median_intvty": ("tok/s/user", "interactivity"),
        "p99_intvty": ("tok/s/user", None),
        "median_ttft": ("s", "ttft_median_s"),  # seconds, as InferenceX publishes them
        "p99_tpot": ("s", "tpot_p99_s"),
        "mean_itl": ("s", "itl_mean_s"),
        "std_e2el": ("s", None),  # a standard deviation: not computed
    }
    for name, (unit, computed) in expect.items():
        f = card.figure(name)
        assert f is not None, name
        assert (f.unit, f.computed_as, f.value) == (unit, computed, metrics[name]), name
        assert f.definition
    tput = card.figure("tput_per_gpu")
    assert tput is not None and "input + output" in tput.definition
    ttft = card.figure("median_ttft")
    assert ttft is not None and "seconds" in ttft.definition
    assert math.isclose(ttft.value, 0.05321004893630743)


@pytest.mark.parametrize(
    ("select", "rid"),
    [
        ({"hw": "h200", "framework": "vllm", "isl": "1024", "osl": "1024", "conc": "16"}, "103"),
        ({"hardware": "H200", "CONC": " 16 "}, "103"),  # case and spaces do not matter
        ({"hw": "b200", "conc": "64"}, "105"),
        ({"head_sha": SHA_2}, "106"),  # a workflow run's field
        ({"framework": "Dynamo-TRT", "disagg": "true"}, "106"),
        ({"image": "vllm/vllm-openai:v0.11.2", "config_id": "3"}, "104"),
        ({"id": "107"}, "107"),
    ],
)
def test_a_row_by_filters(select: dict[str, str], rid: str) -> None:
    assert ix.read(DUMP, select).point_id == rid


def test_the_dump_folder_reads_as_its_benchmark_results() -> None:
    assert ix.read(DATA, {"id": "102"}) == ix.read(DUMP, {"id": "102"})


@pytest.mark.parametrize("rid", [r["id"] for r in _rows()])
def test_round_trip_every_figure(rid: str) -> None:
    row = _row(rid)
    card = ix.read(DUMP, {"id": rid})
    out = ix.export(card)
    for field, value in row["metrics"].items():
        assert out[field] == value, field
    cfg = _config(row["config_id"])
    assert (out["id"], out["conc"], out["isl"], out["osl"]) == (
        rid,
        row["conc"],
        row["isl"],
        row["osl"],
    )
    assert (out["hw"], out["framework"], out["model"], out["precision"], out["image"]) == (
        cfg["hardware"],
        cfg["framework"],
        cfg["model"],
        cfg["precision"],
        row["image"],
    )
    assert out["date"] == row["date"][:10]


def test_a_per_result_row_reads_and_round_trips(tmp_path: Path) -> None:
    """The flat rows of process_result.py (the results_bmk artifact) read the same way."""
    row = _flat("105")
    path = _dump(tmp_path, [_flat("101"), row], name="agg_bmk.json")
    card = ix.read(path, {"hw": "b200"})
    assert card.point_id == "row 2"
    assert (card.gpu_model, card.gpu_count, card.model) == ("b200", 2, "openai/gpt-oss-120b")
    assert card.engine.parallelism == {"tp": 2, "ep": 1, "dp_attention": 0}
    assert card.engine.commit is None
    assert any(m.startswith("commit") for m in card.missing)
    assert card.extra["infmax_model_prefix"] == "gptoss"
    out = ix.export(card)
    for field in _row("105")["metrics"]:
        assert out[field] == row[field], field
    assert ix.read(path, {"id": "row 1"}).gpu_model == "h100"


def test_a_latency_in_ms_keeps_ms_and_its_literal(tmp_path: Path) -> None:
    row = _flat("101")
    row["median_ttft_ms"] = 53.2
    row["p90_ttft_ms"] = 60.0
    card = ix.read(_dump(tmp_path, [row]), {})
    ms = card.figure("median_ttft_ms")
    assert ms is not None and (ms.unit, ms.computed_as, ms.value) == ("ms", "ttft_median_ms", 53.2)
    p90 = card.figure("p90_ttft_ms")
    assert p90 is not None and (p90.unit, p90.computed_as) == ("ms", None)


def test_disaggregated_multinode_is_not_reproducible() -> None:
    card = ix.read(DUMP, {"id": "106"})
    assert (card.gpu_model, card.gpu_count, card.nodes) == ("gb200", 4, None)
    assert card.engine.name == "dynamo-trt"
    assert card.engine.parallelism == {
        "prefill_tp": 1,
        "prefill_ep": 1,
        "prefill_dp_attention": 0,
        "prefill_num_workers": 2,
        "decode_tp": 2,
        "decode_ep": 1,
        "decode_dp_attention": 0,
        "decode_num_workers": 1,
        "num_prefill_gpu": 2,
        "num_decode_gpu": 2,
    }
    (why,) = card.not_reproducible
    assert "disaggregated" in why and "several nodes" in why and "4-GPU host" in why
    assert (card.workload.input_tokens, card.workload.output_tokens) == (8192, 1024)
    tput, out = card.figure("tput_per_gpu"), card.figure("output_tput_per_gpu")
    assert tput is not None and tput.computed_as == "input_output_tok_s_per_gpu"
    assert out is not None and out.computed_as is None  # over the decode GPUs, not all four
    assert card.extra["kv_transfer_lib"] == "nixl"


def test_a_row_without_gpu_count_is_still_a_card() -> None:
    card = ix.read(DUMP, {"id": "107"})
    assert card.gpu_count is None
    assert GPU_MISSING in card.missing
    assert card.engine.parallelism == {}
    for name in ("tput_per_gpu", "output_tput_per_gpu", "input_tput_per_gpu"):
        f = card.figure(name)
        assert f is not None and f.computed_as is None, name
    intvty = card.figure("median_intvty")
    assert intvty is not None and intvty.computed_as == "interactivity"
    assert ix.export(card)["tput_per_gpu"] == _row("107")["metrics"]["tput_per_gpu"]


def test_an_agentic_row_says_so(tmp_path: Path) -> None:
    row = _flat("101") | {"benchmark_type": "agentic_traces", "isl": None, "osl": None}
    card = ix.read(_dump(tmp_path, [row]), {})
    w = card.workload
    assert (w.dataset, w.input_tokens, w.range_ratio, w.num_prompts) == (
        "agentic_traces",
        None,
        None,
        None,
    )
    assert any("agentic_traces" in n for n in card.not_reproducible)


# --- refusals -------------------------------------------------------------------------------


def test_no_row_matches_names_the_keys() -> None:
    line = _one_line(lambda: ix.read(DUMP, {"hw": "mi355x"}), str(DUMP), "no row matches")
    for key in ("id", "hw", "framework", "isl", "osl", "conc", "head_sha"):
        assert key in line


def test_several_rows_match() -> None:
    line = _one_line(lambda: ix.read(DUMP, {"hw": "h100"}), "2 rows match", "101", "102")
    assert "add --select KEY=VALUE" in line
    line = _one_line(lambda: ix.read(DUMP, {}), "7 rows match", "101", "...")


def test_two_rows_with_one_id(tmp_path: Path) -> None:
    rows = [_flat("101") | {"id": "5"}, _flat("102") | {"id": "9"}, _flat("103") | {"id": "5"}]
    path = _dump(tmp_path, rows)
    _one_line(lambda: ix.read(path, {"id": "9"}), str(path), "two rows have id 5")
    _one_line(lambda: ix.read(path, {"id": "5"}), "two rows have id 5")


@pytest.mark.parametrize("name", ["median_ttft_us", "p99_e2el_min", "median_intvty_ms"])
def test_unknown_unit(tmp_path: Path, name: str) -> None:
    row = _row("101")
    row["metrics"] = row["metrics"] | {name: 5.0}
    path = _dump(tmp_path, [row])
    (tmp_path / "configs.json").write_text(json.dumps([_config(1)]))
    _one_line(lambda: ix.read(path, {}), str(path), name, "unknown unit")


@pytest.mark.parametrize(
    "text", ["NaN", "Infinity", "-Infinity", "-1.5", "1e13", '"fast"', "true", "null", "[]"]
)
def test_a_figure_not_a_finite_number_in_range(tmp_path: Path, text: str) -> None:
    body = json.dumps([_flat("101") | {"median_ttft": "@"}]).replace('"@"', text)
    path = tmp_path / "benchmark_results.json"
    path.write_text(body)
    _one_line(lambda: ix.read(path, {}), str(path), "median_ttft", "not a finite number")


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (json.dumps(VLLM_RESULT).encode(), ("vLLM benchmark result",)),
        (MLPERF_SUMMARY.encode(), ("MLPerf",)),
        (json.dumps(_rows("configs.json")).encode(), ("configs table",)),
        (b"\xff\xfe[{\x00", ("UTF-8",)),
        (b'[{"conc": 4, "model": "m", "x": "\xe9t\xe9"}]', ("UTF-8",)),
        (b"", ("holds no rows",)),
        (b"[]", ("holds no rows",)),
        (b"[1, 2]", ("item 1", "not an object")),
        (b'[{"a": 1}]', ("item 1", "no conc")),
        (b"PK\x03\x04rest of a zip", ("zip archive", "unzip")),
        (b"[{", ("not JSON",)),
        (b'[{"conc": 1}', ("never ends",)),
        (b'{"conc": 4, "model": "m"}\n{"conc": 5}', ("2 rows match",)),
    ],
)
def test_not_a_dump(tmp_path: Path, content: bytes, words: tuple[str, ...]) -> None:
    path = tmp_path / "file.json"
    path.write_bytes(content)
    _one_line(lambda: ix.read(path, {}), str(path), *words)


def test_a_missing_file(tmp_path: Path) -> None:
    _one_line(lambda: ix.read(tmp_path / "absent.json", {}), "cannot read")


def test_a_config_that_is_not_there(tmp_path: Path) -> None:
    path = _dump(tmp_path, [_row("101")])
    _one_line(lambda: ix.read(path, {}), "config_id 1", "configs.json")
    (tmp_path / "configs.json").write_text(json.dumps([_config(2)]))
    _one_line(lambda: ix.read(path, {}), "config_id 1 is not in")


def test_a_failed_run(tmp_path: Path) -> None:
    path = _dump(tmp_path, [_flat("101") | {"error": "server died\n"}])
    _one_line(lambda: ix.read(path, {}), "failed run", "server died\\n")


def test_a_row_with_no_figures_or_no_model(tmp_path: Path) -> None:
    path = _dump(tmp_path, [{"conc": 4, "model": "m", "hw": "h100"}])
    _one_line(lambda: ix.read(path, {}), "no figures")
    path = _dump(tmp_path, [{"conc": 4, "tput_per_gpu": 1.0}])
    _one_line(lambda: ix.read(path, {}), "no model")
    path = _dump(tmp_path, [_flat("101") | {"conc": 0}])
    _one_line(lambda: ix.read(path, {}), "conc is 0")


def test_export_refuses_another_publishers_card() -> None:
    card = ix.read(DUMP, {"id": "101"}).model_copy(update={"publisher": "mlperf"})
    _one_line(lambda: ix.export(card), "mlperf")


# --- looks_like -----------------------------------------------------------------------------


def _head(content: bytes) -> str:
    return content[:4096].decode("utf-8", errors="replace")


def test_looks_like() -> None:
    assert ix.looks_like(_head(DUMP.read_bytes()))
    assert ix.looks_like(_head(json.dumps([_flat("101")]).encode()))
    # a dump row whose metrics start past the first 4 KiB still shows its columns
    assert ix.looks_like('[\n{"id":"1","workflow_run_id":"2","config_id":3,"conc":4,')
    for other in (
        json.dumps(VLLM_RESULT),
        MLPERF_SUMMARY,
        (DATA / "configs.json").read_text(),
        (DATA / "workflow_runs.json").read_text(),
        "",
        "\ufffd\ufffd",
    ):
        assert not ix.looks_like(other), other[:40]


# --- anything at all ------------------------------------------------------------------------

SCALAR = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-5, max_value=10**13)
    | st.floats()
    | st.text(max_size=6)
)
JSON = st.recursive(
    SCALAR,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)
# Values a row's fields take, most of them plausible, so that reading goes past the checks of
# the row's shape into the card's fields.
VALUE = (
    SCALAR
    | st.integers(min_value=0, max_value=64)
    | st.floats(min_value=0, max_value=1e6)
    | st.sampled_from(["1", "true", "false", "h100", "single_turn", "agentic_traces", "8"])
    | st.lists(SCALAR, max_size=2)
)
ROW_KEYS = [
    "id",
    "isl",
    "osl",
    "hw",
    "framework",
    "image",
    "tp",
    "pp",
    "pcp_size",
    "num_gpus",
    "disagg",
    "is_multinode",
    "num_prefill_gpu",
    "num_decode_gpu",
    "prefill_num_workers",
    "dp_attention",
    "error",
    "date",
    "benchmark_type",
    "random_range_ratio",
    "num_prompts",
    "num_warmups",
]
METRICS = st.dictionaries(
    st.sampled_from(
        ["tput_per_gpu", "output_tput_per_gpu", "median_ttft", "p99.9_itl", "median_intvty"]
    )
    | st.text(max_size=12),
    VALUE,
    max_size=4,
)
SHAPED = st.fixed_dictionaries(
    {"conc": VALUE | st.integers(min_value=1, max_value=64), "model": VALUE | st.just("m")},
    optional=dict.fromkeys(ROW_KEYS, VALUE),
).flatmap(
    lambda r: st.one_of(
        st.just(r),
        METRICS.map(lambda m: r | m),
        METRICS.map(lambda m: r | {"metrics": m}),
    )
)
# A real row with a few fields changed: cards, and the refusals of one bad field.
MUTATED = st.dictionaries(
    st.sampled_from(
        [k for k in ROW_KEYS if k != "error"]
        + ["conc", "model", "tput_per_gpu", "median_ttft", "mean_intvty"]
    ),
    VALUE,
    max_size=3,
).map(lambda changes: _flat("104") | changes)
ROW = SHAPED | MUTATED
FUZZ = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _card_or_card_error(path: Path, select: dict[str, str]) -> None:
    try:
        card = ix.read(path, select)
    except CardError as exc:
        line = exc.one_line()
    else:
        line = ""
    assert "\n" not in line and "\r" not in line, line
    if line:
        return
    assert isinstance(card, PublisherCard)
    out = ix.export(card)
    for f in card.figures:
        assert out[f.name] == f.value


@FUZZ
@given(value=JSON)
def test_any_json_value(tmp_path: Path, value: Any) -> None:
    path = tmp_path / "any.json"
    path.write_text(json.dumps(value))
    _card_or_card_error(path, {})


@FUZZ
@given(
    rows=ROW.map(lambda r: [r]) | st.lists(ROW, min_size=2, max_size=2),
    pick=st.sampled_from([{}, {"id": "1"}]),
)
def test_any_rows(tmp_path: Path, rows: list[dict[str, Any]], pick: dict[str, str]) -> None:
    path = tmp_path / "rows.json"
    path.write_text(json.dumps(rows))
    _card_or_card_error(path, pick)


@FUZZ
@given(content=st.binary(max_size=300))
def test_any_bytes(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "bytes.json"
    path.write_bytes(content)
    _card_or_card_error(path, {})
