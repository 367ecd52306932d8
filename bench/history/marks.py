"""The change points `bench history changes` finds, kept in the table `change_points` (schema
4) so that SQL readers see them: the view `history_long` marks each first run after a change.

A series is what `changes` searches (bench.history.shifts): one cell, figure, host, launch
profile and comparable settings, each run's value the geometric mean of its valid trials,
the figures those a verdict is about (shifts.SEARCHED). A new run can move, add or remove
the changes of its own series (the search looks at the whole series), so every bundle's
ingest searches again each series the run is in and replaces their rows, in the ingest's
transaction (on PostgreSQL under an advisory lock: two ingests of one series at once take
turns, the second seeing the first's run); the upgrade to schema 4 searches every series of
the history once. The rows are then what `bench history changes` prints for the history at
that moment.
"""

from __future__ import annotations

from collections.abc import Iterable

from bench.history import rows, shifts, trend
from bench.history.database import Connection
from bench.history.trend import CellChoice

# pg_advisory_xact_lock key of the change points' writers ("marks" in ASCII).
LOCK = 0x6D61726B73

COLUMNS = (
    "manifest_sha256", "phase", "context", "concurrency", "figure", "host", "launch_profile",
    "settings_sha256", "previous_manifest_sha256", "p_value", "shift_pct", "shift_low_pct",
    "shift_high_pct",
)  # fmt: skip
INSERT = (
    f"INSERT INTO change_points ({', '.join(COLUMNS)}) "  # noqa: S608 (constants)
    f"VALUES ({', '.join('?' for _ in COLUMNS)})"
)
_DELETE_SERIES = (
    "DELETE FROM change_points WHERE phase = ? AND context = ? AND concurrency = ? "
    "AND figure = ? AND COALESCE(host, '') = ? AND COALESCE(launch_profile, '') = ? "
    "AND settings_sha256 = ?"
)


def _write(conn: Connection, found: shifts.Found, settings_sha256: str) -> int:
    """FOUND's changes in place of its series' rows; how many."""
    cell = found.cell
    key = (cell.phase, cell.context, cell.concurrency, found.figure)
    conn.execute(_DELETE_SERIES, (*key, found.host or "", found.profile or "", settings_sha256))
    for change in found.search.changes:
        good, bad = found.points[change.index - 1], found.points[change.index]
        s = change.shift
        conn.execute(
            INSERT,
            (bad.manifest_sha256, *key, found.host, found.profile, settings_sha256,
             good.manifest_sha256, change.p_value, s.delta_pct, s.low_pct, s.high_pct),
        )  # fmt: skip
    return len(found.search.changes)


def _cells(record: rows.Record) -> list[CellChoice]:
    """The record's cells that `changes` searches, once each (CELL_COLUMNS order)."""
    keys = dict.fromkeys((str(c[1]), str(c[2]), int(c[4])) for c in record.cells)
    return [CellChoice(*k) for k in keys if k[0] in shifts.SEARCHED]


def refresh(conn: Connection, record: rows.Record) -> int:
    """Search again every series RECORD's run is in; the changes they now have."""
    if conn.dialect == "postgresql":
        conn.query("SELECT pg_advisory_xact_lock(?)", (LOCK,))
    run = record.run
    mine = (run["host"], run["launch_profile"], run["settings_sha256"])
    total = 0
    for cell in _cells(record):
        for figure in shifts.SEARCHED[cell.phase]:
            points = trend.points(
                conn, cell, figure, host=run["host"], profile=run["launch_profile"]
            )
            found = {
                (f.host, f.profile, f.points[0].settings_sha256): f
                for f in shifts.search_points(cell, figure, points)
            }
            series = found.get(mine)
            if series is None:  # no valued run in it: nothing to mark
                key = (cell.phase, cell.context, cell.concurrency, figure)
                conn.execute(_DELETE_SERIES, (*key, mine[0] or "", mine[1] or "", mine[2]))
                continue
            total += _write(conn, series, mine[2])
    return total


def refresh_all(conn: Connection) -> int:
    """Every series of the history searched, its rows replaced; the changes found."""
    conn.execute("DELETE FROM change_points")
    return sum(_write(conn, f, f.points[0].settings_sha256) for f in _every(conn))


def _every(conn: Connection) -> Iterable[shifts.Found]:
    return (f for f in shifts.find(conn) if f.points)
