"""A history written before schema 4 gets `change_points` and `history_long` when a newer
bench opens it, its change points searched once (bench.history.schema, bench.history.marks)."""

from __future__ import annotations

import pathlib

from bench.card.model import Card
from bench.history import database, ingest, marks, schema, shifts
from bench.history.database import Target
from tests.history.conftest import nights


def test_a_version_3_history_gets_the_view_and_the_change_points_changes_finds(
    tmp_path: pathlib.Path, card: Card
) -> None:
    target = Target("sqlite", str(tmp_path / "h.sqlite3"))
    made = nights(card, 12, slow_from=7, contexts={"8K"})
    with database.connect(target) as conn:
        assert schema.upgrade(conn, to=3) == (0, 3)
        for record in made:
            assert ingest.write(conn, record) == "recorded"
    with schema.opened(target) as conn:
        (version,) = conn.query("SELECT MAX(version) FROM schema_version")[0]
        marked = conn.query(
            "SELECT DISTINCT run_id, cell, figure FROM history_long WHERE change_point = 1"
        )
        found = {
            (f.points[c.index].run_id, str(f.cell), f.figure)
            for f in shifts.find(conn)
            for c in f.search.changes
        }
        rows = conn.query("SELECT COUNT(*) FROM history_long")[0][0]
        figures = conn.query("SELECT COUNT(*) FROM figures")[0][0]
        assert marks.refresh_all(conn) == len(found)  # searching again changes nothing
    assert version == 4
    assert ("night-07", "8K:64", "total_tok_s") in set(marked)
    assert set(marked) == found
    assert rows == figures  # every cell of these nights has its figures


def test_each_ingest_keeps_the_marks_of_the_series_it_joins(
    tmp_path: pathlib.Path, card: Card
) -> None:
    target = Target("sqlite", str(tmp_path / "h.sqlite3"))
    made = nights(card, 12, slow_from=7, contexts={"8K"})
    seen: list[set[str]] = []
    with schema.opened(target) as conn:
        for record in made:
            ingest.write(conn, record, search=True)
            marked = {
                r[0] for r in conn.query(
                    "SELECT DISTINCT run_id FROM history_long WHERE change_point = 1 "
                    "AND cell = '8K:64' AND figure = 'total_tok_s'"
                )
            }  # fmt: skip
            seen.append(marked)
    # three runs each side at least before it can show; once shown it stays
    assert seen[:8] == [set()] * 8 and seen[-1] == {"night-07"}
    first = seen.index({"night-07"})
    assert seen[first:] == [{"night-07"}] * (len(seen) - first)
