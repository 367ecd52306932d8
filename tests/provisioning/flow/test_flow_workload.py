"""`provision bench --workload FILE` end to end (real sshd + dockerd for the GPU host, the
twin for vLLM): the workload file and the trace it names by an absolute path are copied
into the run's inputs folder on the host, mounted read-only in the server container, read
there by `bench run` (the trace's sha256 pinned here), and the bundle comes back verified;
the inputs folder is gone afterwards."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest

from bench.bundle.verify import verify_bundle
from provisioning.flow.host_run import scope_of
from tests.provisioning.conftest import SshTestHost
from tests.provisioning.flow.test_flow import _containers, _provision

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.docker]


def test_a_workload_file_and_its_trace_reach_the_container_and_the_bundle(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    data = tmp_path / "elsewhere"
    data.mkdir()
    trace = data / "trace.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": 100 * i, "input_length": 300, "output_length": 16,
                    "hash_ids": [0]}) + "\n"
        for i in range(12)
    ))  # fmt: skip
    workload = tmp_path / "replay.toml"
    workload.write_text(
        f'name = "replay"\nseed = 5\n[arrivals]\nkind = "trace"\npath = "{trace}"\n'
    )
    run_id = f"wl-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    proc = _provision(ssh_host, tmp_path, bench_image, run_id, "--profile", "twin",
                      "--workload", str(workload), "--", "--duration", "2")  # fmt: skip
    out, err = proc.communicate(timeout=900)
    took = time.monotonic() - started
    assert proc.returncode == 0, err[-4000:]
    assert "workload ..." in err  # the step that staged it
    assert "no verdict against a card: a workload is not the card's matrix" in err
    bundle = tmp_path / "results" / ssh_host.alias / run_id
    assert "complete" in out and str(bundle) in out  # the summary's row
    verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
    results = json.loads((bundle / "results.json").read_text())
    run = results["workload"]
    assert run["source"] == "/results/inputs/replay.toml"
    assert run["workload"]["arrivals"]["path"] == "/results/inputs/data/trace.jsonl"
    assert [p["requests"] for p in run["points"]] == [12]
    assert (bundle / "schedule.jsonl").is_file()
    recipe = json.loads((bundle / "recipe.json").read_text())
    assert f"--workload {workload}" in recipe["commands"][-1]
    assert _containers(run_id) == []
    scope = scope_of(run_id, ssh_host.alias)
    runs = ssh_host.dir / "remote-home" / ".cache" / "vllm-bench" / "runs"
    assert (runs / scope).is_dir() and not (runs / f"{scope}.inputs").exists()
    assert not list(bundle.rglob("*.toml"))  # the inputs are not part of the bundle
    print(f"workload flow against the test host: {took:.1f} s")
