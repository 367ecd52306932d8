"""Issue 14: a card that is cut short, whose header disagrees with its matrix, or that lacks
a column is exit 2 naming the line; nothing imports silently null."""

from __future__ import annotations

import pytest

from bench.card.parse import parse_card
from bench.errors import CardError, Exit
from tests.card.conftest import SHIPPED


def _text() -> str:
    return SHIPPED.read_text(encoding="utf-8")


def _error(text: str) -> CardError:
    with pytest.raises(CardError) as info:
        parse_card(text, source="card.txt")
    assert info.value.exit_code == Exit.USAGE
    return info.value


def test_the_shipped_card_reads() -> None:
    card = parse_card(_text())
    assert len(card.measurements) == 55  # 48 decode cells + 7 prefill rows


def test_a_card_cut_short_at_a_row_boundary_names_the_line() -> None:
    lines = _text().splitlines()
    # Cut after the 128K rows: every remaining line reads, the 251K rows are gone.
    last = max(i for i, line in enumerate(lines) if line.startswith("| Sustained decode | 128K"))
    err = _error("\n".join(lines[: last + 1]) + "\n")
    assert (
        f"card.txt line {last + 1}: expected an 'All measurements' row for matrix cell 251K x 1"
        in (err.message)
    )


def test_a_card_missing_its_all_measurements_table_names_the_line() -> None:
    lines = _text().splitlines()
    at = lines.index("All measurements")
    err = _error("\n".join(lines[:at]) + "\n")
    assert "an 'All measurements' table after the matrix" in err.message


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        (
            "× 8 concurrency levels (1–128)",
            "× 9 concurrency levels (1–128)",
            "8 concurrency levels as the matrix has, the header says 9",
        ),
        ("INT46 contexts", "INT47 contexts", "6 contexts as the matrix has, the header says 7"),
        (
            "× 8 concurrency levels (1–128)",
            "× 8 concurrency levels (1–256)",
            "the concurrency range 1–128 of the matrix, got 1–256",
        ),
        ("contexts (8K–251K)", "contexts (8K–256K)", "the context range 8K–251K of the matrix"),
        (
            "prefill at 8K, 16K, 32K, 64K, 128K, 251K, 256K",
            "prefill at 8K, 16K, 32K, 64K, 128K, 256K",
            "prefill at 8K, 16K, 32K, 64K, 128K, 251K, 256K as the prefill table has",
        ),
    ],
)
def test_a_header_that_disagrees_with_the_matrix_names_line_3(
    old: str, new: str, words: str
) -> None:
    text = _text()
    assert old in text
    err = _error(text.replace(old, new, 1))
    assert err.message.startswith("card.txt line 3: expected ") and words in err.message


def test_a_missing_column_names_the_header_line() -> None:
    out = []
    header_line = 0
    for n, text in enumerate(_text().splitlines(), start=1):
        line = text
        if "| Phase |" in text:
            head, bar, rest = text.partition("|")
            cells = rest.split("|")
            drop = [c.strip() for c in cells].index("Time between tokens")
            line = head + bar + "|".join(c for i, c in enumerate(cells) if i != drop)
            header_line = n
        elif header_line and text.startswith("|"):
            cells = text[1:].split("|")
            line = "|" + "|".join(c for i, c in enumerate(cells) if i != drop)
        out.append(line)
    err = _error("\n".join(out) + "\n")
    assert f"line {header_line}: expected the columns Time between tokens" in err.message


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("| Context | 1 | 2 | 4 |", "| Context | 1 | ² | 4 |"),  # a Unicode digit
        ("INT46 contexts", "INT4² contexts"),
        ("INT46 contexts", "INT4" + "7" * 5000 + " contexts"),  # past int()'s 4,300 digits
        ("| Context | 1 | 2 | 4 |", "| Context | 1 | " + "2" * 5000 + " | 4 |"),
        ("- 4,096 tokens", "- " + "4" * 5000 + " tokens"),
        ("| 1 | — | — |\n", "| 1 | — | " + "9" * 5000 + " |\n"),
    ],
)
def test_digits_no_card_has_are_a_line_not_a_traceback(old: str, new: str) -> None:
    """Issue 29 H7: `²` (a digit to str.isdigit and \\d) or a number of 5,000 digits was a
    ValueError traceback; now `card.txt line N: expected …`, exit 2."""
    text = _text()
    assert old in text
    err = _error(text.replace(old, new, 1))
    assert err.message.startswith("card.txt line ") and ": expected " in err.message


def test_a_card_with_100000_matrix_rows_is_refused_at_once() -> None:
    """Issue 29 M7: 100,000 matrix rows (~3 MB) took over 200 s (quadratic)."""
    import time

    text = _text()
    row = next(line for line in text.splitlines() if line.startswith("| 8K | "))
    started = time.monotonic()
    err = _error(text.replace(row + "\n", (row + "\n") * 100_000, 1))
    assert time.monotonic() - started < 5
    assert "expected at most 2,000 rows in a table" in err.message
