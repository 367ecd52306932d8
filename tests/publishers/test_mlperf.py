"""bench.publishers.mlperf: an MLPerf Inference server-scenario LLM summary to a card and back
(LoadGen's early-stopping rule: tests/unit/test_workload_slo.py).

Fixtures: tests/data/publishers/mlperf/ (its README says which figures are published and
where they come from, and what is made up).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.errors import CardError
from bench.publishers import mlperf
from bench.publishers.model import PublishedConstraint, PublisherCard
from tests.publishers.paths import MLPERF_SERVER

DATA = Path(__file__).resolve().parents[1] / "data" / "publishers" / "mlperf"
SERVER = MLPERF_SERVER
SYSTEM = DATA / "systems" / "H200-SXM-141GBx8_TRT.json"
L405B = DATA / "llama3_1-405b_server_mlperf_log_summary.txt"
OFFLINE = DATA / "offline_mlperf_log_summary.txt"
INVALID = DATA / "invalid_mlperf_log_summary.txt"

# The figure lines' value texts, as the summaries print them.
SERVER_FIGURES = {
    "Completed tokens per second": "29228.22",
    "Completed samples per second": "100.35",
    "99.00 percentile first token latency (ns)": "452744202",
    "99.00 percentile time to output token (ns)": "146040006",
}
L405B_FIGURES = {
    "Completed tokens per second": "845.82",
    "Completed samples per second": "1.29",
    "99.00 percentile first token latency (ns)": "4296681261",
    "99.00 percentile time to output token (ns)": "113518660",
}

# Another publisher's files: an InferenceX dump (a JSON list of rows with tput_per_gpu) and a
# vLLM `vllm bench serve --save-result` JSON.
INFERENCEX_DUMP = [
    {"hw": "h200", "model": "llama70b", "tput_per_gpu": 1234.5, "conc": 64, "isl": 1024},
]
VLLM_RESULT = {
    "date": "20250101-000000",
    "backend": "vllm",
    "model_id": "meta-llama/Llama-2-70b-chat-hf",
    "num_prompts": 1000,
    "request_rate": "inf",
    "request_throughput": 10.5,
    "output_throughput": 2500.25,
    "mean_ttft_ms": 120.0,
    "p99_ttft_ms": 400.0,
}


def one_line(exc: pytest.ExceptionInfo[CardError]) -> str:
    message = str(exc.value)
    assert message and "\n" not in message
    return message


def write(tmp_path: Path, text: str, name: str = "mlperf_log_summary.txt") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def edited(source: Path, replace: dict[str, str | None]) -> str:
    """SOURCE's text with each line that starts with a key of REPLACE (after its blanks)
    replaced by the value, or dropped where the value is None."""
    out = []
    for line in source.read_text(encoding="utf-8").splitlines():
        key = next((k for k in replace if line.strip().startswith(k)), None)
        if key is None:
            out.append(line)
        elif replace[key] is not None:
            out.append(str(replace[key]))
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- reading


def test_reads_every_field_of_the_published_h200_result() -> None:
    card = mlperf.read(SERVER, {}, SYSTEM)
    assert card.publisher == "mlperf"
    assert card.source == "mlperf_log_summary.txt"
    assert card.point_id == "NVIDIA/H200-SXM-141GBx8_TRT/llama2-70b-99/Server"
    assert card.model == "meta-llama/Llama-2-70b-chat-hf"
    assert card.date is None and card.precision is None
    # accelerator_model_name; accelerators_per_node 8 x number_of_nodes 1.
    assert card.gpu_model == "NVIDIA H200-SXM-141GB"
    assert card.gpu_count == 8 and card.nodes == 1
    # "TensorRT 10.2.0, CUDA 12.4" names no LLM engine bench knows: missing, text in extra.
    assert card.engine.name is None
    assert card.extra["system.framework"] == "TensorRT 10.2.0, CUDA 12.4"
    assert card.missing == ("engine", "launch flags", "image", "engine version", "precision")

    w = card.workload
    assert w.arrivals == "server" and w.dataset == "open-orca"
    assert w.request_rate == 101.0  # target_qps : 101
    assert w.min_duration_s == 2400.0  # min_duration (ms): 2400000
    assert w.concurrency is None and w.input_tokens is None and w.output_tokens is None
    assert w.length_rule is not None and "24,576" in w.length_rule

    by_name = {f.name: f for f in card.figures}
    assert list(by_name) == list(SERVER_FIGURES)
    tok = by_name["Completed tokens per second"]
    assert (tok.value, tok.unit, tok.computed_as) == (29228.22, "tok/s", "mlperf_tokens_per_s")
    assert "output tokens" in tok.definition and "valid only" in tok.definition
    req = by_name["Completed samples per second"]
    assert (req.value, req.unit, req.computed_as) == (100.35, "req/s", "request_rate")
    ttft = by_name["99.00 percentile first token latency (ns)"]
    assert (ttft.value, ttft.unit, ttft.computed_as) == (452744202.0, "ns", "mlperf_ttft_p99_ns")
    tpot = by_name["99.00 percentile time to output token (ns)"]
    assert (tpot.value, tpot.unit, tpot.computed_as) == (146040006.0, "ns", "mlperf_tpot_p99_ns")

    # ttft_latency (ns): 2000000000 = 2000 ms; tpot_latency (ns): 200000000 = 200 ms.
    assert card.constraints == (
        PublishedConstraint(figure="ttft", percentile=99, limit_ms=2000, confidence=0.99),
        PublishedConstraint(figure="tpot", percentile=99, limit_ms=200, confidence=0.99),
    )
    assert card.samples_published == 1
    assert card.not_reproducible[0] == (
        "MLPerf's accuracy run is not reproduced: bench's answers check is its own"
    )
    assert len(card.not_reproducible) == 4  # one node: nothing about multi-node

    extra = card.extra
    assert extra["benchmark"] == "llama2-70b-99"
    assert extra["SUT name"] == "llama2-70b-Server-SUT"
    assert extra["TTFT Early Stopping Result"] == "Run successful."
    assert extra["TPOT Early Stopping Result"] == "Run successful."
    assert extra["Scheduled samples per second"] == "101.25"
    assert extra["99.00 percentile latency (ns)"] == "118861461715"
    assert extra["schedule_rng_seed"] == "14962580496156340209"
    assert extra["limits"] == "ttft 2000 ms from the summary; tpot 200 ms from the summary"
    assert extra["system.submitter"] == "NVIDIA"
    assert extra["system.division"] == "closed" and extra["system.status"] == "available"
    assert extra["system.system_name"] == "NVIDIA H200 (8x H200-SXM-141GB, TensorRT)"
    assert "system.sw_notes" not in extra  # "" in the file
    for name in SERVER_FIGURES:  # figures are figures, not also extra
        assert name not in extra


def test_without_the_system_file_gpus_are_missing() -> None:
    card = mlperf.read(SERVER, {})
    assert card.gpu_model is None and card.gpu_count is None and card.nodes is None
    assert card.missing[-2:] == ("gpu_model", "gpu_count")
    assert card.point_id == "H200-SXM-141GBx8_TRT/llama2-70b-99/Server"  # from the folders


def test_405b_needs_the_benchmark_selected_and_keeps_its_own_limits() -> None:
    with pytest.raises(CardError) as exc:
        mlperf.read(L405B, {})
    assert "does not name its benchmark" in one_line(exc) and "'PySUT'" in one_line(exc)
    card = mlperf.read(L405B, {"benchmark": "llama3.1-405b"})
    assert card.model == "meta-llama/Llama-3.1-405B-Instruct"
    assert card.workload.request_rate == 1.3 and card.workload.min_duration_s == 600.0
    assert [(c.figure, c.limit_ms) for c in card.constraints] == [("ttft", 6000), ("tpot", 175)]
    assert card.extra["WARNING"].startswith("sample_concatenate_permutation")
    assert mlperf.export(card) == L405B_FIGURES


@pytest.mark.parametrize(
    ("benchmark", "ttft_ms", "tpot_ms", "model", "dataset"),
    [
        # loadgen/mlperf.conf: <name>.Server.ttft_latency / tpot_latency, in ms.
        ("llama2-70b-99.9", 2000, 200, "meta-llama/Llama-2-70b-chat-hf", "open-orca"),
        ("llama2-70b-interactive-99", 450, 40, "meta-llama/Llama-2-70b-chat-hf", "open-orca"),
        ("llama3_1-405b", 6000, 175, "meta-llama/Llama-3.1-405B-Instruct", "mlperf-llama3.1-405b"),
        ("deepseek-r1", 2000, 80, "deepseek-ai/DeepSeek-R1", "mlperf-deepseek-r1"),
        ("llama3.1-8b", 2000, 100, "meta-llama/Llama-3.1-8B-Instruct", "cnn-dailymail"),
    ],
)
def test_limits_fall_back_to_mlperf_conf(
    tmp_path: Path, benchmark: str, ttft_ms: float, tpot_ms: float, model: str, dataset: str
) -> None:
    text = edited(L405B, {"ttft_latency": None, "tpot_latency": None})
    card = mlperf.read(write(tmp_path, text), {"benchmark": benchmark})
    assert [(c.figure, c.limit_ms) for c in card.constraints] == [
        ("ttft", ttft_ms),
        ("tpot", tpot_ms),
    ]
    assert (card.model, card.workload.dataset) == (model, dataset)
    assert card.extra["limits"].endswith("from loadgen/mlperf.conf")


def test_benchmark_from_the_sut_name(tmp_path: Path) -> None:
    # A flat file: no folders to read; "llama2-70b-Server-SUT" names llama2-70b.
    card = mlperf.read(write(tmp_path, SERVER.read_text()), {})
    assert card.extra["benchmark"] == "llama2-70b"
    text = edited(SERVER, {"SUT name": "SUT name : llama2-70b-interactive-Server-SUT"})
    card = mlperf.read(write(tmp_path, text), {})
    assert card.extra["benchmark"] == "llama2-70b-interactive"  # the longer name first


def test_system_multinode_and_engine(tmp_path: Path) -> None:
    doc = json.loads(SYSTEM.read_text())
    doc |= {"number_of_nodes": "2", "accelerators_per_node": 4, "framework": "vLLM 0.6.3"}
    system = tmp_path / "two.json"
    system.write_text(json.dumps(doc))
    card = mlperf.read(SERVER, {}, system)
    assert card.gpu_count == 8 and card.nodes == 2 and card.engine.name == "vllm"
    assert "engine" not in card.missing
    assert any("2-node" in n for n in card.not_reproducible)


# -------------------------------------------------------------------------- round trip


@pytest.mark.parametrize(("path", "select", "figures"), [
    (SERVER, {}, SERVER_FIGURES),
    (L405B, {"benchmark": "llama3_1-405b"}, L405B_FIGURES),
])  # fmt: skip
def test_round_trip_per_figure(path: Path, select: dict[str, str], figures: dict[str, str]) -> None:
    card = mlperf.read(path, select)
    out = mlperf.export(card)
    for name, text in figures.items():
        assert out[name] == text
        # The text is on the summary's line for that key.
        assert any(
            line.split(":", 1)[0].split() == name.split() and line.split(":", 1)[1].strip() == text
            for line in path.read_text().splitlines()
        )
    assert mlperf.export(PublisherCard.model_validate_json(card.model_dump_json())) == out


def test_round_trip_keeps_trailing_zeros(tmp_path: Path) -> None:
    text = edited(SERVER, {
        "Completed samples per second": "Completed samples per second    : 13.30",
        "Completed tokens per second": "Completed tokens per second: 3883.60",
    })  # fmt: skip
    out = mlperf.export(mlperf.read(write(tmp_path, text), {}))
    assert out["Completed samples per second"] == "13.30"
    assert out["Completed tokens per second"] == "3883.60"


def test_export_refuses_another_publishers_card() -> None:
    card = mlperf.read(SERVER, {}).model_copy(update={"publisher": "inferencex"})
    with pytest.raises(CardError) as exc:
        mlperf.export(card)
    assert "not MLPerf's" in one_line(exc)


# ------------------------------------------------------------------------- bad inputs


def test_offline_scenario(tmp_path: Path) -> None:
    with pytest.raises(CardError) as exc:
        mlperf.read(OFFLINE, {})
    message = one_line(exc)
    assert "'Offline' scenario" in message and "only MLPerf's Server scenario" in message
    assert str(OFFLINE) in message
    for scenario in ("SingleStream", "MultiStream"):
        text = edited(SERVER, {"Scenario": f"Scenario : {scenario}"})
        with pytest.raises(CardError, match=f"'{scenario}' scenario"):
            mlperf.read(write(tmp_path, text), {})


def test_invalid_result() -> None:
    with pytest.raises(CardError) as exc:
        mlperf.read(INVALID, {})
    message = one_line(exc)
    assert "INVALID" in message and "not a valid MLPerf result" in message
    assert "Performance constraints satisfied, Early stopping satisfied: NO" in message


@pytest.mark.parametrize("select", [{"system": "x"}, {"benchmark": "x", "conc": "1"}])
def test_unknown_select_key(select: dict[str, str]) -> None:
    with pytest.raises(CardError) as exc:
        mlperf.read(SERVER, select)
    assert "the known ones are benchmark, scenario" in one_line(exc)


def test_select_values() -> None:
    assert mlperf.read(SERVER, {"benchmark": "llama2-70b-99", "scenario": "Server"}).model
    with pytest.raises(CardError, match="only the Server scenario"):
        mlperf.read(SERVER, {"scenario": "Offline"})
    with pytest.raises(CardError, match="not an LLM benchmark bench knows"):
        mlperf.read(SERVER, {"benchmark": "resnet50"})
    with pytest.raises(CardError, match="lies under 'llama2-70b-99'"):
        mlperf.read(SERVER, {"benchmark": "deepseek-r1"})


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        (INFERENCEX_DUMP, "InferenceX's database dump"),
        (VLLM_RESULT, "a vLLM benchmark result"),
        ({"accelerator_model_name": "x", "system_name": "y"}, "an MLPerf system description"),
        ({"a": 1}, "a JSON document"),
    ],
)
def test_another_publishers_file(tmp_path: Path, doc: object, said: str) -> None:
    text = json.dumps(doc, indent=1)
    assert not mlperf.looks_like(text)
    with pytest.raises(CardError) as exc:
        mlperf.read(write(tmp_path, text, "x.json"), {})
    assert f"this is {said}" in one_line(exc) and "not an MLPerf Inference log summary" in (
        one_line(exc)
    )


def test_not_utf8_empty_missing_and_too_large(tmp_path: Path) -> None:
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(SERVER.read_bytes().replace(b"SUT name", b"SUT n\xe9me"))
    with pytest.raises(CardError) as exc:
        mlperf.read(bad, {})
    assert "is not UTF-8 text" in one_line(exc)
    with pytest.raises(CardError, match="no 'MLPerf Results Summary' banner"):
        mlperf.read(write(tmp_path, ""), {})
    with pytest.raises(CardError, match="cannot read"):
        mlperf.read(tmp_path / "nothing.txt", {})
    big = tmp_path / "big.txt"
    big.write_bytes(SERVER.read_bytes() + b" " * (1 << 20))
    with pytest.raises(CardError, match="larger than"):
        mlperf.read(big, {})


@pytest.mark.parametrize(
    ("replace", "said"),
    [
        ({"Scenario": None}, "no 'Scenario' line"),
        ({"Mode": "Mode     : AccuracyOnly"}, "mode 'AccuracyOnly'"),
        ({"Result is": None}, "'Result is' is None"),
        ({"Completed tokens per second": None}, "not an LLM benchmark's server run"),
        ({"99.00 percentile first token": None}, "no '99.00 percentile first token"),
        ({"Completed samples per second": "Completed samples per second : 100.3"}, "two dec"),
        ({"Completed samples per second": "Completed samples per second : 1e2"}, "two dec"),
        ({"99.00 percentile time to output": "99.00 percentile time to output token (ns): 07"},
         "not an integer"),
        ({"99.00 percentile first token": "99.00 percentile first token latency (ns): "
          "2000000000000"}, "not a result bench can hold"),
        ({"ttft_latency": "ttft_latency (ns): 0"}, "set it above 0"),
        ({"target_qps": "target_qps : fast"}, "target_qps is 'fast', not a number"),
    ],
)  # fmt: skip
def test_malformed_summaries(tmp_path: Path, replace: dict[str, str | None], said: str) -> None:
    with pytest.raises(CardError) as exc:
        mlperf.read(write(tmp_path, edited(SERVER, replace)), {})
    assert said in one_line(exc)


def test_a_figure_given_twice_differently(tmp_path: Path) -> None:
    text = SERVER.read_text().replace(
        "Completed tokens per second                 : 29228.22",
        "Completed tokens per second                 : 29228.23",
    )
    with pytest.raises(CardError) as exc:
        mlperf.read(write(tmp_path, text), {})
    assert "given twice with different values" in one_line(exc)


def test_bad_system_file(tmp_path: Path) -> None:
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(CardError, match="not an MLPerf system description"):
        mlperf.read(SERVER, {}, listed)
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(CardError, match="not JSON"):
        mlperf.read(SERVER, {}, broken)


def test_looks_like() -> None:
    for path in (SERVER, L405B, OFFLINE, INVALID):
        assert mlperf.looks_like(path.read_bytes()[:4096].decode("utf-8", errors="replace"))
    for head in ("", "hello", json.dumps(INFERENCEX_DUMP), json.dumps(VLLM_RESULT)):
        assert not mlperf.looks_like(head)


# ----------------------------------------------------------------------- hostile input


def read_or_card_error(data: bytes, select: dict[str, str]) -> PublisherCard | None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mlperf_log_summary.txt"
        path.write_bytes(data)
        try:
            return mlperf.read(path, select)
        except CardError as exc:
            message = str(exc)
    assert message and "\n" not in message
    return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.binary(max_size=2000), st.text(max_size=2000).map(str.encode)))
def test_arbitrary_bytes_give_a_card_or_a_card_error(data: bytes) -> None:
    read_or_card_error(data, {})
    read_or_card_error(b"MLPerf Results Summary\nScenario : Server\n" + data, {})


SERVER_LINES = SERVER.read_text().splitlines()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.integers(0, len(SERVER_LINES) - 1),
            st.one_of(st.none(), st.text(max_size=60), st.sampled_from(SERVER_LINES)),
        ),
        max_size=6,
    )
)
def test_edited_summaries_give_a_card_or_a_card_error(
    edits: list[tuple[int, str | None]],
) -> None:
    lines: list[str | None] = list(SERVER_LINES)
    for index, line in edits:
        lines[index] = line
    text = "\n".join(x for x in lines if x is not None)
    card = read_or_card_error(text.encode(), {})
    if card is not None:  # whatever was read exports back to the file's own text
        for name, value in mlperf.export(card).items():
            assert any(
                line.split(":", 1)[0].split() == name.split()
                and line.split(":", 1)[1].strip() == value
                for line in text.splitlines()
                if ":" in line
            )
