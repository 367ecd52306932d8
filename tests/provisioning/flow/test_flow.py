"""`provision bench` end to end: real sshd + dockerd stand for the GPU host, the twin for vLLM."""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from bench.bundle.manifest import ATTESTATION_NAME
from bench.bundle.recipe import RECIPE_NAME, Recipe
from bench.bundle.verify import Verified, verify_bundle
from bench.errors import VerifyFailed
from bench.history import database
from bench.history.database import Target
from bench.report.command import PLOTS_DIR, REPORT_NAME, write_report
from provisioning.flow.host_run import scope_of
from tests.provisioning.conftest import ROOT, SshTestHost
from tests.support import attestation
from tests.support.chromium import chromium_path, png_size, probe_frontier

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.docker]

# --no-verdict: a one-cell sweep is not meant to reproduce the card
SMALL_SWEEP = (
    "--no-verdict", "--", "--contexts", "8K", "--prefill-only-contexts", "--concurrencies", "1",
    "--duration", "2", "--max-tokens", "512",
)  # fmt: skip
API_KEY = "sk-orch-test-" + uuid.uuid4().hex
PLOTS = ("decode_heatmap.png", "prefill_vs_context.png", "latency_vs_concurrency.png",
         "frontier.png")  # fmt: skip


def _provision(
    ssh_host: SshTestHost, tmp_path: Path, image: str, run_id: str, *extra: str, hosts: str = ""
) -> subprocess.Popen[str]:
    env = {**os.environ, "VLLM_API_KEY": API_KEY, "BENCH_LOG_FORMAT": "json"}
    argv = [
        sys.executable, "-m", "provisioning", "bench", hosts or ssh_host.alias,
        "--image", image, "--run-id", run_id,
        "--results", str(tmp_path / "results"),
        "--allowed-signers", str(tmp_path / "allowed_signers"),
        *extra,
    ]  # fmt: skip
    # stdin: not the test runner's (a pytest-xdist worker's stdin is its channel to the
    # controller, and an ssh client forwards what it reads there to the host).
    return subprocess.Popen(
        argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _containers(run_id: str, host: str = "bench-test-host") -> list[str]:
    label = f"label=org.vllm-bench.run-id={scope_of(run_id, host)}"
    out = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", label],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    return out.split()


def test_whole_flow_on_the_twin_leaves_a_verified_bundle_and_nothing_running(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    proc = _provision(ssh_host, tmp_path, bench_image, run_id, "--profile", "twin",
                      "--server-traces", *SMALL_SWEEP)  # fmt: skip
    out, err = proc.communicate(timeout=900)
    took = time.monotonic() - started
    assert proc.returncode == 0, err[-4000:]
    assert "image ..." in err and "sweep ..." in err  # the steps, in the local terminal
    assert '"cell_finished"' in err  # bench run's progress streamed back
    # Stock sshd, non-root docker-group account: no refused channel, so no reconnect.
    assert ssh_host.user.startswith("bench-")
    assert "reconnecting" not in err and "open failed" not in err
    for check in ("ssh sessions", "sftp", "port forwarding"):
        assert re.search(rf"^{check}\s+ok\s", out + err, re.M), check
    bundle = tmp_path / "results" / ssh_host.alias / run_id
    archive = bundle.with_name(f"{run_id}.tar.gz")
    for name in ("results.json", "manifest.json", "manifest.json.sig", ATTESTATION_NAME,
                 "tables.md", "server.log", "server_spans.jsonl"):  # fmt: skip
        assert (bundle / name).is_file(), name
    _traced_by_the_orchestrator(bundle)
    assert not (bundle / "INCOMPLETE").exists()
    ok = verify_bundle(archive, tmp_path / "allowed_signers", provenance=True)
    assert ok.signer.principal == f"vllm-bench@{ssh_host.alias}"
    # Its provenance (issue 16): bench's commit, the image's id and package freeze, the
    # twin's weights stated as not applicable, and the orchestrator's recipe.
    found = "; ".join(ok.provenance)
    assert "recipe: recipe.json (image server)" in found and "weights: not applicable" in found
    assert re.search(r"image: sha256:[0-9a-f]{64}", found) and "server packages: " in found
    recipe = Recipe.model_validate_json((bundle / RECIPE_NAME).read_text())
    last = recipe.commands[-1]
    assert last.startswith(
        f"python -m provisioning bench {ssh_host.alias} --profile twin --image {bench_image} "
    )
    assert " --server-traces -- " in last  # not the twin profile's default: said
    assert last.endswith(
        "-- --api chat --contexts 8K --prefill-only-contexts --concurrencies 1 "
        "--duration 2 --max-tokens 512 --trials 1 --seed 0 --request-timeout 600"
    )
    assert any(c.startswith("docker build --target bench ") for c in recipe.commands)
    # The server container carries the host's name: environment.json names the host.
    recorded = json.loads((bundle / "environment.json").read_text())
    assert recorded["host"]["hostname"] == ssh_host.alias
    assert "complete" in out and str(bundle) in out
    assert _containers(run_id) == []
    for path in bundle.rglob("*"):
        if path.is_file():
            assert API_KEY.encode() not in path.read_bytes(), path
    assert API_KEY not in out and API_KEY not in err
    _report_is_signed_and_drawn(bundle, tmp_path)
    _attestation_checks_with_a_verifier_bench_did_not_write(bundle, ok, ssh_host, tmp_path)
    print(f"whole flow against the test host: {took:.1f} s\n{out}")
    print("bundle: " + " ".join(sorted(str(p.relative_to(bundle)) for p in bundle.rglob("*"))))


def _traced_by_the_orchestrator(bundle: Path) -> None:
    """--server-traces: the twin started with the OTLP endpoint in the container, `bench run`
    receiving there; every completed request joined to its server span; the launch as
    started in the recipe and environment.json."""
    endpoint = "http://127.0.0.1:4318/v1/traces"
    spans = json.loads((bundle / "results.json").read_text())["server_spans"]
    assert spans["endpoint"] == endpoint, spans
    assert spans["completed"] > 0 and spans["joined"] == spans["completed"], spans
    listed = json.loads((bundle / "manifest.json").read_text())["files"]
    assert "server_spans.jsonl" in {f["path"] for f in listed}
    pair = ["--otlp-traces-endpoint", endpoint]
    recipe = json.loads((bundle / RECIPE_NAME).read_text())
    assert recipe["server"]["launch_argv"][-2:] == pair
    assert json.loads((bundle / "environment.json").read_text())["launch"]["argv"][-2:] == pair


def _attestation_checks_with_a_verifier_bench_did_not_write(
    bundle: Path, ok: Verified, ssh_host: SshTestHost, tmp_path: Path
) -> None:
    """attestation.intoto.json, made on the host by `bench attest` in a helper container with
    the host's key file: securesystemslib verifies it with the host's key from the
    allowed-signers line the orchestrator wrote; one changed byte fails it and `bench verify`;
    the bundle without it (as the orchestrator made them before) still verifies, saying so."""
    assert ok.attestation.startswith(f"attestation: {ATTESTATION_NAME} verified (in-toto ")
    assert ok.signer.fingerprint in ok.attestation
    line = attestation.allowed_line(tmp_path / "allowed_signers", f"vllm-bench@{ssh_host.alias}")
    key = attestation.sslib_key(line)
    assert key.keyid == ok.signer.fingerprint
    assert attestation.third_party_check(bundle, key) == []
    changed = tmp_path / "changed"
    shutil.copytree(bundle, changed)
    data = bytearray((changed / "results.json").read_bytes())
    data[len(data) // 2] ^= 0x01
    (changed / "results.json").write_bytes(bytes(data))
    assert attestation.third_party_check(changed, key) == ["results.json"]
    with pytest.raises(VerifyFailed, match=r"^results\.json: "):
        verify_bundle(changed, tmp_path / "allowed_signers")
    older = tmp_path / "older"
    shutil.copytree(bundle, older)
    (older / ATTESTATION_NAME).unlink()
    assert verify_bundle(older, tmp_path / "allowed_signers").attestation.startswith(
        "no attestation"
    )


def _report_is_signed_and_drawn(bundle: Path, tmp_path: Path) -> None:
    """The host's bundle holds what `bench local`'s holds: report.html with its plots and the
    frontier, made in the container before signing (so the signed manifest lists them), the
    same PNG bytes this machine's matplotlib draws from the bundle, and drawn by Chromium."""
    listed = {f["path"] for f in json.loads((bundle / "manifest.json").read_text())["files"]}
    report = {REPORT_NAME, *(f"{PLOTS_DIR}/{name}" for name in PLOTS)}
    assert report <= listed, sorted(report - listed)
    for name in report:
        assert (bundle / name).is_file(), name
    page = (bundle / REPORT_NAME).read_text(encoding="utf-8")
    frontier = (bundle / PLOTS_DIR / "frontier.png").read_bytes()
    inline = re.search(r'<img id="frontier" alt="[^"]*" src="data:image/png;base64,([^"]+)"', page)
    assert inline is not None and base64.b64decode(inline.group(1)) == frontier
    # The container's matplotlib (runtime.lock) and this .venv's (dev.lock) are one pin: the
    # same run gives the same bytes here (fonts, style and metadata fixed: bench.report.plots).
    here = tmp_path / "rerendered"
    shutil.copytree(bundle, here)
    shutil.rmtree(here / PLOTS_DIR)
    write_report(here)
    for name in PLOTS:
        assert (here / PLOTS_DIR / name).read_bytes() == (bundle / PLOTS_DIR / name).read_bytes(), (
            name
        )
    probe, dom = probe_frontier(chromium_path(), page, tmp_path / "chromium")
    assert probe["found"] and probe["complete"]
    assert (probe["width"], probe["height"]) == png_size(frontier)
    assert probe["ink"] > 0.02 * probe["pixels"] and probe["series"] > 0
    assert "per-user output tok/s" in dom and "a twin: no GPUs" in dom


def test_server_that_exits_at_start_is_an_error_with_its_log_and_leaves_nothing(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    twin = (ROOT / "bench" / "launch_profiles" / "twin.toml").read_text()
    broken = tmp_path / "broken.toml"
    broken.write_text(
        twin.replace('name = "twin"', 'name = "broken"').replace(
            '"--port", "8000",', '"--port", "8000", "--no-such-flag",'
        )
    )
    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    proc = _provision(ssh_host, tmp_path, bench_image, run_id, "--profile", str(broken))
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 3, err[-3000:]
    assert "exited with 2 while starting" in err
    assert "--no-such-flag" in err  # the log tail names the problem
    assert _containers(run_id) == []


def test_ctrl_c_during_the_sweep_removes_containers_and_brings_back_a_partial_bundle(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    long_sweep = (
        "--", "--contexts", "8K", "16K", "--prefill-only-contexts", "--concurrencies", "1", "2",
        "4", "--duration", "12", "--max-tokens", "512",
    )  # fmt: skip
    # 12 s windows: with 4 s the sweep ended before the Ctrl-C, once, beside another xdist
    # worker (the first cell's event reached this test late).
    proc = _provision(ssh_host, tmp_path, bench_image, run_id, "--profile", "twin", *long_sweep)
    assert proc.stderr is not None
    seen = ""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        seen += line
        if "cell_finished" in line or not line:  # one cell is on disk: interrupt now
            break
    assert "cell_finished" in seen, seen[-3000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 130, (seen + err)[-3000:]
    bundle = tmp_path / "results" / ssh_host.alias / run_id
    assert (bundle / "results.json").is_file(), err[-3000:]
    assert (bundle / "INCOMPLETE").exists()
    verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
    assert _containers(run_id) == []


CARD = (
    ROOT
    / "tests/card/fixtures/published_qwen3.5-397b-a17b-int4_4x-rtxpro6000_vllm-73a5831127a9.txt"
)


def test_two_hosts_in_parallel_one_bundle_each_and_a_verdict_against_the_card(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    second = "bench-test-host-b"  # another name for the same machine: a second "host"
    config = ssh_host.ssh_config.read_text()
    ssh_host.ssh_config.write_text(config + config.replace(ssh_host.alias, second))
    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    history = tmp_path / "history.sqlite3"  # both hosts' threads record in it at once
    proc = _provision(
        ssh_host, tmp_path, bench_image, run_id, "--profile", "twin", "--card", str(CARD),
        "--history", str(history), *SMALL_SWEEP[1:], hosts=f"{ssh_host.alias},{second}",
    )  # fmt: skip
    out, err = proc.communicate(timeout=900)
    # A sweep of one cell with a 2 s window and 512 tokens: not the card's settings, so
    # each host's verdict is NOT COMPARABLE (exit 10), and PARTIAL as well (issue 14).
    assert out.count("cells not measured here") == 2, out[-4000:]
    assert out.count("NOT COMPARABLE: window_s,max_tokens differ") == 2, out[-4000:]
    assert proc.returncode == 10, err[-4000:]
    for host in (ssh_host.alias, second):
        bundle = tmp_path / "results" / host / run_id
        verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
        assert f"## Reproduce: {run_id}" in out
        assert _containers(run_id, host) == []
    summary = [line for line in out.splitlines() if line.startswith(("bench-test-host ", second))]
    assert len(summary) == 2 and all(" complete " in line for line in summary)
    # The fleet table of the two hosts, named by host; two cannot single one out.
    fleet_part = out.split("FLEET: ", 1)[0]
    assert f"| {ssh_host.alias} |" in fleet_part or ssh_host.alias in fleet_part.rsplit("##", 1)[-1]
    assert "with 2 nodes no node can be told to stand out" in out
    # Each verified bundle in the history as its host's run finished.
    recorded = re.findall(rf"^history: run \S+ recorded in {re.escape(str(history))}$", err, re.M)
    assert len(recorded) == 2, err[-3000:]
    with database.connect(Target("sqlite", str(history))) as conn:
        hosts = conn.query("SELECT host, trust FROM runs ORDER BY host")
    assert hosts == sorted([(ssh_host.alias, "signed"), (second, "signed")])


def test_clean_removes_what_a_killed_orchestrator_left(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    proc = _provision(ssh_host, tmp_path, bench_image, run_id, "--profile", "twin", *SMALL_SWEEP)
    assert proc.stderr is not None
    while "sweep ..." not in (line := proc.stderr.readline()):
        assert line, "the flow ended before the sweep"
    proc.kill()  # no chance to clean up
    proc.communicate(timeout=60)
    assert len(_containers(run_id)) == 1
    clean = subprocess.run(
        [sys.executable, "-m", "provisioning", "clean", ssh_host.alias, "--run-id", run_id],
        cwd=ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert clean.returncode == 0, clean.stderr
    assert "removed 1 container(s): vllm-bench-" in clean.stdout
    assert _containers(run_id) == []


def test_compare_runs_two_images_one_after_the_other_then_judges_b_against_a(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    # A history configured by the setting whose server is down: a port bound, not listening.
    down = socket.socket()
    down.bind(("127.0.0.1", 0))
    url = f"postgresql://bench@127.0.0.1:{down.getsockname()[1]}/history"
    env = {**os.environ, "BENCH_LOG_FORMAT": "json", "BENCH_HISTORY__URL": url}
    proc = subprocess.run(
        [sys.executable, "-m", "provisioning", "compare", ssh_host.alias, "--profile", "twin",
         "--image-a", bench_image, "--image-b", bench_image, "--run-id", run_id,
         "--trials-per-side", "1",
         "--results", str(tmp_path / "results"),
         "--allowed-signers", str(tmp_path / "allowed_signers"), *SMALL_SWEEP[1:]],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    for label in ("a", "b"):
        archive = tmp_path / "results" / ssh_host.alias / f"{run_id}-{label}.tar.gz"
        verify_bundle(archive, tmp_path / "allowed_signers")
        assert _containers(f"{run_id}-{label}") == []
    assert f"## Compare: {run_id}-b against {run_id}-a" in proc.stdout, proc.stderr[-3000:]
    # One sweep a side: run-to-run noise is unknown, so no verdict on change (exit 9).
    assert "CANNOT TELL NOISE FROM CHANGE" in proc.stdout, proc.stdout[-2000:]
    assert "order A B" in proc.stdout and "host time of these sweeps" in proc.stdout
    assert "Server time of this verdict: " in proc.stdout  # from the bundles, per side
    assert proc.returncode == 9  # the compare's own code: the history's failure changes nothing
    down.close()
    # One line per sweep: not recorded, the bundle kept, and the command that records it.
    lines = [line for line in proc.stderr.splitlines() if line.startswith("history: ")]
    assert len(lines) == 2, proc.stderr[-3000:]
    for label, line in zip("ab", lines, strict=True):
        archive = tmp_path / "results" / ssh_host.alias / f"{run_id}-{label}.tar.gz"
        assert line.startswith(f"history: {archive} not recorded in {url} (connection failed")
        assert line.endswith(
            f"history ingest {archive.resolve()} --db {url} "
            f"--allowed-signers {(tmp_path / 'allowed_signers').resolve()}"
        ), line
