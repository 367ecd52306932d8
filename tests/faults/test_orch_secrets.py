"""Secrets in the orchestrated flow: `provision bench` against the real test host.

The API key and an HF token are recognisable canaries in the workstation's environment.
The server echoes the key (issue 48): the twin profile with `--fault-echo-auth` and half
of its answers injected errors, whose bodies and the server's log repeat the request's
`Authorization` header verbatim, URL-encoded and in base64; bench's client inside the
container and the engine's reading of the server's log (bench.secrets, the one door) must
mask every form.
While the flow runs (image, container, sweep inside it, signing, pull-back) the test
samples the process list of this machine (the test host's sshd and the containers run
here too, so their command lines are in it) and the command lines of the run's
containers (`docker inspect`: entrypoint, cmd, args, labels). Then it searches the
pulled-back bundle and every line of output. Zero hits anywhere.
"""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from provisioning.flow.host_run import scope_of
from tests.provisioning.conftest import ROOT, SshTestHost
from tests.support.echo import echoing_twin_profile, key_forms

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.docker]

API_KEY = f"sk-SECRET-canary-{uuid.uuid4().hex}"
HF_TOKEN = f"hf_canary{uuid.uuid4().hex}"


class Sampler(threading.Thread):
    def __init__(self, label: str) -> None:
        super().__init__(daemon=True)
        self.label = label
        self.ps: list[str] = []
        self.inspected: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=False)
            self.ps.append(ps.stdout)
            ids = subprocess.run(
                ["docker", "ps", "-q", "--filter", f"label={self.label}"],
                capture_output=True, text=True, check=False,
            ).stdout.split()  # fmt: skip
            if ids:
                got = subprocess.run(
                    ["docker", "inspect", *ids], capture_output=True, text=True, check=False
                ).stdout
                for c in json.loads(got or "[]"):
                    cfg = c.get("Config", {})
                    seen = [c.get("Path"), c.get("Args"), cfg.get("Cmd"), cfg.get("Entrypoint"),
                            cfg.get("Labels")]  # fmt: skip
                    self.inspected.append(json.dumps(seen))
            self.stop.wait(0.1)


def test_orchestrated_flow_leaks_no_secret(
    ssh_host: SshTestHost, bench_image: str, tmp_path: Path
) -> None:
    run_id = f"sec-{uuid.uuid4().hex[:8]}"
    profile = echoing_twin_profile(tmp_path)
    env = {**os.environ, "VLLM_API_KEY": API_KEY, "HF_TOKEN": HF_TOKEN,
           "BENCH_LOG_FORMAT": "json", "BENCH_LOG_LEVEL": "debug"}  # fmt: skip
    argv = [
        sys.executable, "-m", "provisioning", "bench", ssh_host.alias,
        "--image", bench_image, "--run-id", run_id, "--profile", str(profile),
        "--results", str(tmp_path / "results"),
        "--allowed-signers", str(tmp_path / "allowed_signers"),
        "--no-verdict",  # a one-cell sweep is not meant to reproduce the card
        "--", "--contexts", "8K", "--prefill-only-contexts", "--concurrencies", "1",
        "--duration", "2", "--max-tokens", "256",
    ]  # fmt: skip
    sampler = Sampler(f"org.vllm-bench.run-id={scope_of(run_id, 'bench-test-host')}")
    sampler.start()
    try:
        proc = subprocess.run(
            argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900, check=False
        )
    finally:
        sampler.stop.set()
        sampler.join()
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sampler.inspected, "never saw the run's containers"
    assert any("twin" in s and "serve" in s for s in sampler.ps), "never saw the server's argv"
    bundle = tmp_path / "results" / ssh_host.alias / run_id
    files = [p for p in bundle.rglob("*") if p.is_file()]
    assert {"results.json", "server.log", "environment.json"} <= {p.name for p in files}
    texts = [
        ("stdout", proc.stdout.encode()),
        ("stderr", proc.stderr.encode()),
        *((f"ps sample {i}", s.encode()) for i, s in enumerate(sampler.ps)),
        *((f"docker inspect {i}", s.encode()) for i, s in enumerate(sampler.inspected)),
        *((str(p.relative_to(bundle)), p.read_bytes()) for p in files),
        ("archive", gzip.decompress(bundle.with_name(f"{run_id}.tar.gz").read_bytes())),
    ]
    canaries = [*key_forms(API_KEY), HF_TOKEN]
    hits = [where for where, data in texts for c in canaries if c.encode() in data]
    assert hits == []
    # The server did echo, and what reached the bundle was masked.
    log = (bundle / "server.log").read_text()
    assert "twin: refusing a request from Bearer ******** (url Bearer%20********" in log
    results = json.loads((bundle / "results.json").read_text())
    answers = results["fingerprint"]["answers"]
    reasons = [c.get("reason") or "" for c in results["cells"] + results["prefill"] + answers]
    assert any("for Bearer ********" in r for r in reasons), reasons
