"""The submitter on a workstation, the Slurm commands on a login node over SSH.

The login node is this machine behind a real OpenSSH sshd (tests/setup/sshd.sh, logging in
as root: the test cluster's jobs run as root, see docs/fleet.md), reached as
`bench-test-host` through a temporary HOME's ~/.ssh/config with its host key checked. The
run directory is written and read over SFTP, the bundles copied back over it; the
submitting process has no SLURM_CONF and never runs a Slurm command itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.bundle.verify import verify_bundle
from tests.provisioning.conftest import ROOT, SshTestHost, start_sshd, stop_sshd
from tests.provisioning.slurm.conftest import SlurmCluster
from tests.provisioning.slurm.test_slurm import (
    API_KEY,
    SMALL_SWEEP,
    _job_id,
    _no_key_in,
    _nothing_left,
)

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slurm, pytest.mark.ssh]


@pytest.fixture
def login_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshTestHost]:
    host = start_sshd(tmp_path / "sshd", variant={"SSHD_USER": "root"})
    monkeypatch.setenv("HOME", str(host.home))
    try:
        yield host
    finally:
        stop_sshd(host)


def test_submitting_through_a_login_node_over_ssh_brings_back_verified_bundles(
    slurm_cluster: SlurmCluster, login_node: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"slurm-{uuid.uuid4().hex[:8]}"
    shared = tmp_path / "cluster-shared"  # the cluster's shared folder, as the nodes see it
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM")}
    env |= {"VLLM_API_KEY": API_KEY, "BENCH_LOG_FORMAT": "json"}
    proc = subprocess.run(
        [sys.executable, "-m", "provisioning", "bench",
         "--slurm", slurm_cluster.partition, "--nodes", "2",
         "--slurm-login", login_node.alias, "--cluster-checkout", str(ROOT),
         "--shared-dir", str(shared),
         "--profile", "twin", "--image", bench_image, "--run-id", run_id,
         "--results", str(tmp_path / "results"),
         "--allowed-signers", str(tmp_path / "allowed_signers"),
         "--no-verdict", *SMALL_SWEEP],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, (out + err)[-4000:]
    assert f"submitting {run_id} via {login_node.alias}:" in err
    job_id = _job_id(err)
    assert "cells done: bench-n1 1/1, bench-n2 1/1" in err
    for node in slurm_cluster.nodes:
        assert re.search(rf"^{node}\s+{run_id}\s+complete\s", out, re.M), out[-3000:]
        archive = tmp_path / "results" / node / f"{run_id}.tar.gz"
        ok = verify_bundle(archive, tmp_path / "allowed_signers")
        assert ok.signer.principal == f"vllm-bench@{node}"
    # The login node's own record: the job ran from the checkout given, as sbatch was told.
    job = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], capture_output=True, text=True, check=True,
        env={**os.environ, **slurm_cluster.env},
    ).stdout  # fmt: skip
    assert f"WorkDir={ROOT}" in job and "NumNodes=2" in job, job
    _nothing_left(slurm_cluster, job_id, run_id)
    _no_key_in(tmp_path / "results", shared)
    assert API_KEY not in out + err
