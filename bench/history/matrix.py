"""What the history's page draws: the card's matrix (contexts x concurrencies, and the
prefill samples for a prefill figure), each cell's series of one figure, each searched for
change points (bench.history.shifts).

A series is what `bench history trend` draws on one line and `changes` searches: one
(host, launch profile, comparable settings). Bounded whatever the history holds, so the
page stays small: a series keeps its newest MAX_POINTS runs (drawn, listed and searched),
a cell its MAX_SERIES series with the newest runs, the matrix its MAX_CONTEXTS smallest
contexts and MAX_COLUMNS lowest concurrencies; what was left out is counted, and the page
says so.

A workload figure (bench.history.workload_rows) has a matrix of its own (`points`): a row
per workload (its name and hash: one workload's points are one traffic), a column per point
(`4/s`, `inf/s`, `closed:8`, `trace`, by rate), or the one column `capacity` for a capacity
search's; its squares are series as the card's are, bounded the same way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bench.export.rows import DECODE_FIGURES, PREFILL_FIGURES
from bench.history import shifts, trend
from bench.history import workload_rows as wl
from bench.history.database import Connection
from bench.history.trend import PHASE_FIGURES, CellChoice, Point
from bench.verdict.cells import context_order

MAX_POINTS = 60
MAX_SERIES = 4
MAX_CONTEXTS = 16
MAX_COLUMNS = 16
PREFILL = "prefill"  # the column of a context's prefill sample
CARD_CORNER = "Context \\ requests at once"
POINTS_CORNER = "Workload \\ point (offered requests/s at server speed, or closed:C streams)"
CAPACITY_CORNER = "Workload \\ SLO capacity (each search a trial)"


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
    workload: str | None = None  # a point's: its workload (name and hash)

    @property
    def title(self) -> str:
        """What the square is: its cell, and a point's workload."""
        return f"{self.cell} of workload {self.workload}" if self.workload else str(self.cell)


@dataclass(frozen=True)
class Matrix:
    figure: str
    rows: tuple[str, ...]  # contexts
    columns: tuple[str, ...]  # concurrencies as text, and PREFILL
    squares: dict[tuple[str, str], Square]
    more_rows: int
    more_columns: int
    corner: str = CARD_CORNER  # what its rows and columns are

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


def _groups(
    conn: Connection, cell: CellChoice, figure: str, *, host: str | None, profile: str | None
) -> list[list[Point]]:
    """CELL's series of FIGURE, the series with the newest runs first."""
    groups: dict[tuple[str | None, str | None, str], list[Point]] = {}
    for p in trend.points(conn, cell, figure, host=host, profile=profile):
        groups.setdefault((p.host, p.profile, p.settings_sha256), []).append(p)
    return sorted(groups.values(), key=lambda g: g[-1].created_at, reverse=True)


def _square(
    cell: CellChoice, figure: str, newest: list[list[Point]], workload: str | None = None
) -> Square:
    lines = tuple(_line(cell, figure, g) for g in newest[:MAX_SERIES])
    return Square(cell, lines, max(0, len(newest) - MAX_SERIES), workload)


def square(
    conn: Connection, cell: CellChoice, figure: str, *, host: str | None, profile: str | None
) -> Square:
    """CELL's series of FIGURE, the series with the newest runs first."""
    return _square(cell, figure, _groups(conn, cell, figure, host=host, profile=profile))


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


def points(
    conn: Connection, figure: str, *, host: str | None = None, profile: str | None = None
) -> Matrix | None:
    """The workloads' matrix of FIGURE: a row per workload, a column per point (or the
    capacity); None when FIGURE is no figure of a workload's point or capacity."""
    phases = [p for p in (wl.WORKLOAD_PHASE, wl.CAPACITY_PHASE) if figure in PHASE_FIGURES[p]]
    if not phases:
        return None
    cells = [c for c in shifts.cells(conn) if c.phase in phases]
    found: dict[tuple[str, str], tuple[CellChoice, list[list[Point]]]] = {}
    for c in cells:
        split: dict[str, list[list[Point]]] = {}
        for g in _groups(conn, c, figure, host=host, profile=profile):
            split.setdefault(trend.workload_of(g[0].settings) or "—", []).append(g)
        for name, groups in split.items():
            found[(name, str(c))] = (c, groups)
    every_row = sorted({name for name, _ in found})
    every_column = list(dict.fromkeys(column for _, column in found))  # shifts.cells' order
    rows, columns = every_row[:MAX_CONTEXTS], every_column[:MAX_COLUMNS]
    squares = {
        (name, column): _square(c, figure, groups, name)
        for (name, column), (c, groups) in found.items()
        if name in rows and column in columns
    }
    corner = CAPACITY_CORNER if phases == [wl.CAPACITY_PHASE] else POINTS_CORNER
    return Matrix(figure, tuple(rows), tuple(columns), squares,
                  len(every_row) - len(rows), len(every_column) - len(columns), corner)  # fmt: skip
