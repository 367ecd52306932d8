"""A real run on the twin, sealed, recorded and shown: the history's numbers are the run's."""

from __future__ import annotations

import json
import pathlib
import subprocess
from datetime import UTC, datetime

import pytest

from bench.bundle import seal
from bench.bundle.pack import pack
from bench.history import database
from bench.history.database import Target
from bench.results import Results
from tests.bundle.conftest import Keys
from tests.support import procs
from tests.support.twinproc import start_twin

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]
SPEED = 5.0


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return procs.run_bench(*args, timeout_s=500)


def test_a_twin_run_is_recorded_with_its_profile_and_its_figures_at_server_speed(
    tmp_path: pathlib.Path, signer: Keys
) -> None:
    run = tmp_path / "run"
    with start_twin("published", speed=SPEED) as twin:
        done = _bench(
            "run", "--url", twin.url, "--contexts", "8K", "--prefill-only-contexts",
            "--concurrencies", "1", "2", "--duration", "5", "--out", str(run),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
    seal.seal(run, signer.private, now=datetime.now(UTC))
    bundle = pack(run, tmp_path / "run.tar.gz")
    db = Target("sqlite", str(tmp_path / "h.sqlite3"))
    trusted = ("--allowed-signers", str(signer.allowed))

    done = _bench("history", "ingest", str(bundle), "--db", db.where, *trusted)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{bundle}: recorded, run ")

    results = Results.model_validate(json.loads((run / "results.json").read_text()))
    cell = results.cell("8K", 2)
    assert cell is not None and cell.figures is not None
    with database.connect(db) as conn:
        (row,) = conn.query("SELECT launch_profile, twin, speed_factor, run_id FROM runs")
        (value,) = conn.query(
            "SELECT value FROM figures WHERE context = '8K' AND concurrency = 2 "
            "AND figure = 'total_tok_s'"
        )
    assert row == ("twin:published", 1, results.speed_factor, results.run_id)
    assert value[0] == pytest.approx(cell.figures.total_tok_s / results.speed_factor)

    shown = _bench("history", "trend", "--cell", "8K:2", "--db", db.where,
                   "--profile", "twin:published")  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert f"| {value[0]:,.4g} | {cell.status} |" in shown.stdout
    assert "Series 1 of 1: cell 8K:2, total_tok_s, 1 runs" in shown.stdout
