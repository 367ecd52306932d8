"""The schema's versions and upgrades, on SQLite files (bench.history.schema)."""

from __future__ import annotations

import pathlib

import pytest

from bench.card.model import Card
from bench.errors import HistoryError
from bench.history import database, ingest, schema
from bench.history.database import Target
from tests.history.conftest import count, environment, unsigned_record
from tests.support.synth import make_results
from tests.support.workload_results import rate_results


def _target(tmp: pathlib.Path) -> Target:
    return Target("sqlite", str(tmp / "h.sqlite3"))


def _versions(target: Target) -> list[int]:
    with database.connect(target) as conn:
        return [int(r[0]) for r in conn.query("SELECT version FROM schema_version ORDER BY 1")]


def test_a_new_history_is_at_the_latest_version_and_opening_it_again_changes_nothing(
    tmp_path: pathlib.Path,
) -> None:
    target = _target(tmp_path)
    with database.connect(target) as conn:
        assert schema.upgrade(conn) == (0, schema.LATEST)
        assert schema.upgrade(conn) == (schema.LATEST, schema.LATEST)
    assert _versions(target) == [v.number for v in schema.VERSIONS]


def test_upgrade_from_version_1_keeps_the_rows_and_adds_the_views(
    tmp_path: pathlib.Path, card: Card
) -> None:
    target = _target(tmp_path)
    record = unsigned_record(make_results(card, speed=10.0, trials=2))
    with database.connect(target) as conn:
        assert schema.upgrade(conn, to=1) == (0, 1)
        assert ingest.write(conn, record) == "recorded"
        with pytest.raises(HistoryError, match="no such table: series_per_cell"):
            conn.query("SELECT COUNT(*) FROM series_per_cell")
    with schema.opened(target) as conn:
        latest = conn.query(
            "SELECT run_id, trial, value FROM latest_per_cell WHERE phase = 'decode' "
            "AND context = '8K' AND concurrency = 64 AND figure = 'total_tok_s' ORDER BY trial"
        )
    assert _versions(target) == [v.number for v in schema.VERSIONS]
    values = [
        f[6] for f in record.figures if f[1:4] == ("decode", "8K", 64) and f[5] == "total_tok_s"
    ]
    assert latest == [(record.run["run_id"], t, v) for t, v in enumerate(values)]
    assert count(target, "runs") == 1
    assert count(target, "figures") == len(record.figures)


def test_latest_per_cell_keeps_the_newest_run_per_host(tmp_path: pathlib.Path, card: Card) -> None:
    target = _target(tmp_path)
    old = make_results(card, contexts={"8K"})
    new = old.model_copy(update={"run_id": "newer", "created_at": "2026-12-03T00:00:00Z"})
    elsewhere = old.model_copy(update={"run_id": "gpu02-old", "created_at": "2026-11-01T00:00Z"})
    with schema.opened(target) as conn:
        ingest.write(conn, unsigned_record(old))
        ingest.write(conn, unsigned_record(new))
        ingest.write(conn, unsigned_record(elsewhere, environment(host="gpu02")))
        runs = conn.query(
            "SELECT DISTINCT host, run_id FROM latest_per_cell WHERE context = '8K' "
            "AND concurrency = 1 ORDER BY host"
        )
    assert runs == [("gpu01", "newer"), ("gpu02", "gpu02-old")]


def test_a_history_newer_than_this_bench_is_refused(tmp_path: pathlib.Path) -> None:
    target = _target(tmp_path)
    with database.connect(target) as conn:
        schema.upgrade(conn)
        conn.execute(
            "INSERT INTO schema_version VALUES (?, ?, ?)", (schema.LATEST + 1, "now", "future")
        )
    with pytest.raises(HistoryError, match="is newer than this bench's"), schema.opened(target):
        pass


def test_the_same_record_twice_is_one_run(tmp_path: pathlib.Path, card: Card) -> None:
    target = _target(tmp_path)
    record = unsigned_record(make_results(card))
    with schema.opened(target) as conn:
        assert ingest.write(conn, record) == "recorded"
        assert ingest.write(conn, record) == "already recorded"
    assert count(target, "runs") == 1
    assert count(target, "cells") == len(record.cells)


def test_upgrade_from_version_2_keeps_the_rows_and_adds_workloads(
    tmp_path: pathlib.Path, card: Card
) -> None:
    target = _target(tmp_path)
    old = unsigned_record(make_results(card, contexts={"8K"}))
    with database.connect(target) as conn:
        assert schema.upgrade(conn, to=2) == (0, 2)
        assert ingest.write(conn, old) == "recorded"
        with pytest.raises(HistoryError, match="no such table: workloads"):
            conn.query("SELECT COUNT(*) FROM workloads")
    points = unsigned_record(rate_results(trials=2))
    with schema.opened(target) as conn:
        assert ingest.write(conn, points) == "recorded"
        latest = conn.query(
            "SELECT DISTINCT run_id, workload, context FROM latest_per_point ORDER BY context"
        )
        cards = conn.query("SELECT COUNT(*) FROM series_per_point WHERE phase = 'decode'")
    assert _versions(target) == [v.number for v in schema.VERSIONS]
    assert latest == [("wl-run", "sweep", c) for c in sorted(("1/s", "4/s", "16/s"))]
    assert cards == [(0,)]
    assert count(target, "runs") == 2 and count(target, "workloads") == 1
    assert count(target, "cells") == len(old.cells) + len(points.cells)
    assert count(target, "figures") == len(old.figures) + len(points.figures)
