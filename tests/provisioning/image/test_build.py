"""The `bench` stage built on the test host through the Docker SDK over the real sshd."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from bench.bundle.verify import verify_bundle
from bench.errors import RunFailed
from provisioning.containers.engine import DockerEngine
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.image.build import COMMIT_LABEL, build_on_host, pinned_commit, spec_for
from tests.provisioning.conftest import ROOT, SshTestHost
from tests.provisioning.flow.test_flow import SMALL_SWEEP, _containers, _provision

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.docker]

# One tag per checkout: the engine is shared with other trees' tests.
TAG = "vllm-bench-build-test:" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
COMMIT = "5e7ab1e0c0de"


def test_bench_stage_built_on_the_host_carries_the_commit_label_and_streams_progress(
    ssh_host: SshTestHost, python_base: str
) -> None:
    host = inventory.resolve(ssh_host.alias)
    spec = spec_for("bench", TAG, commit=COMMIT, build_args={"PYTHON_BASE": python_base})
    out = io.StringIO()
    started = time.monotonic()
    with DockerEngine(host) as engine:
        image_id = build_on_host(engine, spec, host=host.name, out=out)
        labels = engine.image_labels(image_id)
    took = time.monotonic() - started
    assert image_id.startswith("sha256:") and len(image_id) == 71
    assert labels[COMMIT_LABEL] == COMMIT
    assert labels["bench.version"] == spec.build_args["BENCH_VERSION"]  # the Dockerfile's own
    with Remote(host) as remote:  # the engine behind the ssh host agrees, by tag and by id
        fmt = '{{.Id}} {{index .Config.Labels "' + COMMIT_LABEL + '"}}'
        seen = remote.run(f"docker image inspect -f '{fmt}' {TAG}", check=True).stdout.split()
        assert seen == [image_id, COMMIT]
        # the context held what .dockerignore lets through, and the stage installed it
        listing = remote.run(f"docker run --rm {image_id} bench --version", check=True).stdout
        assert spec.build_args["BENCH_VERSION"] in listing
    lines = out.getvalue().splitlines()
    assert any(line.startswith(f"[{host.name}] #") and "[bench " in line for line in lines)
    assert any(line.endswith(("CACHED", "s")) and " #" in line for line in lines)
    print(f"build of the bench stage over ssh: {took:.1f} s")


def test_a_build_that_fails_on_the_host_is_one_error_naming_the_image(
    ssh_host: SshTestHost,
) -> None:
    host = inventory.resolve(ssh_host.alias)
    missing = "vllm-bench-no-such-base:never"
    spec = spec_for("bench", TAG + "-broken", commit=COMMIT, build_args={"PYTHON_BASE": missing})
    out = io.StringIO()
    with DockerEngine(host) as engine, pytest.raises(RunFailed) as caught:
        build_on_host(engine, spec, host=host.name, out=out)
    message = caught.value.one_line()
    assert f"building {TAG}-broken (target bench) on {host.name} failed" in message
    assert missing.split(":", maxsplit=1)[0] in message
    assert "\n" not in message


def test_provision_bench_builds_an_image_that_is_on_neither_machine_and_records_it(
    ssh_host: SshTestHost, python_base: str, tmp_path: Path
) -> None:
    tag = f"{TAG}-auto-{uuid.uuid4().hex[:8]}"  # on neither machine: --image-source auto builds
    run_id = f"e2e-{uuid.uuid4().hex[:8]}"
    started = time.monotonic()
    try:
        proc = _provision(
            ssh_host, tmp_path, tag, run_id, "--profile", "twin",
            "--build-arg", f"PYTHON_BASE={python_base}", *SMALL_SWEEP,
        )  # fmt: skip
        out, err = proc.communicate(timeout=900)
        took = time.monotonic() - started
        assert proc.returncode == 0, err[-4000:]
        assert f"building {tag} (target bench, vLLM commit {pinned_commit()})" in err
        bundle = tmp_path / "results" / ssh_host.alias / run_id
        verify_bundle(bundle.with_name(f"{run_id}.tar.gz"), tmp_path / "allowed_signers")
        env = json.loads((bundle / "environment.json").read_text())
        image = env["image"]
        # The image's build-time self-test facts and the server's start travel in the bundle.
        assert image["selftest"]["parts"] == ["python"]
        assert env["server_start"]["ready_after_s"] > 0
        assert env["server_start"]["jit_cache_was_empty"] is None  # twin: no GPU, no JIT
        assert env["weights"] == {"note": "not applicable: the launch profile loads no weights"}
        built = subprocess.run(
            ["docker", "image", "inspect", "-f", "{{.Id}}", tag],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        assert image["digest"] == built
        assert image["labels"][COMMIT_LABEL] == pinned_commit()
        assert f"built {tag} ({built[:19]})" in err
        assert _containers(run_id) == []
        assert " complete " in out
    finally:
        subprocess.run(["docker", "rmi", tag], capture_output=True, check=False)
    print(f"provision bench, image built on the host: {took:.1f} s")
