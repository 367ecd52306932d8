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
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.errors import UsageError
from bench.verdict import aiperf_saved
from tests.support import saved_runs

DATA = pathlib.Path(__file__).parent.parent / "data" / "aiperf"
RATE4 = DATA / "rate4" / "profile_export_aiperf.json"
CONC4 = DATA / "conc4" / "profile_export_aiperf.json"


def _export(path: pathlib.Path = RATE4) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return value


def _write(tmp: pathlib.Path, data: Any, name: str = "profile_export_aiperf.json") -> pathlib.Path:
    return saved_runs.write_json(tmp, data, name)


def test_the_fixture_folders_version_identities_and_server_seconds() -> None:
    """What is AIPerf's own in the fixture run (that it is one run of two points, as the other
    tool's is: tests/verdict/test_saved_points.py)."""
    run = aiperf_saved.load(DATA)
    assert run.metadata["aiperf_version"] == "0.13.0"
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


def test_recognises_aiperf_only() -> None:
    assert aiperf_saved.recognises(RATE4) and aiperf_saved.recognises(DATA / "conc4")


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
    assert message in saved_runs.one_line_error(aiperf_saved, _write(tmp_path, data))


def test_an_export_over_the_bound_is_refused(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(aiperf_saved, "MAX_BYTES", 1000)
    with pytest.raises(UsageError, match="over the 1000 an AIPerf export may have"):
        aiperf_saved.load(RATE4)


_KEYS = sorted(_export().keys())


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    drop=st.lists(st.sampled_from(_KEYS), max_size=4),
    put=st.dictionaries(
        st.sampled_from([*_KEYS, "error_request_count"]), saved_runs.JSON_VALUES, max_size=4
    ),
    phase=st.dictionaries(
        st.sampled_from(["type", "rate", "concurrency", "kind", "name", "rate_ramp"]),
        saved_runs.JSON_VALUES,
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
    saved_runs.figures_or_one_line_error(aiperf_saved, _write(tmp_path, data, "h.json"))
