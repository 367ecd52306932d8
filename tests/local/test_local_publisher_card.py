"""`bench local --card CARD.json` for another publisher's card (what `make bench CARD=...`
runs without HOST): a twin fitted to the card, the card's traffic, a signed bundle a
stranger verifies, and the verdict by the publisher's definitions."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.errors import Exit
from tests.publishers.paths import DATA

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "HOME": str(home), "BENCH_LOG_FORMAT": "json"}
    env.pop("VLLM_API_KEY", None)
    env.pop("BENCH_API_KEY", None)
    return env


def _bench(args: list[str], home: Path, timeout_s: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", *args],
        check=False, env=_env(home), capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


@pytest.fixture(scope="module")
def card(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("card") / "ix101.json"
    done = _bench(
        ["card", "import", "--from", "inferencex", str(DATA / "inferencex"), "--select",
         "id=101", "-o", str(path)],
        path.parent, 60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return path


def test_a_publishers_card_runs_on_a_twin_fitted_to_it_to_a_verified_bundle(
    card: Path, tmp_path: Path
) -> None:
    home, out = tmp_path / "home", tmp_path / "results" / "ix"
    done = _bench(["local", "--speed", "4", "--out", str(out), "--card", str(card)], home, 360)
    # The fitted twin at speed 4 can miss the card's TTFT on a loaded machine (docs/cards.md):
    # either verdict, but a verdict, by the publisher's definitions.
    assert done.returncode in (Exit.OK, Exit.NOT_REPRODUCED), done.stderr[-3000:]
    assert "twin fitted to inferencex's point 101" in done.stderr
    assert "# Reproduce inferencex's point 101" in done.stdout
    assert "median_intvty" in done.stdout and "REPRODUCED within ±5 %" in done.stdout
    profile, spec = out.with_name("ix-twin.json"), out.with_name("ix-card.toml")
    assert '"name": "fitted-inferencex"' in profile.read_text()
    assert "concurrencies = [4]" in spec.read_text()
    bundle = out.with_name("ix.tar.gz")
    allowed = home / ".config" / "bench" / "allowed_signers"
    check = _bench(["verify", str(bundle), "--allowed-signers", str(allowed)], home, 60)
    assert check.returncode == 0, check.stderr


def test_a_publishers_card_brings_its_traffic_so_a_workload_too_is_refused(
    card: Path, tmp_path: Path
) -> None:
    done = _bench(["local", "--card", str(card), "--workload", "smoke"], tmp_path / "home", 60)
    assert done.returncode == Exit.USAGE, done.stderr
    assert "is a publisher's card: it brings its own traffic" in done.stderr
    assert not (tmp_path / "home" / ".config").exists()  # refused before anything was made
