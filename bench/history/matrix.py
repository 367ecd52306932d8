"""What the history's page draws: the card's matrix (contexts x concurrencies, and the
prefill samples for a prefill figure), each cell's series of one figure, each searched for
change points (bench.history.shifts).

A series is what `bench history trend` draws on one line and `changes` searches: one
(host, launch profile, comparable settings). Bounded whatever the history holds, so the
page stays small: a series keeps its newest MAX_POINTS runs (drawn, listed and searched),
a cell its MAX_SERIES series with the newest runs, the matrix its MAX_CONTEXTS smallest
contexts and MAX_COLUMNS lowest concurrencies; what was left out is counted, and the page
says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.export.rows import DECODE_FIGURES, PREFILL_FIGURES
from bench.history import shifts, trend
from bench.history.database import Connection
from bench.history.trend import CellChoice, Point
from bench.verdict.cells import context_order

MAX_POINTS = 60
MAX_SERIES = 4
MAX_CONTEXTS = 16
MAX_COLUMNS = 16
PREFILL = "prefill"  # the column of a context's prefill sample


@dataclass(frozen=True)
class Line:
    """One series of one cell: its newest points (every status), oldest first."""

    host: str | None
    profile: str | None
    settings: dict[str, str]
    points: tuple[Point, ...]
    runs: int  # the series' runs in all (more than len(points) when cut)
    found: shifts.Found | None  # the search over the points with a value

    @property
    def valued(self) -> tuple[Point, ...]:
        return self.found.points if self.found else ()

    @property
    def cut(self) -> bool:
        return self.runs > len(self.points)


@dataclass(frozen=True)
class Square:
    cell: CellChoice
    lines: tuple[Line, ...]
    more_series: int  # series of this cell not shown (beyond MAX_SERIES)


@dataclass(frozen=True)
class Matrix:
    figure: str
    rows: tuple[str, ...]  # contexts
    columns: tuple[str, ...]  # concurrencies as text, and PREFILL
    squares: dict[tuple[str, str], Square]
    more_rows: int
    more_columns: int

    @property
    def lines(self) -> list[Line]:
        return [line for s in self.squares.values() for line in s.lines]


def _names(figures: Sequence[tuple[str, str]]) -> set[str]:
    return {name for name, _ in figures}


def _line(cell: CellChoice, figure: str, points: Sequence[Point]) -> Line:
    shown = tuple(points[-MAX_POINTS:])
    found = shifts.search_points(cell, figure, shown)
    first = points[0]
    return Line(first.host, first.profile, first.settings, shown, len(points),
                found[0] if found else None)  # fmt: skip


def square(
    conn: Connection, cell: CellChoice, figure: str, *, host: str | None, profile: str | None
) -> Square:
    """CELL's series of FIGURE, the series with the newest runs first."""
    groups: dict[tuple[str | None, str | None, str], list[Point]] = {}
    for p in trend.points(conn, cell, figure, host=host, profile=profile):
        groups.setdefault((p.host, p.profile, p.settings_sha256), []).append(p)
    newest = sorted(groups.values(), key=lambda g: g[-1].created_at, reverse=True)
    lines = tuple(_line(cell, figure, g) for g in newest[:MAX_SERIES])
    return Square(cell, lines, max(0, len(newest) - MAX_SERIES))


def build(
    conn: Connection, figure: str, *, host: str | None = None, profile: str | None = None
) -> Matrix:
    """The matrix of FIGURE: a decode figure's cells, a prefill figure's samples (ttft_s
    is both)."""
    decode, prefill = figure in _names(DECODE_FIGURES), figure in _names(PREFILL_FIGURES)
    cells = [c for c in shifts.cells(conn)
             if (c.phase == "decode" and decode) or (c.phase == "prefill" and prefill)]  # fmt: skip
    every_row = context_order(c.context for c in cells)
    levels = sorted({c.concurrency for c in cells if c.phase == "decode"})
    every_column = [str(c) for c in levels] + ([PREFILL] if any(
        c.phase == "prefill" for c in cells) else [])  # fmt: skip
    rows = every_row[:MAX_CONTEXTS]
    columns = every_column[:MAX_COLUMNS]
    squares: dict[tuple[str, str], Square] = {}
    for c in cells:
        column = PREFILL if c.phase == "prefill" else str(c.concurrency)
        if c.context in rows and column in columns:
            squares[(c.context, column)] = square(conn, c, figure, host=host, profile=profile)
    return Matrix(figure, tuple(rows), tuple(columns), squares,
                  len(every_row) - len(rows), len(every_column) - len(columns))  # fmt: skip
