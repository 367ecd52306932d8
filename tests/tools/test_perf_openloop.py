"""The open-loop part of `make perf`: its workload, figures, ratios, targets and table, on
figures written by hand (no server, no client)."""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from bench.workload_spec import Workload
from tools.perf import openloop, report
from tools.perf.streamer import prompt_words

TIMES = "\N{MULTIPLICATION SIGN}"
WINDOW = {
    "window_s": 18.0,
    "tokens_per_s": 12_800.0,
    "tokens_per_cpu_s": 64_000.0,
    "chunks_per_cpu_s": 64_000.0,
    "client_core_share": 0.2,
    "server_core_share": 0.15,
}


def _point(p99: float = 0.0002) -> dict[str, Any]:
    """results.json's point, as `bench run --workload` writes it (the fields read)."""
    return {
        "status": "valid",
        "requests": 1000,
        "completed": 998,
        "achieved_rate": 48.5,
        "sent_rate": 49.9,
        "output_tokens": 127_744,
        "lateness": {"n": 1000, "p50": 1e-6, "p99": p99, "max": 0.002},
    }


def _ours(tokens_per_cpu_s: float, p99: float | None) -> dict[str, Any]:
    point = _point() if p99 is None else _point(p99)
    if p99 is None:
        point["lateness"] = None
    return openloop.ours_figures(point, WINDOW | {"tokens_per_cpu_s": tokens_per_cpu_s}, 128_000)


def _theirs(tokens_per_cpu_s: float | None) -> dict[str, Any]:
    res = {"completed": 1000, "failed": 0, "duration": 20.0, "total_output_tokens": 128_000}
    return openloop.vllm_figures(
        res, 1000, WINDOW | {"tokens_per_cpu_s": tokens_per_cpu_s}, 128_000
    )


def test_a_point_has_enough_requests_for_its_count_and_its_seconds() -> None:
    plan = openloop.FULL
    assert [plan.requests(r) for r in plan.rates] == [1000, 1000, 2000]
    assert openloop.OpenLoopPlan((2.5,), 10, 3.0, (16, 8), 1).requests(2.5) == 10
    assert openloop.OpenLoopPlan((7.5,), 10, 3.0, (16, 8), 1).requests(7.5) == 23


def test_the_workload_is_one_poisson_point_of_fixed_lengths_that_bench_accepts() -> None:
    text = openloop.workload_toml(100.0, 2000, (16, 128), seed=2)
    w = Workload.model_validate(tomllib.loads(text))
    assert w.arrivals.kind == "rate" and w.arrivals.process == "poisson"
    assert list(w.arrivals.rates) == [100.0] and w.arrivals.requests == 2000
    assert (w.lengths.input_tokens, w.lengths.output_tokens) == (16, 128)
    assert w.lengths.range_ratio == 0 and w.lengths.ignore_eos
    assert w.seed == 2 and w.arrivals.warmups == 0 and w.arrivals.max_in_flight == 0


def test_our_figures_come_from_the_point_and_the_window() -> None:
    f = _ours(64_000.0, 0.0002)
    assert f["client"] == "bench" and f["errors"] == 2 and f["tokens_sent"] == 128_000
    assert f["lateness_p50_s"] == 1e-6 and f["lateness_p99_s"] == 0.0002
    assert f["lateness_max_s"] == 0.002 and f["lateness_n"] == 1000
    assert f["achieved_rate"] == 48.5 and f["output_tokens"] == 127_744
    assert f["tokens_per_cpu_s"] == 64_000.0 and f["client_core_share"] == 0.2
    assert _ours(1.0, None)["lateness_p99_s"] is None  # a point without lateness figures


def test_vllms_figures_come_from_its_result_and_the_window() -> None:
    f = _theirs(32_000.0)
    assert f["client"] == "vllm" and f["errors"] == 0 and f["achieved_rate"] == 50.0
    assert f["output_tokens"] == 128_000 and "lateness_p99_s" not in f
    res = {"completed": 0, "failed": 5, "duration": 0.0, "total_output_tokens": 0}
    assert openloop.vllm_figures(res, 5, WINDOW, 0)["achieved_rate"] is None


def test_ratios_pair_passes_and_leave_out_an_unmeasured_one() -> None:
    ours = [_ours(60_000.0, 1e-4), _ours(80_000.0, 1e-4), _ours(90_000.0, 1e-4)]
    theirs = [_theirs(30_000.0), _theirs(None), _theirs(30_000.0)]
    assert openloop.ratios(ours, theirs) == [2.0, 3.0]
    assert openloop.ratios(ours, []) == []


def test_medians_over_passes_keep_the_worst_lateness_and_sum_errors() -> None:
    figs = [_ours(60_000.0, 1e-4), _ours(80_000.0, 9e-4), _ours(70_000.0, 3e-4)]
    med = openloop.median_figures(figs)
    assert med["tokens_per_cpu_s"] == 70_000.0
    assert med["lateness_p99_s"] == 3e-4 and med["lateness_p99_worst_s"] == 9e-4
    assert med["errors"] == 6 and len(med["passes"]) == 3
    assert med["statuses"] == ["valid"] * 3
    assert openloop.median_figures([_theirs(1.0)])["lateness_p99_s"] is None


def _per(
    ours: Mapping[float, Sequence[tuple[float, float | None]]],
    theirs: Mapping[float, Sequence[float]],
) -> dict[tuple[float, str], list[dict[str, Any]]]:
    per: dict[tuple[float, str], list[dict[str, Any]]] = {}
    for rate, figs in ours.items():
        per[rate, "bench"] = [_ours(t, p99) for t, p99 in figs]
    for rate, tpc in theirs.items():
        per[rate, "vllm"] = [_theirs(t) for t in tpc]
    return per


PLAN = openloop.OpenLoopPlan((50.0, 100.0, 200.0), 10, 0.0, (16, 32), 2)


def test_both_targets_met_when_every_pass_and_rate_is_within_them() -> None:
    ours = {r: [(70_000.0, 4e-4), (66_000.0, 6e-4)] for r in PLAN.rates}
    ours[200.0] = [(70_000.0, 0.05), (70_000.0, 0.05)]  # above 100 req/s: not judged
    theirs = {r: [30_000.0, 33_000.0] for r in PLAN.rates}
    got = openloop.summarize(PLAN, _per(ours, theirs), ["bench", "vllm"])
    late, ratio = got["targets"]["lateness_p99"], got["targets"]["tokens_per_cpu_s_ratio"]
    assert late["worst_s"] == 6e-4 and late["met"] is True
    assert ratio["lowest"] == pytest.approx((70 / 30 + 2.0) / 2) and ratio["met"] is True
    row = got["rows"][0]
    assert row["offered_rate"] == 50.0 and row["requests"] == 10
    assert row["ratio_passes"] == pytest.approx([70 / 30, 2.0])
    assert row["ratio_tokens_per_cpu_s"] == pytest.approx((70 / 30 + 2.0) / 2)
    assert set(got["definitions"]) >= {"schedule_lateness", "client_cpu_s", "tokens_per_cpu_s"}
    assert got["settings"]["rates"] == [50.0, 100.0, 200.0]


def test_one_late_pass_or_one_low_rate_misses_its_target() -> None:
    ours = {r: [(70_000.0, 4e-4), (70_000.0, 4e-4)] for r in PLAN.rates}
    ours[100.0] = [(40_000.0, 4e-4), (40_000.0, 0.0011)]
    theirs = {r: [30_000.0, 30_000.0] for r in PLAN.rates}
    got = openloop.summarize(PLAN, _per(ours, theirs), ["bench", "vllm"])
    assert (
        got["targets"]["lateness_p99"] | {"worst_s": 0.0011, "met": False}
        == (got["targets"]["lateness_p99"])
    )
    ratio = got["targets"]["tokens_per_cpu_s_ratio"]
    assert ratio["lowest"] == pytest.approx(4 / 3) and ratio["met"] is False


def test_without_vllm_the_ratio_is_not_measured_and_without_lateness_not_met() -> None:
    ours = {r: [(70_000.0, 4e-4), (70_000.0, None)] for r in PLAN.rates}
    got = openloop.summarize(PLAN, _per(ours, {}), ["bench"])
    assert (
        got["targets"]["tokens_per_cpu_s_ratio"] | {"lowest": None, "met": None}
        == (got["targets"]["tokens_per_cpu_s_ratio"])
    )
    assert all(row["ratio_tokens_per_cpu_s"] is None for row in got["rows"])
    assert got["targets"]["lateness_p99"]["met"] is False  # a pass had no lateness at all
    empty = openloop.targets([])
    assert empty["lateness_p99"]["met"] is None and empty["tokens_per_cpu_s_ratio"]["met"] is None


def test_the_table_shows_each_client_the_targets_and_the_definitions() -> None:
    ours = {r: [(70_000.0, 4e-4), (66_000.0, 6e-4)] for r in PLAN.rates}
    theirs = {r: [30_000.0, 33_000.0] for r in PLAN.rates}
    text = report.openloop_table(openloop.summarize(PLAN, _per(ours, theirs), ["bench", "vllm"]))
    rows = [line for line in text.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + 2 * len(PLAN.rates)  # the header, then ours and vLLM's a rate
    first = [c.strip() for c in rows[1].strip("|").split("|")]
    assert first[:3] == ["50", "10", "ours"]
    assert first[8:] == ["0.001 ms", "0.500 ms (0.600 ms)", "4", "2.17" + TIMES]
    vllm = [c.strip() for c in rows[2].strip("|").split("|")]
    assert vllm[2] == "vllm bench serve" and vllm[8:10] == ["—", "—"]
    assert "worst 0.600 ms, **met**" in text and f"lowest 2.17{TIMES}, **met**" in text
    assert "- schedule_lateness: ours only" in text and "- client_cpu_s: user + system" in text


def test_the_table_says_not_measured_without_vllm() -> None:
    ours = {r: [(70_000.0, 4e-4)] for r in PLAN.rates}
    text = report.openloop_table(openloop.summarize(PLAN, _per(ours, {}), ["bench"]))
    assert "vllm bench serve |" not in text
    assert "lowest —, not measured" in text


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ({"messages": [{"role": "user", "content": "a b  c\nd"}]}, 4),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "a b"}]}]}, 2),
        ({"prompt": "one two three"}, 3),
        ({"messages": [{"role": "user", "content": ""}]}, 1),
        ({}, 1),
    ],
)
def test_the_streamers_prompt_tokens_are_the_prompts_words(
    body: dict[str, Any], words: int
) -> None:
    assert prompt_words(body) == words


def test_definitions_name_what_is_counted() -> None:
    d = openloop.DEFINITIONS
    assert "dispatched - due" in d["schedule_lateness"]
    assert "utime + stime" in d["client_cpu_s"] and "5 % to 95 %" in d["client_cpu_s"]
    assert math.isclose(openloop.LATENESS_TARGET_S, 0.001) and openloop.RATIO_TARGET == 2.0
