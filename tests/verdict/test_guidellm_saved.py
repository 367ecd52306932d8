"""`bench compare` on runs saved by GuideLLM (bench.verdict.guidellm_saved).

The fixture tests/data/guidellm/ is GuideLLM 0.8.1's own output against the twin (its README
has the commands): rate4/ and rate4-seed1/ are two Poisson 4 requests/s runs, conc4/ one
`concurrent` run at 4 streams, 20 requests each, 64-token prompts, 16 output tokens
(ignore_eos, GuideLLM's synthetic data), streaming chat. rate4/ keeps every request's data;
the other two were run with `sample_size=0`, which keeps each request's timings and counts.
"""

from __future__ import annotations

import copy
import json
import math
import pathlib
import shutil
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.errors import UsageError
from bench.verdict import aiperf_saved, guidellm_saved, run_source
from bench.verdict.cells import median_rse
from tests.support import saved_runs

DATA = pathlib.Path(__file__).parent.parent / "data" / "guidellm"
RATE4 = DATA / "rate4" / "benchmarks.json"
SEED1 = DATA / "rate4-seed1" / "benchmarks.json"
CONC4 = DATA / "conc4" / "benchmarks.json"
AIPERF = pathlib.Path(__file__).parent.parent / "data" / "aiperf"


def _report(path: pathlib.Path = CONC4) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return value


def _bench(data: dict[str, Any]) -> dict[str, Any]:
    b: dict[str, Any] = data["benchmarks"][0]
    return b


def _write(tmp: pathlib.Path, data: Any, name: str = "benchmarks.json") -> pathlib.Path:
    return saved_runs.write_json(tmp, data, name)


def _requests(path: pathlib.Path) -> list[dict[str, Any]]:
    reqs: list[dict[str, Any]] = _bench(_report(path))["requests"]["successful"]
    return reqs


def _order_statistic(values: list[float], p: float) -> float:
    """GuideLLM's percentile of equally weighted values (statistics.py `Percentiles.from_pdf`):
    the first sorted value whose running share, summed in floats, reaches p."""
    share = 0.0
    ordered = sorted(values)
    for v in ordered:
        share += 1.0 / len(ordered)
        if share >= p:
            return v
    return ordered[-1]


def test_the_fixture_folders_version_identities_and_server_seconds() -> None:
    """What is GuideLLM's own in the fixture run (that it is one run of two points, as the other
    tool's is: tests/verdict/test_saved_points.py)."""
    run = guidellm_saved.load(DATA)
    assert run.metadata["guidellm_version"] == "0.8.1"
    assert run.metadata["arrivals"] == "closed loop, 4 in flight; poisson at 4 requests/s"
    # each file's bytes, and each benchmark's config.id_
    assert len(run.identities) == 6
    # server_s: each benchmark's window from its scheduler_metrics, summed
    windows = [
        _bench(_report(p))["scheduler_metrics"]["measure_end_time"]
        - _bench(_report(p))["scheduler_metrics"]["measure_start_time"]
        for p in (CONC4, RATE4, SEED1)
    ]
    assert run.server_s == pytest.approx((math.fsum(windows),))
    assert run.server_s[0] == pytest.approx(13.4863, abs=1e-4)  # 0.572 + 7.803 + 5.112 s


def test_figures_are_the_requests_own() -> None:
    """rate4's figures computed again from its 20 requests' timings and token counts."""
    reqs = _requests(RATE4)
    assert len(reqs) == 20
    timings = [r["info"]["timings"] for r in reqs]
    ttft_ms = [1000 * (t["first_token_iteration"] - t["request_start"]) for t in timings]
    tokens = [r["output_metrics"]["total_tokens"] for r in reqs]
    assert set(tokens) == {16}  # ignore_eos: every request 16 tokens, the server's count
    tpot_ms = [
        1000 * (t["last_token_iteration"] - t["first_token_iteration"]) / (n - 1)
        for t, n in zip(timings, tokens, strict=True)
    ]
    # output tok/s: 320 tokens over first request start .. last request end (7.8026 s)
    span = max(t["request_end"] for t in timings) - min(t["request_start"] for t in timings)
    cell = guidellm_saved.load(RATE4).cells[("workload", "4/s", 0)]
    assert cell.status == "valid"
    assert cell.trials["wl_output_tok_s"] == pytest.approx((sum(tokens) / span,), rel=1e-9)
    assert cell.trials["wl_output_tok_s"] == pytest.approx((41.0121,), abs=1e-4)
    # TTFT p50 is the 11th smallest of 20 (12.4311 ms; ours would interpolate 10th and 11th)
    assert cell.trials["wl_ttft_p50_s"] == pytest.approx((_order_statistic(ttft_ms, 0.5) / 1000,))
    assert cell.trials["wl_ttft_p50_s"] == pytest.approx((0.0124311,), abs=1e-7)
    assert cell.trials["wl_ttft_p99_s"] == pytest.approx((max(ttft_ms) / 1000,))  # 13.0682 ms
    assert cell.trials["wl_tpot_p50_s"] == pytest.approx((_order_statistic(tpot_ms, 0.5) / 1000,))
    assert cell.trials["wl_tpot_p99_s"] == pytest.approx((max(tpot_ms) / 1000,))


def test_sampled_out_requests_keep_their_timings() -> None:
    """conc4 was run with sample_size=0: each request's timings and counts are still there,
    and its figures are theirs too."""
    reqs = _requests(CONC4)
    assert len(reqs) == 20 and all(r["output"] is None for r in reqs)
    timings = [r["info"]["timings"] for r in reqs]
    ttft_ms = [1000 * (t["first_token_iteration"] - t["request_start"]) for t in timings]
    span = max(t["request_end"] for t in timings) - min(t["request_start"] for t in timings)
    tokens = sum(r["output_metrics"]["total_tokens"] for r in reqs)
    cell = guidellm_saved.load(CONC4).cells[("workload", "closed", 4)]
    assert cell.trials["wl_output_tok_s"] == pytest.approx((tokens / span,), rel=1e-9)
    assert cell.trials["wl_ttft_p50_s"] == pytest.approx((_order_statistic(ttft_ms, 0.5) / 1000,))


def test_a_single_benchmark_has_its_own_noise() -> None:
    cell = guidellm_saved.load(CONC4).cells[("workload", "closed", 4)]
    ttft = _bench(_report(CONC4))["metrics"]["time_to_first_token_ms"]["successful"]
    p50, p90 = ttft["percentiles"]["p50"], ttft["percentiles"]["p90"]
    assert cell.rse["wl_ttft_p50_s"] == pytest.approx(median_rse(20, p50, p90))
    # 1.2533 * (p90 - p50) / 1.2816 / sqrt(20) / p50, n the completed requests (not the
    # 300 tokens the inter-token summary counts)
    assert cell.rse["wl_ttft_p50_s"] == pytest.approx(
        1.2533 * (p90 - p50) / 1.2816 / math.sqrt(20) / p50
    )
    itl = _bench(_report(CONC4))["metrics"]["inter_token_latency_ms"]["successful"]
    assert itl["count"] == 300
    tok = (itl["percentiles"]["p90"] - itl["percentiles"]["p50"]) / 1.2816 / itl["mean"]
    assert cell.rse["wl_output_tok_s"] == pytest.approx(tok / math.sqrt(20))
    assert "wl_ttft_p99_s" not in cell.rse


def test_two_runs_of_one_point_are_its_trials() -> None:
    cell = guidellm_saved.load(DATA).cells[("workload", "4/s", 0)]
    # rate4, then rate4-seed1 (sorted paths); each its output_tokens_per_second mean
    assert cell.trials["wl_output_tok_s"] == pytest.approx((41.0121, 62.6021), abs=1e-4)
    assert cell.trials["wl_ttft_p50_s"] == pytest.approx((0.0124311, 0.0124958), abs=1e-7)
    assert cell.rse == {}  # several trials: their spread, not one trial's


def test_recognises_guidellm_only() -> None:
    assert guidellm_saved.recognises(RATE4) and guidellm_saved.recognises(DATA / "conc4")
    assert not guidellm_saved.recognises(AIPERF)  # AIPerf's exports
    assert not guidellm_saved.recognises(AIPERF / "rate4" / "profile_export_aiperf.json")
    assert not aiperf_saved.recognises(RATE4) and not aiperf_saved.recognises(DATA)


def test_run_source_reads_it_as_a_run() -> None:
    run = run_source.load_run(DATA / "conc4")
    assert run.metadata["source"] == "GuideLLM benchmarks.json"
    assert list(run.cells) == [("workload", "closed", 4)]


def test_one_benchmark_twice_in_a_folder_is_refused(tmp_path: pathlib.Path) -> None:
    shutil.copy(CONC4, tmp_path / "benchmarks.json")
    again = _report()
    again["metadata"]["platform"] = "elsewhere"  # other bytes, the same benchmark
    (tmp_path / "copy").mkdir()
    _write(tmp_path / "copy", again)
    with pytest.raises(UsageError, match="twice: one benchmark is one trial"):
        guidellm_saved.load(tmp_path)


def test_several_benchmarks_of_one_file_are_points(tmp_path: pathlib.Path) -> None:
    data = _report()
    sync = copy.deepcopy(_bench(data))
    sync["config"]["id_"] = "another"
    sync["config"]["strategy"] = {"type_": "synchronous", "worker_count": 1}
    burst = copy.deepcopy(sync)
    burst["config"]["id_"] = "a third"
    burst["config"]["strategy"] = {"type_": "throughput", "max_concurrency": 10240}
    data["benchmarks"] += [sync, burst]
    run = guidellm_saved.load(_write(tmp_path, data))
    assert set(run.cells) == {
        ("workload", "closed", 4),
        ("workload", "closed", 1),
        ("workload", "inf/s", 0),
    }
    burst["config"]["profile"]["max_concurrency"] = 8  # a capped burst is a closed loop
    data["benchmarks"] = [burst]
    assert list(guidellm_saved.load(_write(tmp_path, data)).cells) == [("workload", "closed", 8)]
    burst["config"]["strategy"] = {"type_": "trace", "time_scale": 1.0}
    burst["config"]["profile"]["max_concurrency"] = None
    assert list(guidellm_saved.load(_write(tmp_path, data)).cells) == [("workload", "trace", 0)]


def test_failed_requests_make_an_invalid_cell(tmp_path: pathlib.Path) -> None:
    data = _report()
    _bench(data)["metrics"]["request_totals"]["errored"] = 3
    cell = guidellm_saved.load(_write(tmp_path, data)).cells[("workload", "closed", 4)]
    assert cell.status == "invalid" and "3 failed requests" in (cell.detail or "")
    assert cell.trials == {}
    _bench(data)["metrics"]["request_totals"].update(errored=0, successful=0)
    cell = guidellm_saved.load(_write(tmp_path, data)).cells[("workload", "closed", 4)]
    assert cell.status == "failed"


def test_what_is_taken_depends_on_how_it_was_measured(tmp_path: pathlib.Path) -> None:
    data = _report()
    key = ("workload", "closed", 4)
    counts = _bench(data)["metrics"]["output_token_count"]["successful"]
    counts["min"] = 12.0  # lengths differ: its ITL percentiles are per token, not per request
    cell = guidellm_saved.load(_write(tmp_path, data)).cells[key]
    assert set(cell.trials) == {"wl_output_tok_s", "wl_ttft_p50_s", "wl_ttft_p99_s"}
    assert "wl_output_tok_s" not in cell.rse  # its noise came from the TPOT spread
    counts["min"] = 16.0
    # a request without the server's usage: its counts are stream iterations
    _bench(data)["requests"]["successful"][3]["output_metrics"]["total_tokens"] = None
    cell = guidellm_saved.load(_write(tmp_path, data)).cells[key]
    assert set(cell.trials) == {"wl_ttft_p50_s", "wl_ttft_p99_s"}
    _bench(data)["requests"]["successful"][3]["output_metrics"]["total_tokens"] = 16
    _bench(data)["config"]["backend"]["stream"] = False  # no first token to time
    cell = guidellm_saved.load(_write(tmp_path, data)).cells[key]
    assert set(cell.trials) == {"wl_output_tok_s"}


def _strategy(d: dict[str, Any]) -> dict[str, Any]:
    s: dict[str, Any] = _bench(d)["config"]["strategy"]
    return s


def _rate(d: dict[str, Any], **change: Any) -> None:
    _bench(d)["config"]["strategy"] = {"type_": "poisson", "rate": 4.0, **change}


def _capped_rate(d: dict[str, Any]) -> None:
    _rate(d)
    _bench(d)["config"]["profile"]["max_concurrency"] = 8


def _ttft(d: dict[str, Any]) -> dict[str, Any]:
    p: dict[str, Any] = _bench(d)["metrics"]["time_to_first_token_ms"]["successful"]
    return p["percentiles"]  # type: ignore[no-any-return]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_capped_rate, "rate 4/s capped at concurrency 8"),
        (lambda d: _strategy(d).update(rampup_duration=5.0), "has rampup_duration 5.0"),
        (lambda d: _strategy(d).update(type_="goodput"), "strategy type_ 'goodput'"),
        (lambda d: _strategy(d).update(streams=0), "streams is 0"),
        (lambda d: _rate(d, rate=-1), "rate is -1, not a number"),
        (lambda d: _rate(d, rate="fast"), "rate is 'fast', not a number"),
        (lambda d: _rate(d, rate=float("nan")), "rate is nan, not a number"),
        (lambda d: _ttft(d).update(p50=float("inf")), "percentiles.p50 is inf"),
        (lambda d: _ttft(d).update(p99=-2.0), "percentiles.p99 is -2.0"),
        (lambda d: _ttft(d).update(p90="x"), "percentiles.p90 is 'x'"),
        (
            lambda d: _bench(d)["metrics"]["output_tokens_per_second"]["successful"].update(
                mean=1e300
            ),
            "output_tokens_per_second.successful.mean is 1e+300",
        ),
        (
            lambda d: _bench(d)["metrics"]["request_totals"].update(errored=1.5),
            "request_totals.errored is 1.5, not a count",
        ),
        (
            lambda d: _bench(d)["config"]["backend"].update(request_format="/v1/embeddings"),
            "'/v1/embeddings'",
        ),
        (lambda d: _bench(d)["config"]["backend"].update(kind="vllm_python"), "'vllm_python'"),
        (lambda d: _bench(d).update(metrics=[1]), "metrics is [1], not an object"),
        (lambda d: d.update(benchmarks={}), "benchmarks is {}, not a list"),
        (lambda d: d.update(metadata={}), "not a GuideLLM report"),
    ],
)
def test_bad_reports_are_one_line_errors(tmp_path: pathlib.Path, change: Any, message: str) -> None:
    data = copy.deepcopy(_report())
    change(data)
    assert message in saved_runs.one_line_error(guidellm_saved, _write(tmp_path, data))


def test_a_report_over_the_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(guidellm_saved, "MAX_BYTES", 1000)
    with pytest.raises(UsageError, match="larger than 1,000 bytes, refused unread"):
        guidellm_saved.load(CONC4)


_SMALL = _report()
_bench(_SMALL)["requests"]["successful"] = _bench(_SMALL)["requests"]["successful"][:2]
_BENCH_KEYS = sorted(_bench(_SMALL).keys())
_METRICS = sorted(
    [
        "request_totals",
        "time_to_first_token_ms",
        "inter_token_latency_ms",
        "output_tokens_per_second",
        "output_token_count",
    ]
)


@settings(
    max_examples=150,
    deadline=timedelta(seconds=5),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    drop=st.lists(st.sampled_from(_BENCH_KEYS), max_size=3),
    put=st.dictionaries(st.sampled_from(_BENCH_KEYS), saved_runs.JSON_VALUES, max_size=3),
    metrics=st.dictionaries(st.sampled_from(_METRICS), saved_runs.JSON_VALUES, max_size=3),
    strategy=st.dictionaries(
        st.sampled_from(["type_", "rate", "streams", "rampup_duration", "max_concurrency"]),
        saved_runs.JSON_VALUES,
        max_size=3,
    ),
    top=st.dictionaries(
        st.sampled_from(["metadata", "benchmarks", "config"]), saved_runs.JSON_VALUES, max_size=1
    ),
)
def test_hostile_reports_are_figures_or_one_line_errors(
    tmp_path: pathlib.Path,
    drop: list[str],
    put: dict[str, Any],
    metrics: dict[str, Any],
    strategy: dict[str, Any],
    top: dict[str, Any],
) -> None:
    data = copy.deepcopy(_SMALL)
    b = _bench(data)
    b["config"]["strategy"].update(strategy)
    b["metrics"].update(metrics)
    for k in drop:
        b.pop(k, None)
    b.update(put)
    data.update(top)
    saved_runs.figures_or_one_line_error(guidellm_saved, _write(tmp_path, data, "h.json"))


def test_bench_compare_judges_an_aiperf_run_against_a_guidellm_run(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from bench.cli import main

    code = main(["compare", str(AIPERF), str(DATA)])
    out = capsys.readouterr().out
    # 4/s: two trials a side, not resolved; closed 4: one a side, raw Δ
    assert code == 11
    assert "| 4/s | - |" in out and "| closed | 4 |" in out
    assert "exported by AIPerf" in out and "written by GuideLLM" in out
