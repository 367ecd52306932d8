"""Faults of the orchestrated flow during the sweep: the server container dies, SSH drops.

`provision bench` against the real test host (sshd + dockerd on this machine, the twin in
the server container). For each: a named exit code and one line, the finished cells
brought back in a signed partial bundle, and no container left.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.bundle.verify import verify_bundle
from bench.errors import Exit
from bench.results import Results
from provisioning.flow import scope_of
from tests.orch.conftest import ROOT, SshTestHost

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.docker]

SWEEP = ("--no-verdict", "--", "--contexts", "8K", "16K", "--prefill-only-contexts",
         "--concurrencies", "1", "2", "--duration", "4", "--max-tokens", "256")  # fmt: skip


def _containers(run_id: str, *filters: str) -> list[str]:
    label = f"label=org.vllm-bench.run-id={scope_of(run_id, 'bench-test-host')}"
    flags = [x for f in filters for x in ("--filter", f)]
    out = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", label, *flags],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return out.split()


def _start(ssh_host: SshTestHost, tmp_path: Path, image: str, run_id: str) -> subprocess.Popen[str]:
    env = {**os.environ, "VLLM_API_KEY": "k-" + uuid.uuid4().hex, "BENCH_LOG_FORMAT": "json"}
    argv = [
        sys.executable, "-m", "provisioning", "bench", ssh_host.alias,
        "--image", image, "--run-id", run_id, "--profile", "twin",
        "--results", str(tmp_path / "results"),
        "--allowed-signers", str(tmp_path / "allowed_signers"), *SWEEP,
    ]  # fmt: skip
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _until_first_cell(proc: subprocess.Popen[str]) -> str:
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if "cell_finished" in line or not line:
            break
    assert "cell_finished" in seen, seen[-3000:]
    return seen


def test_server_container_dying_mid_sweep_brings_back_the_finished_cells(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"die-{uuid.uuid4().hex[:8]}"
    proc = _start(ssh_host, tmp_path, bench_image, run_id)
    seen = _until_first_cell(proc)
    (server,) = _containers(run_id, "label=org.vllm-bench.role=server")
    subprocess.run(["docker", "kill", server], check=True, capture_output=True)
    _, err = proc.communicate(timeout=600)
    err = seen + err
    assert proc.returncode == Exit.RUN_FAILED, err[-3000:]
    assert "Traceback" not in err
    assert "`bench run` on bench-test-host exited with" in err
    bundle = tmp_path / "results" / ssh_host.alias / run_id
    results = Results.model_validate_json((bundle / "results.json").read_text())
    assert results.cells and results.cells[0].status == "valid"
    assert (bundle / "INCOMPLETE").exists()
    verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
    assert _containers(run_id) == []


def test_ssh_dropped_mid_sweep_brings_back_the_cells_and_leaves_nothing(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"ssh-{uuid.uuid4().hex[:8]}"
    proc = _start(ssh_host, tmp_path, bench_image, run_id)
    seen = _until_first_cell(proc)
    assert ssh_host.drop_connections() >= 1
    try:
        _, err = proc.communicate(timeout=600)
        err = seen + err
        assert "Traceback" not in err
        # the sweep went on inside the container without us: every cell, a complete run
        assert proc.returncode == Exit.OK, err[-3000:]
        bundle = tmp_path / "results" / ssh_host.alias / run_id
        assert "reconnected; the sweep goes on inside the container" in err
        results = Results.model_validate_json((bundle / "results.json").read_text())
        assert len(results.cells) == 4 and results.state == "complete", results.cells
        assert not (bundle / "INCOMPLETE").exists()
        verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
        assert _containers(run_id) == []
    finally:
        left = _containers(run_id)
        if left:  # what the flow left behind must not outlive the test
            subprocess.run(["docker", "rm", "-f", *left], capture_output=True, check=False)
