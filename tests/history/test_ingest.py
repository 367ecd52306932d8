"""`bench history ingest` and `trend` end to end on signed bundles of the card's matrix,
against a SQLite file and a real PostgreSQL server (the `db` fixture runs each test on both).
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tarfile
import time
from datetime import UTC, datetime

import pytest

from bench.bundle import seal
from bench.bundle.pack import pack
from bench.card.model import Card
from bench.cli import main
from bench.errors import Exit
from bench.history import database, ingest, schema
from bench.history.database import Target
from tests.bundle.conftest import Keys
from tests.history.conftest import count, environment, run_dir, signed_bundle, unsigned_record
from tests.support.synth import make_results

pytestmark = pytest.mark.timeout(300)


def _trusted(keys: Keys) -> list[str]:
    return ["--allowed-signers", str(keys.allowed)]


def _ingest(db: Target, keys: Keys, *paths: pathlib.Path, more: tuple[str, ...] = ()) -> int:
    argv = ["history", "ingest", *map(str, paths), "--db", db.where, *_trusted(keys), *more]
    return main(argv)


def test_a_card_bundle_is_recorded_once_in_seconds(
    db: Target,
    tmp_path: pathlib.Path,
    card: Card,
    signer: Keys,
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = make_results(card, speed=10.0, trials=3, noise=0.02)
    bundle = signed_bundle(tmp_path, "night", results, signer)
    started = time.perf_counter()
    assert _ingest(db, signer, bundle) == 0
    took_s = time.perf_counter() - started
    out = capsys.readouterr().out
    assert out == f"{bundle}: recorded, run {results.run_id} in {db.where}\n"
    assert took_s < 10.0, f"ingesting a card-sized bundle took {took_s:.1f} s"
    print(f"\ningest of a card bundle ({len(results.cells)} cell trials): {took_s:.2f} s")

    assert _ingest(db, signer, bundle) == 0
    assert "already recorded" in capsys.readouterr().out
    record = unsigned_record(results)
    assert count(db, "runs") == 1
    assert count(db, "cells") == len(record.cells)
    assert count(db, "figures") == len(record.figures)
    with database.connect(db) as conn:
        (run,) = conn.query("SELECT trust, signer, signer_fingerprint, host FROM runs")
    assert run[:2] == ("signed", signer.principal) and str(run[2]).startswith("SHA256:")
    assert run[3] == "gpu01"

    assert main(["history", "trend", "--cell", "8K:64", "--db", db.where]) == 0
    text = capsys.readouterr().out
    values = [
        c.figures.total_tok_s / 10.0
        for c in results.cells
        if (c.context_label, c.concurrency) == ("8K", 64) and c.figures is not None
    ]
    mean = sum(values) / len(values)
    assert f"| {mean:,.4g} ± " in text and "(n=3) | valid |" in text


def test_a_tampered_bundle_is_refused_in_one_line_and_recorded_only_when_unverified(
    db: Target,
    tmp_path: pathlib.Path,
    card: Card,
    signer: Keys,
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = run_dir(tmp_path, "tampered", make_results(card, speed=10.0))
    seal.seal(root, signer.private, now=datetime.now(UTC))
    faster = make_results(card, speed=10.0, scale=lambda ctx, c: 1.1)
    (root / "results.json").write_text(faster.model_dump_json())
    bundle = pack(root, tmp_path / "tampered.tar.gz")

    assert _ingest(db, signer, bundle) == Exit.VERIFY_FAILED
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tampered.tar.gz: does not verify" in err
    assert "results.json" in err
    with schema.opened(db) as conn:
        assert conn.query("SELECT COUNT(*) FROM runs") == [(0,)]

    assert _ingest(db, signer, bundle, more=("--unverified",)) == 0
    assert "recorded (UNVERIFIED)" in capsys.readouterr().out
    with database.connect(db) as conn:
        (row,) = conn.query("SELECT trust, trust_detail, signer FROM runs")
    assert row[0] == "unverified" and "does not verify" not in row[1]
    assert "UNVERIFIED" in row[1] and row[2] is None
    assert main(["history", "trend", "--cell", "8K:1", "--db", db.where]) == 0
    assert "valid (UNVERIFIED) |" in capsys.readouterr().out


def test_a_bundle_without_a_manifest_or_signature_is_refused(
    db: Target, tmp_path: pathlib.Path, card: Card, signer: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = run_dir(tmp_path, "plain", make_results(card))
    assert _ingest(db, signer, plain) == Exit.USAGE
    assert "manifest.json missing" in capsys.readouterr().err
    unsigned = tmp_path / "unsigned.tar.gz"
    with tarfile.open(unsigned, "w:gz") as tar:
        tar.add(plain / "results.json", arcname="unsigned/results.json")
    assert _ingest(db, signer, unsigned) == Exit.VERIFY_FAILED  # as compare refuses it
    assert "manifest.json: missing" in capsys.readouterr().err
    # --unverified does not help: an archive without a manifest is not opened at all.
    assert _ingest(db, signer, unsigned, more=("--unverified",)) == Exit.VERIFY_FAILED
    capsys.readouterr()
    with schema.opened(db) as conn:
        assert conn.query("SELECT COUNT(*) FROM runs") == [(0,)]


def test_a_folder_stands_for_its_bundles_and_one_bad_one_is_named(
    db: Target, tmp_path: pathlib.Path, card: Card, signer: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    for n in range(2):
        results = make_results(card, contexts={"8K"}, seed=n)
        signed_bundle(tmp_path, f"run{n}", results, signer, out=folder)
    other = Keys(tmp_path, "stranger@example.org")
    signed_bundle(tmp_path, "run9", make_results(card, contexts={"8K"}, seed=9), other, out=folder)
    code = _ingest(db, signer, folder)
    out = capsys.readouterr()
    assert code == Exit.VERIFY_FAILED
    assert out.out.count(": recorded, run ") == 2 and "run9.tar.gz: not recorded:" in out.out
    assert out.err.startswith("bench: error: 1 of 3 bundles not recorded; the first: ")
    assert count(db, "runs") == 2


def test_two_ingests_at_once_in_two_processes_record_each_run_once(
    db: Target, tmp_path: pathlib.Path, card: Card, signer: Keys
) -> None:
    """Both start on an empty database, so the schema's creation races too; they take the
    bundles in opposite orders, so each meets the other's runs."""
    bundles = [
        signed_bundle(tmp_path, f"n{n}", make_results(card, contexts={"8K", "32K"}, seed=n), signer)
        for n in range(4)
    ]
    argv = [sys.executable, "-m", "bench", "history", "ingest", "--db", db.where, *_trusted(signer)]
    env = {**os.environ, "BENCH_LOG_LEVEL": "warning"}
    procs = [
        subprocess.Popen([*argv, *map(str, order)], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, env=env)
        for order in (bundles, bundles[::-1])
    ]  # fmt: skip
    outs = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [o[1] for o in outs]
    said = "".join(o[0] for o in outs)
    for bundle in bundles:
        assert said.count(f"{bundle}: recorded,") == 1
        assert said.count(f"{bundle}: already recorded,") == 1
    assert count(db, "runs") == 4
    one = unsigned_record(make_results(card, contexts={"8K", "32K"}))
    assert count(db, "cells") == 4 * len(one.cells)


def test_a_version_1_history_is_upgraded_by_the_next_ingest_and_keeps_its_runs(
    db: Target,
    tmp_path: pathlib.Path,
    card: Card,
    signer: Keys,
    capsys: pytest.CaptureFixture[str],
) -> None:
    old = make_results(card, contexts={"8K"}, seed=1)
    with database.connect(db) as conn:
        assert schema.upgrade(conn, to=1) == (0, 1)
        assert ingest.write(conn, unsigned_record(old, environment())) == "recorded"
    new = make_results(card, contexts={"8K"}, seed=2)
    new = new.model_copy(update={"run_id": "later", "created_at": "2026-12-03T00:00:00Z"})
    assert _ingest(db, signer, signed_bundle(tmp_path, "later", new, signer)) == 0
    capsys.readouterr()
    with database.connect(db) as conn:
        versions = conn.query("SELECT version FROM schema_version ORDER BY version")
        runs = conn.query(
            "SELECT DISTINCT run_id FROM series_per_cell WHERE context = '8K' "
            "AND concurrency = 1 ORDER BY run_id"
        )
        latest = conn.query(
            "SELECT DISTINCT run_id FROM latest_per_cell WHERE context = '8K' AND concurrency = 1"
        )
    assert versions == [(v.number,) for v in schema.VERSIONS]
    assert runs == sorted([(old.run_id,), ("later",)])
    assert latest == [("later",)]


@pytest.mark.integration
def test_a_database_that_is_down_is_one_line_and_exit_history(
    tmp_path: pathlib.Path, card: Card, signer: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    bundle = signed_bundle(tmp_path, "b", make_results(card, contexts={"8K"}), signer)
    port = 9  # discard: nothing listens there
    down = Target("postgresql", f"postgresql://bench@127.0.0.1:{port}/history")
    assert _ingest(down, signer, bundle) == Exit.HISTORY
    err = capsys.readouterr().err
    assert err.startswith(f"bench: error: history database {down.where}: ")
    assert err.count("\n") == 1
