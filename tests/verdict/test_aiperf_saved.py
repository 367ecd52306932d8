"""`bench compare` on runs exported by AIPerf (bench.verdict.aiperf_saved).

The fixture tests/data/aiperf/ is AIPerf 0.13.0's own output against the twin (its README has
the commands): rate4/ and rate4-seed1/ are two `--request-rate 4` runs (Poisson), conc4/ one
`--concurrency 4` run, 40 requests each, `--use-server-token-count`, streaming chat.
"""

from __future__ import annotations

import copy
import json
import math
import pathlib
import shutil
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.errors import UsageError
from bench.verdict import aiperf_saved
from bench.verdict.compare import Policy, compare

DATA = pathlib.Path(__file__).parent.parent / "data" / "aiperf"
RATE4 = DATA / "rate4" / "profile_export_aiperf.json"
CONC4 = DATA / "conc4" / "profile_export_aiperf.json"
VLLM_SAVED = (
    pathlib.Path(__file__).parent.parent
    / "data/publishers/vllm-dashboard/serving_llama8B_tp1_sharegpt_qps_4.json"
)
BENCH_RESULTS = pathlib.Path(__file__).parent.parent / "data/noise_corpus/vllm-cpu/runs/03"


def _export(path: pathlib.Path = RATE4) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return value


def _write(tmp: pathlib.Path, data: Any, name: str = "profile_export_aiperf.json") -> pathlib.Path:
    path = tmp / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_the_fixture_folder_is_one_run_of_two_points() -> None:
    assert aiperf_saved.recognises(DATA)
    run = aiperf_saved.load(DATA)
    assert set(run.cells) == {("workload", "4/s", 0), ("workload", "closed", 4)}
    assert run.contexts == ("4/s", "closed") and run.concurrencies == (0, 4)
    assert run.settings == {"model": "tiny", "api": "chat"}
    assert run.trust == "unsigned" and run.speed_factor == 1.0
    assert "exported by AIPerf" in run.provenance
    assert run.metadata["aiperf_version"] == "0.13.0"
    assert run.metadata["records"] == "3"
    assert len(run.identities) == 3
    # benchmark_duration.avg in sec: 7.804994048 + 8.007123456 + 1.082962176
    assert run.server_s == pytest.approx((16.89507968,))


def test_a_rate_run_two_files_are_its_trials() -> None:
    cell = aiperf_saved.load(DATA).cells[("workload", "4/s", 0)]
    assert cell.status == "valid" and cell.phase == "workload"
    # rate4, then rate4-seed1 (sorted paths); each value the export's, ms -> s:
    # output_token_throughput.avg (tokens/sec, taken as is)
    assert cell.trials["wl_output_tok_s"] == pytest.approx((77.21246904360441, 76.17570316430546))
    # time_to_first_token.p50 12.3171715 ms / 12.6241685 ms; .p99 30.58441034 / 36.33402519 ms
    assert cell.trials["wl_ttft_p50_s"] == pytest.approx((0.0123171715, 0.0126241685))
    assert cell.trials["wl_ttft_p99_s"] == pytest.approx((0.03058441034, 0.03633402519))
    # inter_token_latency.p50 4.27066097 / 4.27809707 ms; .p99 5.32954329 / 5.62113279 ms
    assert cell.trials["wl_tpot_p50_s"] == pytest.approx((0.00427066097, 0.00427809707))
    assert cell.trials["wl_tpot_p99_s"] == pytest.approx((0.00532954329, 0.00562113279))
    assert cell.rse == {}  # several trials: their spread, not one trial's


def test_a_concurrency_run_is_a_closed_point_with_its_own_noise() -> None:
    cell = aiperf_saved.load(CONC4).cells[("workload", "closed", 4)]
    assert cell.status == "valid"
    assert cell.trials["wl_output_tok_s"] == pytest.approx((589.2593928216526,))
    assert cell.trials["wl_ttft_p50_s"] == pytest.approx((0.027117761,))  # 27.117761 ms
    assert cell.trials["wl_ttft_p99_s"] == pytest.approx((0.04020807984,))  # 40.20807984 ms
    assert cell.trials["wl_tpot_p50_s"] == pytest.approx((0.00503288953,))  # 5.03288953 ms
    assert cell.trials["wl_tpot_p99_s"] == pytest.approx((0.00613029376,))  # 6.13029376 ms
    # TTFT p50's from count 40, p50 27.117761, p90 36.1189265 ms:
    # 1.2533 * (36.1189265 - 27.117761) / 1.2816 / sqrt(40) / 27.117761
    expected = 1.2533 * (36.1189265 - 27.117761) / 1.2816 / math.sqrt(40) / 27.117761
    assert cell.rse["wl_ttft_p50_s"] == pytest.approx(expected)
    assert "wl_ttft_p99_s" not in cell.rse  # no interval for a p99 in the export
    # output tok/s's from ITL: (p90 6.02202976 - p50 5.03288953) / 1.2816 / avg 4.98026742
    # / sqrt(40)
    tok = (6.02202976 - 5.032889533333333) / 1.2816 / 4.980267416666666 / math.sqrt(40)
    assert cell.rse["wl_output_tok_s"] == pytest.approx(tok)


def test_the_same_run_twice_changes_nothing() -> None:
    run = aiperf_saved.load(DATA)
    c = compare(run, aiperf_saved.load(DATA), Policy())
    assert {x.key for x in c.cells} == set(run.cells)
    assert not [x for x in c.cells if x.flagged]


def test_recognises_aiperf_only() -> None:
    assert aiperf_saved.recognises(RATE4) and aiperf_saved.recognises(DATA / "conc4")
    assert not aiperf_saved.recognises(VLLM_SAVED)  # vllm bench serve --save-result
    assert not aiperf_saved.recognises(BENCH_RESULTS)  # a bench run directory
    assert not aiperf_saved.recognises(BENCH_RESULTS / "results.json")
    assert not aiperf_saved.recognises(DATA / "README.md")
    assert not aiperf_saved.recognises(DATA / "nothing-here.json")


def test_a_folder_passes_over_other_json(tmp_path: pathlib.Path) -> None:
    shutil.copy(CONC4, tmp_path / "profile_export_aiperf.json")
    (tmp_path / "inputs.json").write_text('{"data": []}', encoding="utf-8")
    assert list(aiperf_saved.load(tmp_path).cells) == [("workload", "closed", 4)]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "inputs.json").write_text("{}", encoding="utf-8")
    assert not aiperf_saved.recognises(empty)
    with pytest.raises(UsageError, match="holds no AIPerf profile exports"):
        aiperf_saved.load(empty)


def _phase(data: dict[str, Any]) -> dict[str, Any]:
    phase: dict[str, Any] = data["input_config"]["phases"][0]
    return phase


def test_failed_requests_make_an_invalid_cell(tmp_path: pathlib.Path) -> None:
    data = _export()
    data["error_summary"] = [{"error_details": {"code": 500}, "count": 3}]
    cell = aiperf_saved.load(_write(tmp_path, data)).cells[("workload", "4/s", 0)]
    assert cell.status == "invalid" and "3 failed requests" in (cell.detail or "")
    assert cell.trials == {}
    data["error_summary"] = []
    data["was_cancelled"] = True
    cell = aiperf_saved.load(_write(tmp_path, data)).cells[("workload", "4/s", 0)]
    assert cell.status == "interrupted"


def test_client_token_counts_keep_ttft_only(tmp_path: pathlib.Path) -> None:
    data = _export()
    del data["input_config"]["endpoint"]["use_server_token_count"]
    cell = aiperf_saved.load(_write(tmp_path, data)).cells[("workload", "4/s", 0)]
    assert set(cell.trials) == {"wl_ttft_p50_s", "wl_ttft_p99_s"}
    data["input_config"]["endpoint"]["use_server_token_count"] = True
    data["input_config"]["endpoint"]["per_chunk_usage"] = True
    cell = aiperf_saved.load(_write(tmp_path, data)).cells[("workload", "4/s", 0)]
    assert "wl_tpot_p50_s" not in cell.trials and "wl_output_tok_s" in cell.trials


def test_units_are_read_not_assumed(tmp_path: pathlib.Path) -> None:
    data = _export()
    data["time_to_first_token"] = {"unit": "sec", "p50": 0.5, "p99": 2.0, "count": 40}
    data["inter_token_latency"]["unit"] = "ns"
    data["inter_token_latency"]["p50"] = 4_000_000.0
    cell = aiperf_saved.load(_write(tmp_path, data)).cells[("workload", "4/s", 0)]
    assert cell.trials["wl_ttft_p50_s"] == (0.5,) and cell.trials["wl_ttft_p99_s"] == (2.0,)
    assert cell.trials["wl_tpot_p50_s"] == pytest.approx((0.004,))


def test_fixed_schedule_is_a_trace_point(tmp_path: pathlib.Path) -> None:
    data = _export()
    data["input_config"]["phases"] = [
        {"name": "profiling", "kind": "profiling", "type": "fixed_schedule", "auto_offset": True}
    ]
    assert list(aiperf_saved.load(_write(tmp_path, data)).cells) == [("workload", "trace", 0)]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: _phase(d).update(concurrency=8), "rate 4/s capped at concurrency 8"),
        (lambda d: _phase(d).update(rate_ramp={"duration": 5}), "has rate_ramp"),
        (lambda d: _phase(d).update(type="user_centric"), "phase type 'user_centric'"),
        (lambda d: _phase(d).update(rate=-1), "rate is -1, not a rate"),
        (lambda d: _phase(d).update(rate="fast"), "rate is 'fast', not a number"),
        (lambda d: d["input_config"].update(phases=[]), "0 profiling phases"),
        (lambda d: d["input_config"]["endpoint"].update(type="embeddings"), "'embeddings'"),
        (lambda d: d["time_to_first_token"].update(p50="x"), "time_to_first_token.p50 is 'x'"),
        (lambda d: d["inter_token_latency"].update(unit="min"), "not a time unit"),
        (lambda d: d.update(output_token_throughput=[1]), "output_token_throughput is [1]"),
        (lambda d: d.pop("input_config"), "not an AIPerf profile export (no input_config)"),
    ],
)
def test_bad_exports_are_one_line_errors(tmp_path: pathlib.Path, change: Any, message: str) -> None:
    data = copy.deepcopy(_export())
    change(data)
    path = _write(tmp_path, data)
    with pytest.raises(UsageError) as err:
        aiperf_saved.load(path)
    assert message in str(err.value) and str(path) in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"{", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b"[" * 100_000, "not JSON"),
        (b'{"n": 1' + b"0" * 5000 + b"}", "not JSON"),
    ],
)
def test_bad_bytes_are_one_line_errors(tmp_path: pathlib.Path, raw: bytes, message: str) -> None:
    path = tmp_path / "profile_export_aiperf.json"
    path.write_bytes(raw)
    with pytest.raises(UsageError, match=message):
        aiperf_saved.load(path)


def test_an_export_over_the_bound_is_refused(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aiperf_saved, "MAX_BYTES", 1000)
    with pytest.raises(UsageError, match="over the 1000 an AIPerf export may have"):
        aiperf_saved.load(RATE4)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
_KEYS = sorted(_export().keys())


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    drop=st.lists(st.sampled_from(_KEYS), max_size=4),
    put=st.dictionaries(st.sampled_from([*_KEYS, "error_request_count"]), _json, max_size=4),
    phase=st.dictionaries(
        st.sampled_from(["type", "rate", "concurrency", "kind", "name", "rate_ramp"]),
        _json,
        max_size=3,
    ),
)
def test_hostile_exports_are_figures_or_one_line_errors(
    tmp_path: pathlib.Path, drop: list[str], put: dict[str, Any], phase: dict[str, Any]
) -> None:
    data = copy.deepcopy(_export())
    _phase(data).update(phase)
    for k in drop:
        data.pop(k, None)
    data.update(put)
    _check(_write(tmp_path, data, "h.json"))


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.binary(max_size=200) | _json.map(lambda v: json.dumps(v).encode()))
def test_hostile_bytes_are_figures_or_one_line_errors(tmp_path: pathlib.Path, raw: bytes) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(raw)
    _check(path)


def _check(path: pathlib.Path) -> None:
    aiperf_saved.recognises(path)
    try:
        run = aiperf_saved.load(path)
    except UsageError as exc:
        message = str(exc)
    else:
        assert all(c.phase == "workload" for c in run.cells.values())
        return
    assert message and "\n" not in message


def test_bench_compare_reads_two_aiperf_runs_as_a_user_gives_them(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench.cli import main

    code = main(["compare", str(DATA / "rate4"), str(DATA / "rate4-seed1")])
    out = capsys.readouterr().out
    assert code == 9  # one run a side: raw Δ only, as for any two single runs
    assert "| 4/s |" in out and "CANNOT TELL NOISE FROM CHANGE (ONE TRIAL A SIDE)" in out
