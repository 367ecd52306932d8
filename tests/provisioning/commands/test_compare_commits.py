"""`provision compare-commits` end to end: an image per commit built on the test host (real
sshd + real Docker), the twin's sweep in each, two verified bundles, `bench compare` B vs A."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.bundle.verify import verify_bundle
from bench.errors import Exit
from provisioning.image.build import COMMIT_LABEL
from tests.provisioning.conftest import ROOT, SshTestHost
from tests.provisioning.flow.test_flow import SMALL_SWEEP, _containers

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.docker]

COMMIT_A, COMMIT_B = "1a2b3c4d5e6f", "abcdef0123456789abcdef0123456789abcdef01"


def test_two_commits_give_two_images_two_bundles_and_a_compare_naming_both_commits(
    ssh_host: SshTestHost, python_base: str, tmp_path: Path
) -> None:
    run_id = f"cc-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "BENCH_LOG_FORMAT": "json"}
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "provisioning", "compare-commits", ssh_host.alias,
         "--profile", "twin", "--commit-a", COMMIT_A, "--commit-b", COMMIT_B.upper(),
         "--build-arg", f"PYTHON_BASE={python_base}", "--run-id", run_id,
         # One sweep a side keeps this end-to-end test short; the default three, interleaved,
         # are tested in tests/verdict/test_compare_order.py.
         "--trials-per-side", "1",
         "--results", str(tmp_path / "results"),
         "--allowed-signers", str(tmp_path / "allowed_signers"), *SMALL_SWEEP[1:]],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=1200,
    )  # fmt: skip
    took = time.monotonic() - started
    out, err = proc.stdout, proc.stderr
    # One run a side: the verdict shows the raw Δ and says it cannot tell noise from change
    # (PARTIAL), or it is a verdict (0, 1).
    assert proc.returncode in (Exit.OK, Exit.NOT_REPRODUCED, Exit.PARTIAL), err[-4000:]
    assert "building bench:" in err and f"-vllm-{COMMIT_A} (target bench" in err
    assert f"[{ssh_host.alias}] #" in err  # the build's progress, streamed back
    ids = {}
    for label, commit in (("a", COMMIT_A), ("b", COMMIT_B)):
        archive = tmp_path / "results" / ssh_host.alias / f"{run_id}-{label}.tar.gz"
        verify_bundle(archive, tmp_path / "allowed_signers")  # the label is under the signature
        bundle = tmp_path / "results" / ssh_host.alias / f"{run_id}-{label}"
        recorded = json.loads((bundle / "environment.json").read_text())["image"]
        assert recorded["labels"][COMMIT_LABEL] == commit
        assert recorded["in_container"] is True
        ids[label] = recorded["digest"]
        assert f"{label.upper()}: vLLM commit {commit}, image {ids[label]}" in err
        assert _containers(f"{run_id}-{label}") == []
    assert ids["a"] != ids["b"] and all(i.startswith("sha256:") for i in ids.values())
    # the compare table starts with what differs: the commits and the image ids
    assert f"## Compare: {run_id}-b against {run_id}-a" in out
    what_differs = out.split("What differs:", 1)[1].split("\n\n", 2)[1]
    assert f"- image label {COMMIT_LABEL}: {COMMIT_A} → {COMMIT_B}" in what_differs
    assert f"- image digest: {ids['a']} → {ids['b']}" in what_differs
    assert f"## vLLM {COMMIT_A} (A, {ids['a'][:19]}) vs {COMMIT_B} (B, {ids['b'][:19]})" in out
    assert (proc.returncode == 0) == ("EVERY CELL EQUIVALENT WITHIN" in out), out[-2000:]
    assert (proc.returncode == 11) == ("NOT RESOLVED: " in out), out[-2000:]
    print(f"compare-commits against the test host: {took:.1f} s\n{out}")
