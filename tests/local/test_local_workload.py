"""`bench local --workload FILE` (what `make bench WORKLOAD=...` runs without HOST): a small
workload against the twin, end to end, to a signed bundle a stranger verifies."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.support.workloads import rate_toml

pytestmark = pytest.mark.integration

SMALL = rate_toml("local-small", (1, 2, 4), 40, (256, 32), seed=3, range_ratio=0.5,
                  description="3 rates, 40 requests a point, 256 in, 32 out")  # fmt: skip


def _env(home: Path) -> dict[str, str]:
    env = {**os.environ, "HOME": str(home), "BENCH_LOG_FORMAT": "json"}
    env.pop("VLLM_API_KEY", None)
    env.pop("BENCH_API_KEY", None)
    return env


def test_a_workload_file_ends_in_a_verified_bundle_and_no_card_verdict(tmp_path: Path) -> None:
    workload = tmp_path / "small.toml"
    workload.write_text(SMALL)
    home, out = tmp_path / "home", tmp_path / "results" / "wl1"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "local", "--speed", "20", "--out", str(out),
         "--workload", str(workload), "--slo", "ttft_p99<=30s"],
        check=False, env=_env(home), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no verdict against a card: a workload is not the card's matrix" in proc.stdout
    assert "verdict against the card, as a page" not in proc.stdout
    bundle = out.with_name("wl1.tar.gz")
    allowed = home / ".config" / "bench" / "allowed_signers"
    check = subprocess.run(
        [sys.executable, "-m", "bench", "verify", str(bundle), "--allowed-signers", str(allowed)],
        check=False, env=_env(home), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    with tarfile.open(bundle) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/results.json"))
        extracted = tar.extractfile(member)
        assert extracted is not None
        results = json.load(extracted)
        names = {Path(n).name for n in tar.getnames()}
    assert {"schedule.jsonl", "manifest.json.sig", "tables.md"} <= names
    run = results["workload"]
    assert run["workload"]["name"] == "local-small" and run["source"] == str(workload)
    assert run["workload"]["slo"]["ttft_p99_s"] == 30.0  # --slo reached bench run
    assert [p["requests"] for p in run["points"]] == [40, 40, 40]
    print(f"bench local --workload (3 points x 40 requests, speed 20): {took:.1f} s")


def test_a_bad_workload_is_refused_before_the_twin_starts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "local", "--out", str(tmp_path / "r"),
         "--workload", str(tmp_path / "missing.toml")],
        check=False, env=_env(home), capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("bench: error: workload ")
    assert "does not exist" in proc.stderr
    assert not home.exists()  # not even the signing key was made
