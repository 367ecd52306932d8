"""The shipped card comes back figure for figure."""

from __future__ import annotations

import pathlib

from bench.card.model import Card, CardMeasurement
from bench.card.parse import read_card

CONTEXTS = ["8K", "16K", "32K", "64K", "128K", "251K"]
LEVELS = [1, 2, 4, 8, 16, 32, 64, 128]
OVER = {
    ("16K", 128),
    ("32K", 64),
    ("32K", 128),
    *{("64K", c) for c in (32, 64, 128)},
    *{("128K", c) for c in (16, 32, 64, 128)},
    *{("251K", c) for c in (8, 16, 32, 64, 128)},
}
PHASE = {"prefill": "Prefill", "decode": "Sustained decode"}


def _ms0(s: float | None) -> str:
    return "—" if s is None else f"{s * 1000:,.0f} ms"


def _f1(x: float | None) -> str:
    return "—" if x is None else f"{x:,.1f}"


def _row(m: CardMeasurement) -> str:
    """The row as the site prints it, from the parsed figures alone."""
    cells = [
        PHASE[m.phase],
        m.context,
        str(m.concurrency),
        m.status,
        _f1(m.total_tokens_per_s),
        _f1(m.per_request_tokens_per_s),
        _ms0(m.ttft_s),
        "—" if m.tbt_s is None else f"{m.tbt_s * 1000:.1f} ms",
        _f1(m.avg_active_requests),
        "—" if m.completed_requests is None else f"{m.completed_requests:,}",
        "—" if m.output_tokens is None else f"{m.output_tokens:,}",
        "—" if m.measured_s is None else f"{m.measured_s:.1f} s",
    ]
    return "| " + " | ".join(cells) + " |"


def _card(path: pathlib.Path) -> tuple[Card, list[str]]:
    return read_card(path), path.read_text(encoding="utf-8").splitlines()


def test_all_55_measurement_rows_render_back_to_their_lines(
    shipped_card_path: pathlib.Path,
) -> None:
    card, lines = _card(shipped_card_path)
    assert len(card.measurements) == 55
    assert [m.line for m in card.measurements] == list(range(68, 123))
    for m in card.measurements:
        assert _row(m) == lines[m.line - 1]
    assert sum(m.phase == "prefill" for m in card.measurements) == 7
    assert {(m.context, m.concurrency) for m in card.measurements if m.over_capacity} == OVER


def test_spot_figures_in_seconds(shipped_card_path: pathlib.Path) -> None:
    card, _ = _card(shipped_card_path)
    m = card.measurement("decode", "8K", 128)
    assert m is not None
    assert m.total_tokens_per_s is not None and m.output_tokens is not None
    assert m.measured_s is not None and m.tbt_s is not None
    assert (m.total_tokens_per_s, m.per_request_tokens_per_s) == (1259.4, 7.0)
    assert (m.ttft_s, m.tbt_s, m.output_tokens, m.measured_s) == (21.5, 0.1423, 37683, 29.9)
    # The card's arithmetic: total = output tokens / measured-for (printed to 0.1 s),
    # per request = 1 / TBT.
    assert abs(m.output_tokens / m.total_tokens_per_s - m.measured_s) <= 0.05
    assert round(1 / m.tbt_s, 1) == m.per_request_tokens_per_s


def test_matrix_is_6x8_with_15_over_capacity_and_matches_the_rows(
    shipped_card_path: pathlib.Path,
) -> None:
    card, lines = _card(shipped_card_path)
    assert list(card.matrix_contexts) == CONTEXTS
    assert list(card.matrix_concurrencies) == LEVELS
    assert len(card.matrix) == 48
    assert {(c.context, c.concurrency) for c in card.matrix if c.status == "over_capacity"} == OVER
    for c in card.matrix:
        m = card.measurement("decode", c.context, c.concurrency)
        assert m is not None
        assert (c.total_tokens_per_s, c.ttft_s) == (m.total_tokens_per_s, m.ttft_s)
        if c.status == "valid":
            glued = f"{c.total_tokens_per_s:,.1f}{_ms0(c.ttft_s)} TTFT"
            assert f"| {glued} |" in lines[c.line - 1]
    assert card.cell("8K", 128) is not None
    assert [c.line for c in card.matrix[::8]] == list(range(57, 63))


def test_prefill_table_matches_the_prefill_rows(shipped_card_path: pathlib.Path) -> None:
    card, lines = _card(shipped_card_path)
    assert [p.context for p in card.prefill] == [*CONTEXTS, "256K"]
    for p in card.prefill:
        m = card.measurement("prefill", p.context, 1)
        assert m is not None
        assert (p.tokens_per_s, p.ttft_s) == (m.total_tokens_per_s, m.ttft_s)
        assert lines[p.line - 1].endswith(
            f"{p.context} context{p.tokens_per_s:,.0f}{_ms0(p.ttft_s)} TTFT"
        )
    assert (card.prefill[0].tokens_per_s, card.prefill[0].ttft_s) == (5144.0, 1.592)


def test_header_metadata_and_launch(shipped_card_path: pathlib.Path) -> None:
    card, _ = _card(shipped_card_path)
    assert card.model == "Qwen3.5-397B-A17B-GPTQ-Int4"
    assert card.hardware == "RTX PRO 6000 Blackwell Server Edition 96GB ×4"
    plan = card.plan
    assert (plan.engine, plan.engine_version, plan.badge) == (
        "vllm",
        "0.30.1rc1.dev452+g73a583112",
        "INT4",
    )
    assert (plan.decode_context_count, plan.decode_context_range) == (6, ("8K", "251K"))
    assert (plan.concurrency_count, plan.concurrency_range) == (8, (1, 128))
    assert plan.prefill_contexts == ("8K", "16K", "32K", "64K", "128K", "251K", "256K")
    assert list(card.metadata) == ["Hardware", "Engine", "Run"]
    assert card.metadata["Engine"]["Commit"] == "73a5831127a9"
    assert card.metadata["Hardware"]["VRAM"] == "384 GB (4 × 96 GB)"
    assert card.metadata["Run"]["Benchmark tool"] == "llm-inference-bench v0.7.9"
    assert (card.gpu_count, card.window_s, card.max_output_tokens) == (4, 30.0, 4096)
    assert card.launch_command is not None
    assert card.launch_command.endswith("--quantization moe_wna16")
    assert card.launch_command.startswith(
        '"$HOME/env_rtxpro6k-qwen-vllm-73a5831127a9/bin/vllm" serve'
    )
    assert len(card.notes) == 2


def test_json_round_trip_is_lossless(shipped_card_path: pathlib.Path) -> None:
    card, _ = _card(shipped_card_path)
    assert Card.model_validate_json(card.model_dump_json()) == card


def test_the_fixture_copy_is_the_shipped_card(shipped_card_path: pathlib.Path) -> None:
    # tests/card/fixtures keeps a copy (other tests and the malformed variants use it).
    copy = pathlib.Path(__file__).parent / "fixtures" / f"published_{shipped_card_path.name}"
    assert copy.read_bytes() == shipped_card_path.read_bytes()
