"""`bench history changes` end to end: signed bundles of a nightly series ingested into a
SQLite history, one cell 6 % slower from run 9 on; the change is named by its runs."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from bench.card.model import Card
from bench.cli import main
from tests.bundle.conftest import Keys
from tests.history.conftest import environment, signed_bundle
from tests.support.synth import make_results

pytestmark = [pytest.mark.subprocess, pytest.mark.timeout(120)]
RUNS, FIRST_BAD = 12, 9


def _env(n: int) -> dict[str, Any]:
    env = environment(image=f"sha256:{n:064x}")
    env["image"]["labels"]["bench.vllm.commit"] = f"{n:040x}"
    return env


def test_a_planted_shift_in_ingested_bundles_is_named_with_its_runs_and_bisect(
    tmp_path: pathlib.Path, card: Card, signer: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    night = tmp_path / "nights"
    night.mkdir()
    for n in range(1, RUNS + 1):
        slow = 1.06 if n >= FIRST_BAD else 1.0

        def scale(ctx: str, conc: int, slow: float = slow) -> float:
            return 1 / slow if conc == 64 else 1.0

        results = make_results(card, contexts={"8K"}, seed=n, noise=0.005, scale=scale)
        results = results.model_copy(
            update={"run_id": f"night-{n:02d}", "created_at": f"2026-11-{n:02d}T02:00:00Z"}
        )
        signed_bundle(tmp_path, f"night-{n:02d}", results, signer, _env(n), out=night)
    db = str(tmp_path / "history.sqlite3")
    allowed = ["--allowed-signers", str(signer.allowed)]
    assert main(["history", "ingest", str(night), "--db", db, *allowed]) == 0
    capsys.readouterr()

    assert main(["history", "changes", "--db", db, "--figure", "total_tok_s"]) == 0
    out = capsys.readouterr().out
    assert "1 change found" in out, out
    assert "8K:64 total_tok_s, host gpu01" in out
    assert "last good night-08 (2026-11-08T02:00:00Z" in out
    assert "first bad night-09 (2026-11-09T02:00:00Z" in out
    assert f"make bisect HOST=gpu01 GOOD={8:040x} BAD={9:040x} CELL=64x8K FIGURE=total" in out

    # Only the cell asked about; the other cells of 8K are flat and searched without a find.
    assert main(["history", "changes", "--db", db, "--cell", "8K:1"]) == 0
    assert "4 series searched, 0 changes found" in capsys.readouterr().out
