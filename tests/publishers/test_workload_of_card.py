"""bench.publishers.workload: a publisher card's traffic as a bench workload, and as TOML that
bench.workload_spec.load_workload reads back to the same workload."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any

import pytest

from bench.errors import CardError
from bench.publishers import inferencex as ix
from bench.publishers import mlperf
from bench.publishers import vllm_dashboard as vd
from bench.publishers.model import PublishedConstraint, PublisherCard
from bench.publishers.workload import (
    workload_and_notes,
    workload_name,
    workload_of,
    workload_toml,
)
from bench.workload_spec import Arrivals, Lengths, Prefix, Prompts, Slo, Workload, load_workload

DATA = Path(__file__).resolve().parents[1] / "data" / "publishers"
IX_DUMP = DATA / "inferencex" / "benchmark_results.json"
VD = DATA / "vllm-dashboard"
SHAREGPT = VD / "serving_llama8B_tp1_sharegpt_qps_4.json"
RANDOM = VD / "serving_qwen3_8b_tp1_random_in1k_out2k_qps_10_concurrency_200.json"
RECORDS = VD / "vllm-dashboard-records.json"
ML = DATA / "mlperf"
SERVER = ML / "results/H200-SXM-141GBx8_TRT/llama2-70b-99/Server/performance/run_1"
SERVER_SUMMARY = SERVER / "mlperf_log_summary.txt"
SYSTEM = ML / "systems" / "H200-SXM-141GBx8_TRT.json"


def _ix(rid: str = "101") -> PublisherCard:
    return ix.read(IX_DUMP, {"id": rid})


def _mlperf() -> PublisherCard:
    return mlperf.read(SERVER_SUMMARY, {}, SYSTEM)


def _with(card: PublisherCard, **workload: Any) -> PublisherCard:
    return card.model_copy(update={"workload": card.workload.model_copy(update=workload)})


def _mlperf_with_lengths() -> PublisherCard:
    return _with(_mlperf(), input_tokens=1024, output_tokens=256)


def _refused(card: PublisherCard, *words: str) -> str:
    with pytest.raises(CardError) as caught:
        workload_of(card)
    line = caught.value.one_line()
    assert "\n" not in line and "\r" not in line, line
    assert card.point_id in line, line
    for word in words:
        assert word in line, line
    return line


def _round_trip(w: Workload, tmp_path: Path) -> Workload:
    path = tmp_path / f"{w.name}.toml"
    path.write_text(workload_toml(w), encoding="utf-8")
    return load_workload(path)


# --- InferenceX -----------------------------------------------------------------------------


def test_inferencex_row_is_a_closed_count_at_its_concurrency() -> None:
    card = _ix("101")
    w, notes = workload_and_notes(card, seed=7)
    assert (w.name, w.seed) == ("inferencex-101", 7)
    assert "inferencex" in w.description and "'101'" in w.description
    assert w.arrivals == Arrivals(
        kind="closed-count", concurrencies=(4,), requests_per_stream=10, warmups_per_stream=2
    )
    assert w.lengths == Lengths(
        input_tokens=1024, output_tokens=1024, range_ratio=0.8, semantics="sglang", ignore_eos=True
    )
    assert w.prompts == Prompts() and w.prefix == Prefix() and w.slo is None
    assert any("InferenceX's client rule" in n and "sglang" in n for n in notes)
    assert any("seed 7" in n for n in notes)
    assert workload_of(card, seed=7) == w


def test_inferencex_counts_come_from_num_prompts_and_warmups() -> None:
    w, notes = workload_and_notes(_with(_ix("101"), num_prompts=100, warmups=0))
    assert (w.arrivals.requests_per_stream, w.arrivals.warmups_per_stream) == (25, 0)
    assert not any("not the card's" in n for n in notes)
    # 42 prompts at C = 4 are not a whole number a stream: 11 a stream (44), said
    w, notes = workload_and_notes(_with(_ix("101"), num_prompts=42, warmups=None))
    assert (w.arrivals.requests_per_stream, w.arrivals.warmups_per_stream) == (11, 2)
    assert any("44 prompts" in n and "42" in n for n in notes)
    assert any("no warmups" in n for n in notes)


def test_inferencex_without_a_range_ratio_is_fixed_lengths() -> None:
    w, notes = workload_and_notes(_with(_ix("101"), range_ratio=None))
    assert (w.lengths.range_ratio, w.lengths.semantics) == (0.0, "vllm")
    assert any("fixed lengths" in n for n in notes)


def test_disaggregated_multinode_row_is_refused() -> None:
    card = _ix("106")
    line = _refused(card, "disaggregated", "not reproducible on one host")
    assert line.startswith("inferencex card '106': the point: ")


def test_a_multinode_card_is_refused_by_its_node_count() -> None:
    _refused(_ix("101").model_copy(update={"nodes": 2}), "2-node", "one host")


def test_closed_without_concurrency_is_refused() -> None:
    _refused(_with(_ix("101"), concurrency=None), "closed arrivals", "no concurrency")


# --- vLLM's dashboard -----------------------------------------------------------------------


def test_vllm_sharegpt_point_runs_the_shipped_sample() -> None:
    card = vd.read(SHAREGPT, {})
    w, notes = workload_and_notes(card)
    assert w.name == "vllm-dashboard-serving_llama8B_tp1_sharegpt_qps_4"
    assert w.arrivals == Arrivals(kind="rate", rates=(4.0,), process="poisson", requests=200)
    assert w.prompts == Prompts(source="sharegpt", path="sharegpt-sample")
    assert w.lengths == Lengths(ignore_eos=True)  # not said: on, and a note says so
    assert any("sharegpt-sample" in n and "ShareGPT file" in n and "seed" in n for n in notes)
    assert any("ignored EOS" in n for n in notes)


def test_vllm_random_point_caps_in_flight_and_keeps_lengths_fixed() -> None:
    card = vd.read(RANDOM, {})
    w, notes = workload_and_notes(card)
    assert w.arrivals.rates == (10.0,) and w.arrivals.max_in_flight == 200
    assert (w.arrivals.process, w.arrivals.requests) == ("poisson", 200)
    assert w.lengths == Lengths(
        input_tokens=1024, output_tokens=2048, range_ratio=0.0, semantics="vllm"
    )
    assert any("no range ratio" in n for n in notes)
    # a name past 64 characters is cut and ends with a hash of the whole
    assert len(w.name) <= 64 and w.name.startswith("vllm-dashboard-serving_qwen3_8b")
    other = card.model_copy(update={"point_id": card.point_id + "_x"})
    assert workload_name(other) != w.name and len(workload_name(other)) <= 64


def test_vllm_random_range_ratio_uses_vllms_rule() -> None:
    card = vd.read(RANDOM, {})
    extra = dict(card.extra)
    extra["note.range_ratio"] = "random_range_ratio 0.5 kept here, not as the card's range_ratio"
    w, notes = workload_and_notes(card.model_copy(update={"extra": extra}))
    assert (w.lengths.range_ratio, w.lengths.semantics) == (0.5, "vllm")
    assert any("current vLLM's rule" in n for n in notes)
    extra["note.range_ratio"] = "random_range_ratio 1.0 kept here"
    w, notes = workload_and_notes(card.model_copy(update={"extra": extra}))
    assert (w.lengths.range_ratio, w.lengths.semantics) == (0.0, "vllm")
    assert any("random_range_ratio 1" in n for n in notes)


def test_vllm_burst_point_is_rate_inf() -> None:
    card = vd.read(RECORDS, {"request_rate": "inf"})
    assert card.workload.arrivals == "burst"
    w = workload_of(card)
    assert len(w.arrivals.rates) == 1 and math.isinf(w.arrivals.rates[0])
    assert w.arrivals.requests == card.workload.num_prompts
    assert w.lengths.ignore_eos is False  # the card says the client left it off


def test_vllm_gamma_point_keeps_its_burstiness() -> None:
    card = _with(vd.read(RANDOM, {}), arrivals="gamma", burstiness=0.5, warmups=10)
    w, notes = workload_and_notes(card)
    assert (w.arrivals.process, w.arrivals.burstiness, w.arrivals.warmups) == ("gamma", 0.5, 10)
    assert any("warm-up" in n for n in notes)


def test_arrivals_the_spec_cannot_express_are_refused() -> None:
    card = vd.read(RANDOM, {})
    _refused(_with(card, arrivals="gamma", burstiness=5000.0), "gamma arrivals", "5000")
    _refused(_with(card, request_rate=None), "poisson arrivals", "no request rate")
    _refused(_with(card, request_rate=5e6), "request_rate", "past the spec")
    _refused(_with(card, num_prompts=None), "no num_prompts")
    _refused(_with(card, num_prompts=2_000_000), "request count", "past the spec")


def test_vllm_ramp_up_is_refused() -> None:
    card = vd.read(RANDOM, {}).model_copy(
        update={
            "not_reproducible": ("the ramp-up (linear from 1 to 10 req/s): a card has one rate",)
        }
    )
    _refused(card, "ramp-up", "one host")


def test_sharegpt_with_a_fixed_output_length_is_refused() -> None:
    _refused(_with(vd.read(SHAREGPT, {}), output_tokens=128), "sharegpt_output_len")


def test_a_random_dataset_without_lengths_is_refused() -> None:
    _refused(_with(vd.read(RANDOM, {}), input_tokens=None), "the lengths", "random dataset")


# --- MLPerf ---------------------------------------------------------------------------------


def test_mlperf_without_lengths_is_refused_for_its_dataset() -> None:
    card = _mlperf()
    assert card.workload.dataset == "open-orca" and card.workload.input_tokens is None
    _refused(card, "open-orca", "not available offline", "no lengths")


def test_mlperf_server_point_is_poisson_for_its_minimum_duration_with_its_slo() -> None:
    card = _mlperf_with_lengths()
    w, notes = workload_and_notes(card)
    assert w.name == "mlperf-NVIDIA-H200-SXM-141GBx8_TRT-llama2-70b-99-Server"
    rate, minimum = card.workload.request_rate, card.workload.min_duration_s
    assert (rate, minimum) == (101.0, 2400.0)
    assert w.arrivals == Arrivals(
        kind="rate", rates=(101.0,), process="poisson", requests=math.ceil(101.0 * 2400.0)
    )
    assert w.slo == Slo(ttft_p99_s=2.0, tpot_p99_s=0.2)
    assert w.lengths == Lengths(input_tokens=1024, output_tokens=256, range_ratio=0.0)
    assert any("open-orca" in n and "not available offline" in n for n in notes)
    assert any("2400 s" in n and "count, not a duration" in n for n in notes)


def test_mlperf_duration_rounds_up_and_num_prompts_is_a_floor() -> None:
    card = _with(_mlperf_with_lengths(), request_rate=0.3, min_duration_s=10.0)
    assert workload_of(card).arrivals.requests == 3
    card = _with(card, num_prompts=50)
    assert workload_of(card).arrivals.requests == 50
    _refused(_with(card, min_duration_s=None, num_prompts=None), "neither min_duration_s")
    _refused(_with(card, request_rate=1000.0, min_duration_s=2400.0), "past the spec")


def test_constraints_the_spec_cannot_bound_are_refused() -> None:
    card = _mlperf_with_lengths()
    odd = (PublishedConstraint(figure="ttft", percentile=97.5, limit_ms=2000.0),)
    _refused(card.model_copy(update={"constraints": odd}), "ttft constraint", "p97.5")
    other = (PublishedConstraint(figure="tpot", percentile=99, limit_ms=50.0, confidence=0.95),)
    w, notes = workload_and_notes(card.model_copy(update={"constraints": other}))
    assert w.slo == Slo(tpot_p99_s=0.05)
    assert any("0.95" in n for n in notes)


# --- TOML -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: _ix("101"),
        lambda: vd.read(RANDOM, {}),
        lambda: vd.read(RECORDS, {"request_rate": "inf"}),
        lambda: _with(vd.read(RANDOM, {}), arrivals="gamma", burstiness=0.25, warmups=3),
        _mlperf_with_lengths,
    ],
    ids=["inferencex", "vllm-random", "vllm-burst", "vllm-gamma", "mlperf"],
)
def test_toml_round_trip_is_equal(make: Any, tmp_path: Path) -> None:
    w = workload_of(make(), seed=3)
    loaded = _round_trip(w, tmp_path)
    if w.data_driven():  # loading fills in the data file's sha256, nothing else
        assert w.prompts.sha256 is None and loaded.prompts.sha256 is not None
        loaded = loaded.model_copy(update={"prompts": w.prompts})
    assert loaded == w


def test_toml_round_trip_of_a_sharegpt_workload_fills_only_the_sha256(tmp_path: Path) -> None:
    w = workload_of(vd.read(SHAREGPT, {}))
    loaded = _round_trip(w, tmp_path)
    assert loaded.prompts.sha256 is not None
    assert loaded.model_copy(update={"prompts": w.prompts}) == w
    assert _round_trip(loaded, tmp_path) == loaded  # sha256 written, read back


def test_toml_escapes_strings_and_writes_every_part(tmp_path: Path) -> None:
    w = Workload(
        name="x.y_z-1",
        description='quote " backslash \\ unicode é ✓ \U0001f600 and a \\u0041 [x] = 1',
        seed=2**63 - 1,
        arrivals=Arrivals(rates=(0.1, 1e-05, 3e5, math.inf), process="constant", requests=7),
        lengths=Lengths(input_tokens=300, output_tokens=20, range_ratio=0.25),
        prefix=Prefix(tokens=100, group_size=4),
        slo=Slo(e2el_p50_s=30.0),
    )
    text = workload_toml(w)
    doc = tomllib.loads(text)
    assert doc["description"] == w.description and doc["prefix"] == {"tokens": 100, "group_size": 4}
    assert _round_trip(w, tmp_path) == w
    empty_slo = w.model_copy(update={"slo": Slo(), "prefix": Prefix()})
    assert "[slo]" in workload_toml(empty_slo) and "[prefix]" not in workload_toml(empty_slo)
    assert _round_trip(empty_slo, tmp_path) == empty_slo


def test_toml_escapes_control_characters_and_refuses_a_lone_surrogate() -> None:
    # model_copy does not validate: text the spec refuses, written as TOML still reads back
    w = Workload(name="x", arrivals=Arrivals(rates=(1.0,)))
    odd = "tab\t newline\n cr\r bell\x07 del\x7f nul\x00 end"
    text = workload_toml(w.model_copy(update={"description": odd}))
    assert tomllib.loads(text)["description"] == odd
    assert all(ch not in text.split("\n")[1] for ch in "\t\r\x07\x7f\x00")
    with pytest.raises(ValueError, match="surrogate"):
        workload_toml(w.model_copy(update={"description": "bad \ud800"}))


def test_a_trace_workload_round_trips(tmp_path: Path) -> None:
    w = load_workload("mooncake-sample")
    assert _round_trip(w, tmp_path) == w


def test_odd_point_ids_become_names_the_spec_takes() -> None:
    card = _ix("101").model_copy(update={"point_id": "../é x\n/y"})
    w = workload_of(card)
    assert w.name == "inferencex-..-x-y"
    assert all(c.isascii() and (c.isalnum() or c in "._-") for c in w.name)
    assert "\\n" in w.description and "\n" not in w.description
