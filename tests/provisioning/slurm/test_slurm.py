"""`provision bench --slurm debug --nodes 2 --profile twin` against the real test cluster
(tests/setup/slurm.sh): sbatch, squeue, scontrol, scancel, slurmd and srun are Slurm's own;
each node's task drives the real Docker engine with the bench image's twin.

Not tested here (no such hardware or service on this machine): --gpus-per-node against real
GRES, sacct (no slurmdbd), a submitter on another machine than the nodes, pyxis/enroot.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.bundle.recipe import RECIPE_NAME, Recipe
from bench.bundle.verify import verify_bundle
from bench.history import database
from bench.history.database import Target
from provisioning.flow.host_run import scope_of
from tests.provisioning.conftest import ROOT
from tests.provisioning.flow.test_flow import _containers
from tests.provisioning.slurm.conftest import SlurmCluster
from tests.support.echo import echoing_twin_profile, key_forms
from tests.support.procs import stderr_until

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.slurm]

SMALL_SWEEP = (
    "--", "--contexts", "8K", "--prefill-only-contexts", "--concurrencies", "1",
    "--duration", "2", "--max-tokens", "512",
)  # fmt: skip
LONG_SWEEP = (
    "--", "--contexts", "8K", "16K", "--prefill-only-contexts", "--concurrencies", "1", "2",
    "4", "--duration", "4", "--max-tokens", "512",
)  # fmt: skip
API_KEY = "sk-slurm-test-" + uuid.uuid4().hex


def _submit(
    cluster: SlurmCluster,
    tmp_path: Path,
    image: str,
    run_id: str,
    *extra: str,
    nodes: int = 2,
    profile: str = "twin",
) -> subprocess.Popen[str]:
    env = {**os.environ, **cluster.env, "VLLM_API_KEY": API_KEY, "BENCH_LOG_FORMAT": "json"}
    # The job's HOME (sbatch exports this environment): the nodes' signing keys go there.
    env["HOME"] = str(tmp_path / "home")
    argv = [
        sys.executable, "-m", "provisioning", "bench",
        "--slurm", cluster.partition, "--nodes", str(nodes),
        "--profile", profile, "--image", image, "--run-id", run_id, "--no-verdict",
        "--shared-dir", str(tmp_path / "shared"),
        "--results", str(tmp_path / "results"),
        "--allowed-signers", str(tmp_path / "allowed_signers"),
        *extra,
    ]  # fmt: skip
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _job_id(err: str) -> str:
    found = re.search(r"^submitted job (\d+)$", err, re.M)
    assert found, err[-3000:]
    return found.group(1)


def _slurm(cluster: SlurmCluster, *argv: str) -> str:
    env = {**os.environ, **cluster.env}
    return subprocess.run(
        list(argv), capture_output=True, text=True, check=True, env=env, timeout=60
    ).stdout


def _nothing_left(cluster: SlurmCluster, job_id: str, run_id: str) -> None:
    assert _slurm(cluster, "squeue", "-h", "-j", job_id, "-o", "%i %T").strip() == ""
    for node in cluster.nodes:
        assert _containers(run_id, node) == [], node


def _no_key_in(*roots: Path) -> None:
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file():
                assert API_KEY.encode() not in path.read_bytes(), path


def test_two_exclusive_nodes_each_end_with_a_verified_bundle_and_nothing_left(
    slurm_cluster: SlurmCluster, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"slurm-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    history = tmp_path / "history.sqlite3"
    proc = _submit(
        slurm_cluster, tmp_path, bench_image, run_id, "--history", str(history), *SMALL_SWEEP
    )
    out, err = proc.communicate(timeout=900)
    took = time.monotonic() - started
    assert proc.returncode == 0, (out + err)[-4000:]
    job_id = _job_id(err)
    # The scheduler's own record of what was asked: two whole nodes, one task each, a limit.
    job = _slurm(slurm_cluster, "scontrol", "show", "job", "-o", job_id)
    assert "JobState=COMPLETED" in job and "NumNodes=2" in job, job
    assert "OverSubscribe=NO" in job  # --exclusive
    assert re.search(r"TimeLimit=00:1\d:00", job), job  # 8.8 s x 1.5 + 60 s + 10 min: 12 min
    assert f"NodeList={slurm_cluster.nodes[0][:-1]}[1-2]" in job, job
    # Progress: the scheduler's states, then cells done on each node, from the run directories.
    assert re.search(rf"^job {job_id} RUNNING on bench-n\[1-2\]", err, re.M), err[-3000:]
    assert "cells done: bench-n1 1/1, bench-n2 1/1" in err
    # The fleet table at the end: every node's value per cell (two nodes: none judged).
    assert "FLEET: " in out and "bench-n1" in out.split("FLEET: ")[0].rsplit("## ", 1)[-1]
    assert "with 2 nodes no node can be told to stand out" in out
    for node in slurm_cluster.nodes:
        bundle = tmp_path / "results" / node / run_id
        for name in ("results.json", "manifest.json", "manifest.json.sig", "server.log"):
            assert (bundle / name).is_file(), (node, name)
        assert not (bundle / "INCOMPLETE").exists()
        ok = verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
        assert ok.signer.principal == f"vllm-bench@{node}"  # signed on its node, own key
        # ... which also signed the attestation there (`bench attest` in a helper container)
        assert ok.attestation.startswith("attestation: attestation.intoto.json verified")
        key = tmp_path / "home" / ".config" / "vllm-bench" / "nodes" / node / "signing_ed25519"
        assert key.is_file() and key.stat().st_mode & 0o077 == 0, key
        assert re.search(rf"^{node}\s+{run_id}\s+complete\s", out, re.M), out[-3000:]
        # The bundle's recipe re-runs the fleet as it was submitted, not one host.
        recipe = Recipe.model_validate_json((bundle / RECIPE_NAME).read_text())
        assert recipe.commands[-1].startswith(
            f"python -m provisioning bench --slurm debug --nodes 2 --profile twin "
            f"--image {bench_image} -- --api chat --contexts 8K "
        ), recipe.commands
    _nothing_left(slurm_cluster, job_id, run_id)
    _no_key_in(tmp_path)
    assert API_KEY not in out + err
    # Each node's bundle recorded in the history as the submitter collected it.
    assert (
        len(re.findall(rf"^history: run \S+ recorded in {re.escape(str(history))}$", err, re.M))
        == 2
    )
    with database.connect(Target("sqlite", str(history))) as conn:
        hosts = conn.query("SELECT host FROM runs ORDER BY host")
    assert hosts == [(node,) for node in sorted(slurm_cluster.nodes)]
    print(f"two-node Slurm job, submit to verified bundles: {took:.1f} s")


def test_a_node_whose_server_echoes_the_key_leaks_no_form_of_it(
    slurm_cluster: SlurmCluster, bench_image: str, tmp_path: Path
) -> None:
    """Issue 48 on a fleet: the node's server repeats the key in its errors and its log; the
    node's bench (the HTTP client) and its engine (the log) mask every form, so the bundle,
    the shared folder and the submitter's output hold none."""
    run_id = f"echo-{uuid.uuid4().hex[:8]}"
    (tmp_path / "shared").mkdir()
    profile = echoing_twin_profile(tmp_path / "shared")
    proc = _submit(slurm_cluster, tmp_path, bench_image, run_id, *SMALL_SWEEP, nodes=1,
                   profile=str(profile))  # fmt: skip
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 0, (out + err)[-4000:]
    (node,) = (d.name for d in (tmp_path / "results").iterdir() if d.is_dir())
    bundle = tmp_path / "results" / node / run_id
    verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
    assert (
        "twin: refusing a request from Bearer ******** (url " in (bundle / "server.log").read_text()
    )
    hits = [
        f"{path.relative_to(tmp_path)}: {form[:12]}"
        for path in tmp_path.rglob("*") if path.is_file()
        for form in key_forms(API_KEY) if form.encode() in path.read_bytes()
    ]  # fmt: skip
    hits += [f"printed: {form[:12]}" for form in key_forms(API_KEY) if form in out + err]
    assert hits == []


def test_ctrl_c_cancels_the_job_and_brings_back_the_finished_cells_of_every_node(
    slurm_cluster: SlurmCluster, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"slurm-{uuid.uuid4().hex[:8]}"
    proc = _submit(slurm_cluster, tmp_path, bench_image, run_id, *LONG_SWEEP)
    # Both nodes have a cell on disk: interrupt then.
    both = re.compile(r"bench-n1 [1-9]\d*/\d+, bench-n2 [1-9]")
    seen = stderr_until(proc, both.search)
    assert "cells done: bench-n1" in seen, seen[-3000:]
    job_id = _job_id(seen)
    # While the job runs, the controller keeps its environment in its state files: the
    # submitter's API key is not among them (sbatch never got it).
    saved = [p for p in slurm_cluster.state_dir.rglob("environment") if p.is_file()]
    assert any(b"SLURM_CONF=" in p.read_bytes() for p in saved), saved
    _no_key_in(slurm_cluster.state_dir)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, (seen + err)[-4000:]
    assert "scancel --signal=INT" in err
    job = _slurm(slurm_cluster, "scontrol", "show", "job", "-o", job_id)
    assert "JobState=RUNNING" not in job and "JobState=PENDING" not in job, job
    for node in slurm_cluster.nodes:
        bundle = tmp_path / "results" / node / run_id
        assert (bundle / "results.json").is_file(), (node, err[-3000:])
        assert (bundle / "INCOMPLETE").exists()  # partial: the sweep was stopped
        verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
        assert re.search(rf"^{node}\s+{run_id}\s+interrupted\s", out, re.M), out[-3000:]
    _nothing_left(slurm_cluster, job_id, run_id)
    _no_key_in(tmp_path)


def test_a_node_that_fails_does_not_lose_the_other_nodes_bundle(
    slurm_cluster: SlurmCluster, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"slurm-{uuid.uuid4().hex[:8]}"
    # A container already holding bench-n2's server name: its start fails there, only there.
    blocker = f"vllm-bench-{scope_of(run_id, 'bench-n2')}-server"
    subprocess.run(["docker", "create", "--name", blocker, bench_image, "true"], check=True,
                   capture_output=True)  # fmt: skip
    try:
        proc = _submit(slurm_cluster, tmp_path, bench_image, run_id, *SMALL_SWEEP)
        out, err = proc.communicate(timeout=900)
    finally:
        subprocess.run(["docker", "rm", "-f", blocker], check=True, capture_output=True)
    assert proc.returncode != 0, out[-3000:]
    assert re.search(rf"^bench-n1\s+{run_id}\s+complete\s", out, re.M), out[-3000:]
    assert re.search(rf"^bench-n2\s+{run_id}\s+failed\s", out, re.M), out[-3000:]
    assert re.search(r"bench-n2: .*Conflict|bench-n2: .*already in use", err), err[-3000:]
    bundle = tmp_path / "results" / "bench-n1" / run_id
    verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
    assert not (tmp_path / "results" / "bench-n2" / run_id).exists()
    _nothing_left(slurm_cluster, _job_id(err), run_id)


def test_one_node_loads_the_image_from_the_shared_filesystem(
    slurm_cluster: SlurmCluster, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"slurm-{uuid.uuid4().hex[:8]}"
    tag = f"vllm-bench-slurm-load:{run_id}"  # a tag the node's engine does not have
    tar = tmp_path / "shared" / "image.tar"
    tar.parent.mkdir(parents=True)
    subprocess.run(["docker", "tag", bench_image, tag], check=True)
    subprocess.run(["docker", "save", "-o", str(tar), tag], check=True)
    subprocess.run(["docker", "rmi", tag], check=True, capture_output=True)  # untag only
    try:
        proc = _submit(
            slurm_cluster, tmp_path, tag, run_id, "--image-tar", str(tar), *SMALL_SWEEP, nodes=1
        )
        out, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, (out + err)[-4000:]
        log = (tmp_path / "shared" / run_id / "nodes" / "task-0.log").read_text()
        assert f"docker load < {tar}" in log, log[-3000:]
        row = re.search(rf"^(bench-n[12])\s+{run_id}\s+complete\s", out, re.M)
        assert row, out[-3000:]  # whichever node Slurm chose
        bundle = tmp_path / "results" / row.group(1) / run_id
        verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
        _nothing_left(slurm_cluster, _job_id(err), run_id)
    finally:
        subprocess.run(["docker", "rmi", tag], check=False, capture_output=True)


def test_the_job_outlives_its_submitter_and_attach_collects_it(
    slurm_cluster: SlurmCluster, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"slurm-{uuid.uuid4().hex[:8]}"
    proc = _submit(slurm_cluster, tmp_path, bench_image, run_id, *SMALL_SWEEP)
    seen = stderr_until(proc, lambda line: " RUNNING on " in line, timeout_s=300)
    job_id = _job_id(seen)
    proc.kill()  # the workstation goes away without a word: no Ctrl-C, no scancel
    proc.communicate(timeout=60)
    state = _slurm(slurm_cluster, "squeue", "-h", "-j", job_id, "-o", "%T").strip()
    assert state in ("RUNNING", "COMPLETING", ""), state  # still running (or just done)
    run_dir = tmp_path / "shared" / run_id
    env = {**os.environ, **slurm_cluster.env, "HOME": str(tmp_path / "home")}
    attach = subprocess.run(
        [sys.executable, "-m", "provisioning", "attach", str(run_dir), "--no-verdict",
         "--results", str(tmp_path / "results"),
         "--allowed-signers", str(tmp_path / "allowed_signers")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    assert attach.returncode == 0, (attach.stdout + attach.stderr)[-4000:]
    assert f"following job {job_id} ({run_id})" in attach.stderr
    for node in slurm_cluster.nodes:
        assert re.search(rf"^{node}\s+{run_id}\s+complete\s", attach.stdout, re.M), node
        bundle = tmp_path / "results" / node / run_id
        verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
    _nothing_left(slurm_cluster, job_id, run_id)


def test_attach_to_a_folder_that_is_no_job_says_so(tmp_path: Path) -> None:
    got = subprocess.run(
        [sys.executable, "-m", "provisioning", "attach", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert got.returncode == 2
    assert "is not the run directory of a submitted Slurm job" in got.stderr


def test_a_pending_job_shows_its_reason_and_ctrl_c_cancels_it_outright(
    slurm_cluster: SlurmCluster, bench_image: str, tmp_path: Path
) -> None:
    # Another job holds both nodes: ours waits for them.
    blocker = _slurm(
        slurm_cluster, "sbatch", "--parsable", "--partition", slurm_cluster.partition,
        "--nodes", "2", "--exclusive", "--time", "5", "--output", "/dev/null",
        "--wrap", "sleep 120",
    ).strip()  # fmt: skip
    try:
        run_id = f"slurm-{uuid.uuid4().hex[:8]}"
        proc = _submit(slurm_cluster, tmp_path, bench_image, run_id, *SMALL_SWEEP)
        assert proc.stderr is not None
        seen = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not re.search(r"PENDING \(\w+\)", seen):
            line = proc.stderr.readline()
            seen += line
            if not line:
                break
        assert re.search(r"^job \d+ PENDING \((Resources|Priority)\)$", seen, re.M), seen[-3000:]
        job_id = _job_id(seen)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        _slurm(slurm_cluster, "scancel", blocker)
    assert proc.returncode == 130, (out + err)[-3000:]
    assert f"interrupted: cancelling job {job_id}" in err
    job = _slurm(slurm_cluster, "scontrol", "show", "job", "-o", job_id)
    assert "JobState=CANCELLED" in job, job
    assert err.count("interrupted before a node ran this task of the job") == 2, err[-3000:]
    assert len(re.findall(r"^\(node [12]\)\s+\S+\s+interrupted\s", out, re.M)) == 2, out
    assert not (tmp_path / "results" / "bench-n1").exists()
    _nothing_left(slurm_cluster, job_id, run_id)
