"""Figures as the card prints them: thousands separators, units, and values glued together.

The page's text loses the cell boundaries inside the decode matrix and the prefill table,
so "1,259.421,500 ms TTFT" is 1,259.4 tok/s followed by 21,500 ms. Totals carry exactly
one decimal, which makes the matrix split unique; prefill tok/s are whole numbers, whose
split can be ambiguous ("9971,592" = 997 + 1,592 or 99 + 71,592) and is settled by the
caller with other evidence.
"""

from __future__ import annotations

import re

# ASCII digits only ("²" is a digit to str.isdigit and to \d), at most 15 of them: a
# figure past that is no card's, and int() of 4,300 digits is a ValueError (issue 29, H7).
_GROUPED = r"(?:0|[1-9][0-9]{0,2}(?:,[0-9]{3}){0,4})"
_GROUPED_RE = re.compile(rf"^{_GROUPED}$")
_DECIMAL_RE = re.compile(rf"^{_GROUPED}(?:\.[0-9]{{1,15}})?$")
_MATRIX_RE = re.compile(rf"^({_GROUPED}\.[0-9])({_GROUPED}) ms TTFT$")
_DURATION_RE = re.compile(rf"^({_GROUPED}(?:\.[0-9]{{1,15}})?) (ms|s)$")
DASH = "—"


class FigureError(ValueError):
    """A figure that does not read; the message says what was expected."""


def grouped_int(text: str) -> int:
    if not _GROUPED_RE.match(text):
        raise FigureError(f"a whole number with thousands separators, got {text!r}")
    return int(text.replace(",", ""))


def whole(text: str) -> int | None:
    """Plain ASCII digits (at most 15) as an int; None for anything else."""
    if text.isascii() and text.isdigit() and len(text) <= 15:
        return int(text)
    return None


def grouped_float(text: str) -> float:
    if not _DECIMAL_RE.match(text):
        raise FigureError(f"a number with thousands separators, got {text!r}")
    return float(text.replace(",", ""))


def duration_s(text: str) -> float:
    """'1,592 ms' -> 1.592; '30.0 s' -> 30.0."""
    m = _DURATION_RE.match(text)
    if not m:
        raise FigureError(f"a duration like '1,592 ms' or '30.0 s', got {text!r}")
    value = float(m.group(1).replace(",", ""))
    return value / 1000.0 if m.group(2) == "ms" else value


def optional(text: str) -> str | None:
    """The card prints a dash where a figure does not apply."""
    return None if text == DASH else text


def matrix_cell(text: str) -> tuple[float, float]:
    """'1,259.421,500 ms TTFT' -> (1259.4 tok/s, 21.5 s)."""
    m = _MATRIX_RE.match(text)
    if not m:
        raise FigureError(f"total tok/s with one decimal glued to 'N ms TTFT', got {text!r}")
    return float(m.group(1).replace(",", "")), int(m.group(2).replace(",", "")) / 1000.0


def prefill_splits(text: str) -> list[tuple[float, float]]:
    """Every reading of glued 'tok/s' + 'ms' digits, e.g. '5,1441,592' -> [(5144.0, 1.592)].

    The tok/s is a whole number or has one decimal; both parts follow the grouping rules.
    """
    out: list[tuple[float, float]] = []
    for cut in range(1, len(text)):
        head, tail = text[:cut], text[cut:]
        head_ok = _GROUPED_RE.match(head) or re.match(rf"^{_GROUPED}\.[0-9]$", head)
        if head_ok and _GROUPED_RE.match(tail):
            out.append((float(head.replace(",", "")), int(tail.replace(",", "")) / 1000.0))
    return out


def context_tokens(label: str) -> int:
    """Nominal size of a context label: K = 1024 tokens, M = 1024 K."""
    m = re.match(r"^([0-9]{1,15}(?:\.[0-9]{1,15})?)([KM])$", label)
    if not m:
        raise FigureError(f"a context like '8K' or '1M', got {label!r}")
    scale = 1024 if m.group(2) == "K" else 1024 * 1024
    return round(float(m.group(1)) * scale)


def is_context_label(label: str) -> bool:
    return re.match(r"^[0-9]{1,15}(?:\.[0-9]{1,15})?[KM]$", label) is not None
