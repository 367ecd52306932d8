"""results.json schema: round trip and the speed convention."""

from __future__ import annotations

from bench.results import (
    SCHEMA_VERSION,
    CellFigures,
    CellResult,
    KvCapacity,
    Plan,
    Results,
    RunSettings,
    ServerInfo,
)


def _figures() -> CellFigures:
    return CellFigures(
        total_tok_s=2191 / 3.0,
        per_request_tok_s=739.0,
        ttft_s=0.0471,
        tbt_s=1 / 739.0,
        average_active=1.0,
        active_source="server_metrics",
        completed_requests=0,
        output_tokens=2191,
        measured_for_s=3.0,
    )


def test_results_round_trip_through_json() -> None:
    results = Results(
        bench_version="0.1.0",
        run_id="r1",
        created_at="2026-01-01T00:00:00Z",
        settings=RunSettings(
            url="http://x", contexts=(8192,), concurrencies=(1,), duration_s=30, max_tokens=4096
        ),
        server=ServerInfo(url="http://x", model="qwen", max_model_len=262144, speed_factor=10),
        plan=Plan(
            contexts=(),
            cells=(),
            kv=KvCapacity(tokens=None, source="unknown", detail="no /metrics"),
            estimated_duration_s=1.0,
        ),
        cells=(
            CellResult(
                context_label="8K",
                prompt_tokens=8192,
                concurrency=1,
                status="valid",
                figures=_figures(),
            ),
        ),
    )
    again = Results.model_validate_json(results.model_dump_json())
    assert again == results
    assert again.schema_version == SCHEMA_VERSION
    assert again.cell("8K", 1) is not None and again.cell("8K", 2) is None


def test_at_server_speed_scales_durations_up_and_rates_down_keeping_identities() -> None:
    f = _figures().at_server_speed(10)
    assert round(f.total_tok_s, 1) == 73.0
    assert round(f.measured_for_s, 6) == 30.0
    assert round(f.output_tokens / f.measured_for_s, 6) == round(f.total_tok_s, 6)
    assert round(f.ttft_s, 6) == 0.471
    assert round(1 / f.tbt_s, 6) == round(f.per_request_tok_s, 6)
