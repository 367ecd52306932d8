"""The card's three tables as page text: prefill rows, the decode matrix, "All measurements".

Each function takes the section's numbered lines and returns rows that remember their line;
anything that does not read raises `Unreadable(line, what was expected)`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bench.card import figures
from bench.card.figures import FigureError
from bench.card.model import CardMeasurement, MatrixCell

Line = tuple[int, str]

PREFILL_CAPTION = "prompt tok/s by context length"
_PREFILL_ROW = re.compile(r"^([0-9]{1,15}(?:\.[0-9]{1,15})?[KM]) context([0-9,.]+) ms TTFT$")
_SEPARATOR = re.compile(r"^\|(?:\s*:?-+:?\s*\|)+$")
OVER_CAPACITY = "Over capacity"
# Cell texts without figures other than "Over capacity": a cell that was planned but has
# no figures. A word outside this list is more likely a damaged cell than a new status.
NOT_RUN_LABELS = ("—", "Failed", "Error", "Timed out", "Not ready", "Not run", "Skipped")


class Unreadable(Exception):
    def __init__(self, line: int, what: str) -> None:
        super().__init__(what)
        self.line = line
        self.what = what


@dataclass(frozen=True)
class GluedPrefill:
    context: str
    glued: str
    line: int


@dataclass(frozen=True)
class CardTable:
    caption: str
    header: list[str]
    rows: list[tuple[int, list[str]]]
    notes: list[Line]


def prefill_rows(lines: list[Line]) -> list[GluedPrefill]:
    out: list[GluedPrefill] = []
    for i, (n, raw) in enumerate(lines):
        text = raw
        if i == 0:
            if not text.startswith(PREFILL_CAPTION):
                raise Unreadable(n, f"the caption {PREFILL_CAPTION!r} before the first row")
            text = text[len(PREFILL_CAPTION) :]
        m = _PREFILL_ROW.match(text)
        if not m:
            raise Unreadable(n, f"a prefill row like '8K context5,1441,592 ms TTFT', got {text!r}")
        if any(r.context == m.group(1) for r in out):
            raise Unreadable(n, f"one prefill row per context, {m.group(1)} repeats")
        out.append(GluedPrefill(m.group(1), m.group(2), n))
    return out


# A card's largest table (All measurements) has a row per context and concurrency: tens of
# rows. Past this it is no card, and checking its rows against each other grew as the square
# of their number (100,000 rows took minutes: issue 29, M7).
MAX_TABLE_ROWS = 2000


def _cells(n: int, text: str) -> list[str]:
    if not (text.startswith("|") and text.endswith("|")):
        raise Unreadable(n, f"a table row between '|' characters, got {text!r}")
    return [c.strip() for c in text[1:-1].split("|")]


def markdown_table(lines: list[Line]) -> CardTable:
    """Caption glued to the header row, a separator row, body rows, then footnotes."""
    if not lines:
        raise Unreadable(0, "a table")
    n, first = lines[0]
    bar = first.find("|")
    if bar < 0:
        raise Unreadable(n, f"a table header starting with '|', got {first!r}")
    header = _cells(n, first[bar:])
    if len(lines) < 2 or not _SEPARATOR.match(lines[1][1]):
        where = lines[1][0] if len(lines) > 1 else n
        raise Unreadable(where, "the table's separator row '|---|---|...'")
    rows: list[tuple[int, list[str]]] = []
    notes: list[Line] = []
    for ln, text in lines[2:]:
        if text.startswith("|") and not notes:
            if len(rows) == MAX_TABLE_ROWS:
                raise Unreadable(ln, f"at most {MAX_TABLE_ROWS:,} rows in a table")
            cells = _cells(ln, text)
            if len(cells) != len(header):
                raise Unreadable(ln, f"{len(header)} cells as in the header, got {len(cells)}")
            rows.append((ln, cells))
        elif text.startswith("|"):
            raise Unreadable(ln, "no table row after the table's footnotes")
        else:
            notes.append((ln, text))
    return CardTable(first[:bar].strip(), header, rows, notes)


def concurrency(text: str) -> int:
    plain = figures.whole(text)
    value = figures.grouped_int(text) if "," in text else -1 if plain is None else plain
    if value < 1:
        raise FigureError(f"a number of simultaneous requests, got {text!r}")
    return value


def matrix(table: CardTable, header_line: int) -> tuple[list[str], list[int], list[MatrixCell]]:
    if not table.header or table.header[0] != "Context":
        raise Unreadable(header_line, "the matrix header to start with '| Context |'")
    try:
        levels = [concurrency(h) for h in table.header[1:]]
    except FigureError as exc:
        raise Unreadable(header_line, f"concurrency levels as column headers, {exc}") from None
    if len(set(levels)) != len(levels):
        raise Unreadable(header_line, "each concurrency level once in the header")
    contexts: list[str] = []
    cells: list[MatrixCell] = []
    for ln, row in table.rows:
        ctx = row[0]
        if not figures.is_context_label(ctx):
            raise Unreadable(ln, f"a context like '8K' in the first column, got {ctx!r}")
        if ctx in contexts:
            raise Unreadable(ln, f"one matrix row per context, {ctx} repeats")
        contexts.append(ctx)
        for level, text in zip(levels, row[1:], strict=True):
            cells.append(_matrix_cell(ln, ctx, level, text))
    return contexts, levels, cells


def _matrix_cell(ln: int, ctx: str, level: int, text: str) -> MatrixCell:
    if text == OVER_CAPACITY:
        return MatrixCell(context=ctx, concurrency=level, status="over_capacity", line=ln)
    if text in NOT_RUN_LABELS:
        return MatrixCell(context=ctx, concurrency=level, status="not_run", label=text, line=ln)
    try:
        total, ttft = figures.matrix_cell(text)
    except FigureError as exc:
        labels = ", ".join(repr(x) for x in (OVER_CAPACITY, *NOT_RUN_LABELS))
        raise Unreadable(ln, f"cell {ctx} x {level} to be {exc}; or one of {labels}") from None
    return MatrixCell(
        context=ctx,
        concurrency=level,
        status="valid",
        total_tokens_per_s=total,
        ttft_s=ttft,
        line=ln,
    )


# Column title on the card -> (field, reader).
_COLUMNS = {
    "Phase": "phase",
    "Context": "context",
    "Requests at once": "concurrency",
    "Status": "status",
    "Total tok/s": "total_tokens_per_s",
    "Per request tok/s": "per_request_tokens_per_s",
    "TTFT": "ttft_s",
    "Time between tokens": "tbt_s",
    "Average active requests": "avg_active_requests",
    "Completed requests": "completed_requests",
    "Output tokens": "output_tokens",
    "Measured for": "measured_s",
}
# Every column is required: a card without one would import with that figure silently null.
_REQUIRED = tuple(_COLUMNS)
_PHASES = {"Prefill": "prefill", "Sustained decode": "decode"}


def _value(field: str, text: str) -> object:
    if field in ("context", "status"):
        return text
    if field == "concurrency":
        return concurrency(text)
    raw = figures.optional(text)
    if raw is None:
        return None
    if field in ("ttft_s", "tbt_s", "measured_s"):
        return figures.duration_s(raw)
    if field in ("completed_requests", "output_tokens"):
        return figures.grouped_int(raw)
    return figures.grouped_float(raw)


def measurements(table: CardTable, header_line: int) -> list[CardMeasurement]:
    for title in table.header:
        if title not in _COLUMNS:
            known = ", ".join(_COLUMNS)
            raise Unreadable(header_line, f"known column titles ({known}), got {title!r}")
    missing = [c for c in _REQUIRED if c not in table.header]
    if missing:
        raise Unreadable(header_line, f"the columns {', '.join(missing)}")
    out: list[CardMeasurement] = []
    seen: dict[tuple[str, str, int], int] = {}
    for ln, row in table.rows:
        values: dict[str, object] = {"line": ln}
        for title, text in zip(table.header, row, strict=True):
            field = _COLUMNS[title]
            if field == "phase":
                if text not in _PHASES:
                    raise Unreadable(ln, f"phase 'Prefill' or 'Sustained decode', got {text!r}")
                values[field] = _PHASES[text]
                continue
            try:
                values[field] = _value(field, text)
            except FigureError as exc:
                raise Unreadable(ln, f"column {title!r} to be {exc}") from None
        if not figures.is_context_label(str(values["context"])):
            raise Unreadable(ln, f"a context like '8K', got {values['context']!r}")
        row_m = CardMeasurement.model_validate(values)
        key = (row_m.phase, row_m.context, row_m.concurrency)
        if key in seen:
            raise Unreadable(ln, f"one row per phase/context/requests, same as line {seen[key]}")
        seen[key] = ln
        out.append(row_m)
    return out
