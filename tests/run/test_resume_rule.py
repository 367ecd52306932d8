"""The resume rule (bench.run.resume): which saved entries a crash of the server cut.

No sockets: results built by hand. The real crash (the twin killed with SIGKILL, resumed
against a new twin) is tests/faults/test_sweep_faults.py.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from bench.errors import UsageError
from bench.host.telemetry import GPU_TELEMETRY_NAME
from bench.results import (
    SCHEMA_VERSION,
    CellFigures,
    CellResult,
    CellStatus,
    KvCapacity,
    Plan,
    PlannedContext,
    PrefillSample,
    PrefillStatus,
    Results,
    RunSettings,
    ServerInfo,
)
from bench.run import options, resume
from bench.run.rundir import RunDir
from bench.run_files import METRICS, SAMPLES

RESET = "transport error: connection closed by the server (incomplete chunked read)"
REFUSED = "transport error: All connection attempts failed"
FIGS = CellFigures(
    total_tok_s=100.0, per_request_tok_s=50.0, ttft_s=0.1, tbt_s=0.02, average_active=2.0,
    active_source="server_metrics", completed_requests=1, output_tokens=300, measured_for_s=3.0,
)  # fmt: skip


def _ctx(label: str) -> PlannedContext:
    return PlannedContext(
        label=label, nominal_tokens=256, prompt_tokens=256, trimmed=False, decode=True,
        max_tokens=64,
    )  # fmt: skip


def _cell(label: str, c: int, status: CellStatus, error: str | None = None) -> CellResult:
    reason = None if error is None else f"{c} request(s) failed, first: {error}"
    if status == "over_capacity":
        reason = "needs 9999 KV tokens, the server has 2048"
    figures = FIGS if status == "valid" else None
    return CellResult(
        context_label=label, prompt_tokens=256, concurrency=c, status=status, reason=reason,
        figures=figures,
    )  # fmt: skip


def _scout(label: str, status: PrefillStatus = "valid", error: str | None = None) -> PrefillSample:
    return PrefillSample(context_label=label, prompt_tokens=256, status=status, reason=error)


def _results(prefill: list[PrefillSample], cells: list[CellResult]) -> Results:
    return Results(
        bench_version="0.1.0",
        run_id="r1",
        created_at="2026-01-01T00:00:00Z",
        state="running",
        settings=RunSettings(
            url="http://x",
            contexts=(256, 512),
            concurrencies=(1, 2, 4),
            duration_s=4,
            max_tokens=64,
        ),
        server=ServerInfo(url="http://x", model="m", max_model_len=4096),
        plan=Plan(
            contexts=(_ctx("256"), _ctx("512")),
            cells=(),
            kv=KvCapacity(tokens=2048, source="kv_budget", detail="--kv-budget"),
            estimated_duration_s=1.0,
        ),
        prefill=tuple(prefill),
        cells=tuple(cells),
    )


def test_the_reason_names_a_transport_failure_only_for_transport_errors() -> None:
    assert resume.cut_by_the_server(f"2 request(s) failed, first: {RESET}")
    assert resume.cut_by_the_server(REFUSED)  # a prefill sample's reason is the error
    for other in (
        "1 request(s) failed, first: HTTP 500: boom",
        "1 request(s) failed, first: malformed chunk: {oops",
        "1 request(s) failed, first: read time-out after 1 s",
        "1 request(s) failed, first: error event: out of memory",
        "no window",
        None,
    ):
        assert not resume.cut_by_the_server(other), other


def test_the_cell_the_crash_cut_is_marked_and_resumed_without_its_raw_lines() -> None:
    before = _results(
        [_scout("256")], [_cell("256", 1, "valid"), _cell("256", 2, "invalid", RESET)]
    )
    marked = resume.mark_cut(before)
    cut = marked.cell("256", 2)
    assert cut is not None and cut.status == "interrupted"
    assert cut.reason is not None and RESET in cut.reason and "--resume" in cut.reason
    assert marked.cell("256", 1) == before.cell("256", 1)  # the finished cell: untouched
    assert marked.prefill == before.prefill
    again, keys = resume.carry_on(marked.model_copy(update={"schema_version": 1}))
    assert again.state == "running" and again.cell("256", 2) is None
    assert again.schema_version == SCHEMA_VERSION == 6  # a resumed schema-1 run is now ours
    assert [(c.context_label, c.concurrency) for c in again.cells] == [("256", 1)]
    assert keys == {("decode", "256", 1, 0), ("prefill", "256", 1, 0)}


def test_everything_measured_after_the_last_answer_is_cut_over_capacity_passed_over() -> None:
    # without /metrics the cells after a crash fail at once (refused); the next row's scout too
    before = _results(
        [_scout("256"), _scout("512", "invalid", REFUSED)],
        [
            _cell("256", 1, "valid"),
            _cell("256", 2, "invalid", RESET),
            _cell("256", 4, "over_capacity"),
        ],
    )
    cut = resume.cut_at_the_end(before)
    assert [type(e).__name__ for e in cut] == ["PrefillSample", "CellResult"]
    marked = resume.mark_cut(before)
    assert [c.status for c in marked.cells] == ["valid", "interrupted", "over_capacity"]
    assert [p.status for p in marked.prefill] == ["valid", "interrupted"]
    again, keys = resume.carry_on(marked)
    assert [p.context_label for p in again.prefill] == ["256"]
    assert ("decode", "256", 4, 0) in keys  # over capacity: kept, never measured again


def test_what_a_live_server_answered_stays_a_measurement() -> None:
    # a server that answered 500 on the last cell was alive then: nothing before it is cut
    http_last = _results(
        [_scout("256")],
        [_cell("256", 1, "invalid", RESET), _cell("256", 2, "invalid", "HTTP 500: boom")],
    )
    assert resume.cut_at_the_end(http_last) == []
    assert resume.mark_cut(http_last) == http_last
    # the walk stops at the last answer: the cut-stream cell before a valid one stays invalid
    valid_last = _results(
        [_scout("256")], [_cell("256", 1, "invalid", RESET), _cell("256", 2, "valid")]
    )
    assert resume.cut_at_the_end(valid_last) == []
    for error in ("malformed chunk: {x", "read time-out after 1 s", "error event: oom"):
        one = _results([_scout("256")], [_cell("256", 1, "invalid", error)])
        assert resume.cut_at_the_end(one) == [], error


def test_keep_only_drops_every_raw_line_of_a_cell_measured_again(tmp_path: Path) -> None:
    def rows(phase: str, c: int, n: int) -> list[dict[str, object]]:
        return [{"phase": phase, "context": "256", "concurrency": c, "trial": 0, "i": i}
                for i in range(n)]  # fmt: skip

    run = RunDir(tmp_path)
    run.append(SAMPLES, [*rows("prefill", 1, 1), *rows("decode", 1, 3), *rows("decode", 2, 2)])
    run.append(METRICS, [*rows("decode", 1, 2), *rows("decode", 2, 2)])
    gpu: list[dict[str, object]] = [
        {"context_label": "256", "concurrency": c, "trial": 0, "samples": []} for c in (1, 2)
    ]
    (tmp_path / GPU_TELEMETRY_NAME).write_text("".join(json.dumps(g) + "\n" for g in gpu))
    (tmp_path / SAMPLES).write_text((tmp_path / SAMPLES).read_text() + '{"phase": "dec')  # torn

    run.keep_only({("prefill", "256", 1, 0), ("decode", "256", 1, 0)})

    def concurrencies(name: str) -> list[object]:
        return [json.loads(x)["concurrency"] for x in (tmp_path / name).read_text().splitlines()]

    assert concurrencies(SAMPLES) == [1, 1, 1, 1]
    assert concurrencies(METRICS) == [1, 1]
    assert concurrencies(GPU_TELEMETRY_NAME) == [1]


def test_resume_refuses_another_server_and_says_how_to_start_a_new_run() -> None:
    base = ServerInfo(
        url="http://x", model="m", max_model_len=4096, version="0.1",
        version_payload={"version": "0.1", "twin": {"profile": "tiny"}},
    )  # fmt: skip
    run = _results([], []).model_copy(update={"server": base})
    moved = base.model_copy(update={"url": "http://new:9"})
    resume.check_same_server(run, moved, "DIR")  # only the address changed: the same server
    no_profile = moved.model_copy(update={"version_payload": {"version": "0.1"}})
    resume.check_same_server(run, no_profile, "DIR")  # a profile is compared when both say
    others: dict[str, dict[str, object]] = {
        "model 'other', the run's 'm'": {"model": "other"},
        "version '0.2', the run's '0.1'": {"version": "0.2"},
        "max model length 8192, the run's 4096": {"max_model_len": 8192},
        "launch profile 'published', the run's 'tiny'": {
            "version_payload": {"version": "0.1", "twin": {"profile": "published"}}
        },
        "speed factor 2.0, the run's 1.0": {"speed_factor": 2.0},
    }
    for diff, update in others.items():
        with pytest.raises(UsageError) as err:
            resume.check_same_server(run, moved.model_copy(update=update), "DIR")
        line = err.value.one_line()
        assert line == (
            f"the server at http://new:9 is not the one this run measured: {diff} "
            "(resume against the same server, or start a new run without --resume "
            "(bench run --url http://new:9 --out NEW_DIR); DIR stays as it is)"
        )


def test_resume_refuses_a_server_with_another_kv_capacity() -> None:
    """Issue 29 M4: resumed against a server with KV 1,500 instead of 1,000,000, the run
    marked cells over capacity that the first server ran."""
    run = _results([], [])
    plan = run.plan.model_copy(
        update={"kv": KvCapacity(tokens=1_000_000, source="kv_cache_size_tokens", detail="x")}
    )
    run = run.model_copy(update={"plan": plan})
    same = KvCapacity(tokens=1_000_000, source="kv_cache_size_tokens", detail="y")
    resume.check_same_capacity(run, same, "http://x", "DIR")
    resume.check_same_capacity(run, KvCapacity(tokens=None, source="unknown", detail=""), "http://x",
                               "DIR")  # fmt: skip
    small = KvCapacity(tokens=1500, source="kv_cache_size_tokens", detail="z")
    with pytest.raises(UsageError) as err:
        resume.check_same_capacity(run, small, "http://x", "DIR")
    assert err.value.one_line().startswith(
        "the server at http://x is not the one this run measured: KV capacity 1,500 tokens, "
        "the run's 1,000,000 (resume against the same server"
    )


def test_resume_compares_the_flags_with_the_parser_s_own_defaults() -> None:
    """A default changed on the parser is the one --resume compares with: no second copy
    of the defaults can drift from it."""
    parser = argparse.ArgumentParser(prog="bench run")
    options.add_arguments(parser)
    parser.set_defaults(duration=12.0, seed=7)
    args = parser.parse_args(["--resume", "D"])
    args.run_parser = parser
    options.only_url_with_resume(args)  # 12 s and seed 7 are this parser's defaults
    args = parser.parse_args(["--resume", "D", "--duration", "30", "--seed", "0"])
    args.run_parser = parser
    with pytest.raises(UsageError, match=r"; --duration, --seed cannot change them$"):
        options.only_url_with_resume(args)
