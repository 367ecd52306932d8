"""Cards of the same site for other models, hardware and engines, and cards that do not read."""

from __future__ import annotations

import pathlib

import pytest

from bench.card.parse import parse_card, read_card
from bench.errors import CardError, Exit

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def _completed(name: str, after: str, rows: list[str]) -> str:
    """The fixture with the All-measurements rows it lacks put back after line `after`."""
    lines = (FIXTURES / name).read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith(after)) + 1
    return "\n".join([*lines[:at], *rows, *lines[at:]]) + "\n"


def test_cards_whose_rows_do_not_cover_their_matrix_are_exit_2_naming_the_line() -> None:
    # Issue 14: these imported with the missing cells' per-request tok/s and TBT null.
    with pytest.raises(CardError) as info:
        read_card(FIXTURES / "llama-3.1-8b-bf16_1x-h100_sglang.txt")
    assert "All measurements' row for matrix cell 32K x 8" in info.value.message
    assert info.value.exit_code == Exit.USAGE
    with pytest.raises(CardError) as info:
        read_card(FIXTURES / "qwen3-30b-a3b-q4km_m3max_llamacpp.txt")
    assert "line 59: expected an 'All measurements' row for matrix cell 8K x 2 (line 43)" in (
        info.value.message
    )


def test_sglang_card_with_256_levels_a_dash_cell() -> None:
    text = _completed(
        "llama-3.1-8b-bf16_1x-h100_sglang.txt",
        "| Sustained decode | 32K | 4 |",
        [
            "| Sustained decode | 32K | 8 | Valid | 810.1 | 101.3 | 182 ms | 9.9 ms | 8.0 | 0 "
            "| 24,303 | 30.0 s |"
        ],
    )
    card = parse_card(text, source="sglang")
    assert (card.plan.engine, card.plan.badge, card.plan.decode_context_count) == (
        "sglang",
        "BF16",
        3,
    )
    assert card.matrix_concurrencies == (1, 2, 4, 8, 16, 32, 64, 128, 256)
    assert card.matrix_contexts == ("4K", "32K", "128K")
    dash = card.cell("4K", 64)
    assert dash is not None and (dash.status, dash.label, dash.total_tokens_per_s) == (
        "not_run",
        "—",
        None,
    )
    cell = card.cell("32K", 8)
    assert cell is not None and (cell.status, cell.total_tokens_per_s, cell.ttft_s) == (
        "valid",
        810.1,
        0.182,
    )
    assert card.measurement("decode", "32K", 8) is not None
    over = {(c.context, c.concurrency) for c in card.matrix if c.status == "over_capacity"}
    assert over == {
        ("4K", 128),
        ("4K", 256),
        *{("32K", n) for n in (32, 64, 128, 256)},
        *{("128K", n) for n in (8, 16, 32, 64, 128, 256)},
    }
    assert card.metadata["Hardware"]["Driver"] == "580.65.06"
    assert card.metadata["Engine"]["Attention"] == "flashinfer"
    assert "Commit" not in card.metadata["Engine"]
    assert card.gpu_count == 1
    assert (card.prefill[0].context, card.prefill[0].tokens_per_s, card.prefill[0].ttft_s) == (
        "4K",
        18231.0,
        0.225,
    )


def test_llamacpp_card_splits_the_badge_by_row_count_and_resolves_glued_prefill() -> None:
    text = _completed(
        "qwen3-30b-a3b-q4km_m3max_llamacpp.txt",
        "| Sustained decode | 8K | 1 |",
        [
            "| Sustained decode | 8K | 2 | Valid | 92.5 | 47.7 | 230 ms | 20.9 ms | 2.0 | 0 "
            "| 2,775 | 30.0 s |"
        ],
    )
    text = text.replace(
        "| Prefill | 8K | 1 | Valid | 655.0 | — | 12,507 ms | — | — | 1 | — | — |",
        "| Prefill | 8K | 1 | Valid | 655.0 | — | 12,507 ms | — | — | 1 | — | — |\n"
        "| Prefill | 16K | 1 | Valid | 540.0 | — | 30,341 ms | — | — | 1 | — | — |",
    )
    card = parse_card(text, source="llamacpp")
    # No Quantization in the Engine block: "Q4_K_M3 contexts" splits by the matrix's 3 rows.
    assert (card.plan.engine, card.plan.badge, card.plan.decode_context_count) == (
        "llama.cpp",
        "Q4_K_M",
        3,
    )
    assert "Quantization" not in card.metadata["Engine"]
    assert card.metadata["Hardware"]["Chip"] == "Apple M3 Max"
    assert (card.gpu_count, card.launch_command, card.max_output_tokens) == (None, None, 2048)
    # "8121,261" reads as 812 + 1,261 or 81 + 21,261 or 8 + 121,261: the row says 812.0.
    assert (card.prefill[0].tokens_per_s, card.prefill[0].ttft_s) == (812.0, 1.261)
    # "54030,341" has one reading (the row agrees).
    assert (card.prefill[2].tokens_per_s, card.prefill[2].ttft_s) == (540.0, 30.341)
    assert len(card.measurements) == 12


def test_vllm_card_with_a_1m_context_and_uneven_levels() -> None:
    card = read_card(FIXTURES / "deepseek-v3.1-fp8_8x-h200_vllm.txt")
    assert card.matrix_contexts == ("4K", "128K", "1M")
    assert card.matrix_concurrencies == (1, 4, 16, 64, 256)
    assert card.plan.decode_context_range == ("4K", "1M")
    cell = card.cell("4K", 256)
    assert cell is not None and (cell.total_tokens_per_s, cell.ttft_s) == (4658.0, 8.528)
    assert card.prefill[2].context == "1M" and card.prefill[2].ttft_s == 168.166
    assert card.metadata["Hardware"]["Interconnect"] == "NVLink"
    assert card.gpu_count == 8
    assert card.measurement("decode", "128K", 256) is None  # row missing, cell says over capacity
    c = card.cell("128K", 256)
    assert c is not None and c.status == "over_capacity"


@pytest.mark.parametrize(
    ("name", "line", "words"),
    [
        ("malformed_matrix_two_decimals.txt", 57, "cell 8K x 1 to be total tok/s with one decimal"),
        ("malformed_metadata_no_value.txt", 43, "a value line after '- Max output'"),
    ],
)
def test_malformed_fixture_names_the_line(name: str, line: int, words: str) -> None:
    with pytest.raises(CardError) as info:
        read_card(FIXTURES / name)
    assert f"{name} line {line}: expected " in info.value.message
    assert words in info.value.message
    assert info.value.exit_code == Exit.USAGE


def _mutate(path: pathlib.Path, line: int, old: str, new: str) -> str:
    lines = path.read_text(encoding="utf-8").split("\n")
    assert old in lines[line - 1], f"line {line} no longer holds {old!r}"
    lines[line - 1] = lines[line - 1].replace(old, new, 1)
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("line", "old", "new", "at", "words"),
    [
        (1, "Speed test matrix", "Speed matrix", 1, "the title"),
        (2, " on ", " at ", 2, "'<model> on <hardware>'"),
        (3, "× 8 concurrency", "x 8 concurrency", 3, "'N contexts (A–B) × M concurrency"),
        (
            3,
            "INT46 contexts",
            "INT4six contexts",
            3,
            "a context count after the badge in 'INT4six'",
        ),
        (3, "INT46 contexts", "INT45 contexts", 3, "at least the matrix's 6 contexts"),
        (57, "| 73.0471 ms TTFT ", "", 57, "9 cells as in the header, got 8"),
        (58, "Over capacity", "Over capacty", 58, "cell 16K x 128 to be total"),
        (75, "| 73.0 |", "| 73.1 |", 57, "8K x 1 to agree with line 75: here 73.0 tok/s"),
        (82, "| 21,500 ms |", "| 21.500 ms |", 57, "there 1259.4 tok/s and 0.0215 s"),
        (97, "Over capacity", "Valid", 59, "(Over capacity on one only)"),
        (68, "5,144.0", "5,145.0", 47, "prefill 8K to agree with line 68"),
        (82, "| 21,500 ms |", "| 21,500 msec |", 82, "column 'TTFT' to be a duration"),
        (66, "| Output tokens |", "| Tokens out |", 66, "known column titles"),
        (70, "| Prefill | 32K |", "| Prefil | 32K |", 70, "phase 'Prefill' or 'Sustained decode'"),
        (76, "| 8K | 2 |", "| 8K | 1 |", 76, "same as line 75"),
        (47, "8K context5,144", "8K ctx5,144", 47, "a prefill row like"),
        (42, "- 30 s", "- 30 seconds", 42, "Run / Time per measurement to be a duration"),
        (10, "- 4", "- four", 10, "Hardware / GPU count to be a whole number"),
        (56, "|---|", "|-x-|", 56, "the table's separator row"),
        (55, "| 128 |", "| 128x |", 55, "concurrency levels as column headers"),
        (62, "| 251K |", "| 251 |", 62, "a context like '8K' in the first column"),
    ],
)
def test_damaged_card_names_the_line(
    shipped_card_path: pathlib.Path, line: int, old: str, new: str, at: int, words: str
) -> None:
    text = _mutate(shipped_card_path, line, old, new)
    with pytest.raises(CardError) as info:
        parse_card(text, source="x.txt")
    assert info.value.message.startswith(f"x.txt line {at}: expected ")
    assert words in info.value.message


def test_ambiguous_prefill_without_a_row_is_an_error() -> None:
    text = (FIXTURES / "qwen3-30b-a3b-q4km_m3max_llamacpp.txt").read_text(encoding="utf-8")
    text = text.replace(
        "| Prefill | 1K | 1 | Valid | 812.0 | — | 1,261 ms | — | — | 1 | — | — |\n", ""
    )
    with pytest.raises(CardError) as info:
        parse_card(text, source="y.txt")
    assert "y.txt line 36: expected one reading of '8121,261' as tok/s + TTFT" in info.value.message
    assert (
        "8 tok/s + 121,261 ms or 81 tok/s + 21,261 ms or 812 tok/s + 1,261 ms" in info.value.message
    )


def test_repeated_or_empty_sections_name_the_line(shipped_card_path: pathlib.Path) -> None:
    text = shipped_card_path.read_text(encoding="utf-8")
    with pytest.raises(
        CardError,
        match=r"x line 124: expected the section 'All measurements' once \(it began on line 65\)",
    ):
        parse_card(text.rstrip("\n") + "\nAll measurements\n", source="x")
    cut = "\n".join(text.split("\n")[:54])  # ends with the "Sustained decode" heading
    with pytest.raises(CardError, match=r"x line 54: expected a table header starting with '\|'"):
        parse_card(cut, source="x")


def test_not_utf8_is_a_card_error(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"Speed test matrix\n\xff\xfe\n")
    with pytest.raises(CardError, match="not UTF-8"):
        read_card(bad)
