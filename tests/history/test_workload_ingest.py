"""A workload run on the real twin (`bench run --workload`), sealed and recorded with
`bench history ingest` in SQLite and in PostgreSQL (the `db` fixture runs each test on
both): its points are the history's cells with the figures `bench export` gives them,
`bench history trend --cell 2/s` shows them, the same bundle twice is one run, and a
history that recorded the run before it kept workload points (schema 2) gets them when the
bundle is ingested again."""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
from datetime import UTC, datetime

import pytest

from bench.bundle import seal
from bench.bundle.pack import pack
from bench.cli import main
from bench.export import points as export_points
from bench.history import database, ingest, rows, schema, workload_rows
from bench.history.database import Target
from bench.results import Results
from bench.verdict import run_source
from tests.bundle.conftest import Keys
from tests.history.conftest import count
from tests.support.priority import prioritize
from tests.support.twinproc import start_twin
from tests.support.workloads import rate_toml

pytestmark = [pytest.mark.integration, pytest.mark.timed, pytest.mark.timeout(600)]
SPEED = 2.0  # 5x fast sent late when CI loaded the machine (lateness p99 2 s at 24/s)
RATES = (2.0, 4.0)
SPEC = rate_toml("history-small", RATES, 40, (64, 8), seed=3)


@pytest.fixture(scope="module")
def twin_run(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    """One workload run against the twin (profile tiny, 2x fast): two rates, 40 requests
    each, 64 tokens in and 8 out. Each test seals a copy of it."""
    base = tmp_path_factory.mktemp("workload-history")
    spec = base / "small.toml"
    spec.write_text(SPEC, encoding="utf-8")
    # The twin and its client run ahead of the suite (tests/support/priority.py, marker
    # `timed`): at 2x, a loaded fresh clone's make test still sent late (lateness p99 3.9 s
    # at 8/s, beside the million-row dump test) and no point was valid.
    with start_twin("tiny", speed=SPEED) as twin:
        prioritize(twin.proc.pid)
        argv = [sys.executable, "-m", "bench", "run", "--url", twin.url, "--workload", str(spec),
                "--out", str(base / "run")]  # fmt: skip
        with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
            prioritize(p.pid)
            _, err = p.communicate(timeout=300)
    assert p.returncode == 0, err[-3000:]
    return base / "run"


def _bundle(twin_run: pathlib.Path, tmp_path: pathlib.Path, keys: Keys) -> pathlib.Path:
    run = shutil.copytree(twin_run, tmp_path / "run")
    seal.seal(run, keys.private, now=datetime.now(UTC))
    return pack(run, tmp_path / "run.tar.gz")


def _ingest(db: Target, keys: Keys, bundle: pathlib.Path) -> int:
    return main(["history", "ingest", str(bundle), "--db", db.where,
                 "--allowed-signers", str(keys.allowed)])  # fmt: skip


def _results(twin_run: pathlib.Path) -> Results:
    return Results.model_validate(json.loads((twin_run / "results.json").read_text()))


def test_a_twin_workload_bundle_is_recorded_point_by_point(
    db: Target,
    tmp_path: pathlib.Path,
    twin_run: pathlib.Path,
    signer: Keys,
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = _results(twin_run)
    run = results.workload
    assert run is not None and len(run.points) == len(RATES)
    bundle = _bundle(twin_run, tmp_path, signer)
    assert _ingest(db, signer, bundle) == 0
    assert capsys.readouterr().out == f"{bundle}: recorded, run {results.run_id} in {db.where}\n"
    assert _ingest(db, signer, bundle) == 0
    assert "already recorded" in capsys.readouterr().out
    assert count(db, "runs") == 1 and count(db, "workloads") == 1

    with database.connect(db) as conn:
        (row,) = conn.query("SELECT name, sha256, kind, seed, prompt_sizing FROM workloads")
        cells = conn.query(
            "SELECT context, concurrency, trial, status, reason FROM cells "
            "WHERE phase = 'workload' ORDER BY trial, context"
        )
        figures = {
            (str(r[0]), str(r[1])): float(r[2])
            for r in conn.query(
                "SELECT context, figure, value FROM figures WHERE phase = ?", ["workload"]
            )
        }
        settings = conn.query("SELECT settings_json FROM runs")[0][0]
        latest = conn.query("SELECT DISTINCT run_id, workload FROM latest_per_point")
    assert row == ("history-small", run.sha256, "rate", 3, run.prompt_sizing)
    assert json.loads(settings)["workload"] == f"history-small ({run.sha256[:12]})"
    assert latest == [(results.run_id, "history-small")]
    # A cell per point, keyed by its offered rate at server speed, with the point's status.
    assert sorted((c[0], c[1], c[2]) for c in cells) == sorted((f"{r:g}/s", 0, 0) for r in RATES)
    by_label = {c[0]: c for c in cells}
    exported = export_points.point_rows(results)
    valid = 0
    for p, shown in zip(run.points, exported, strict=True):
        assert p.offered_rate is not None
        label = f"{p.offered_rate / SPEED:g}/s"
        assert by_label[label][3] == p.status
        if p.status != "valid":
            assert not [k for k in figures if k[0] == label]
            continue
        valid += 1
        for name, _, column in workload_rows.POINT_SOURCES:  # export's column of each
            if shown[column] is None:
                assert (label, name) not in figures, name
            else:
                assert figures[(label, name)] == pytest.approx(shown[column]), name
        assert figures[(label, "output_tok_s")] == pytest.approx(p.output_tok_s / SPEED)
    assert valid, [p.reasons for p in run.points]  # an idle twin serves 2 and 4 requests/s

    assert main(["history", "trend", "--cell", "4/s", "--db", db.where]) == 0
    text = capsys.readouterr().out
    assert f"cell 4/s of workload history-small ({run.sha256[:12]}), output_tok_s, 1 runs" in text
    four = next(p for p in run.points if p.offered_rate == 4.0 * SPEED)
    if four.status == "valid":
        assert f"| {four.output_tok_s / SPEED:,.4g} | valid |" in text


def test_a_history_that_recorded_the_run_without_its_points_gets_them(
    db: Target,
    tmp_path: pathlib.Path,
    twin_run: pathlib.Path,
    signer: Keys,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bundle = _bundle(twin_run, tmp_path, signer)
    how = run_source.Verification((signer.allowed,))
    record = ingest.read_bundle(bundle, how, now=datetime.now(UTC))
    # What the bench before schema 3 recorded of a workload run: its run row, nothing else.
    with database.connect(db) as conn:
        assert schema.upgrade(conn, to=2) == (0, 2)
        assert ingest.write(conn, rows.Record(record.run, (), ())) == "recorded"
    assert _ingest(db, signer, bundle) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{bundle}: workload points recorded, run ")
    with database.connect(db) as conn:
        versions = conn.query("SELECT version FROM schema_version ORDER BY version")
    assert versions == [(v.number,) for v in schema.VERSIONS]
    assert count(db, "runs") == 1 and count(db, "workloads") == 1
    assert count(db, "cells") == len(record.cells) == len(RATES)
    assert count(db, "figures") == len(record.figures)
    assert _ingest(db, signer, bundle) == 0
    assert "already recorded" in capsys.readouterr().out
