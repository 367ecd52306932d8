"""The `bench` stage built on the test host through the Docker SDK over the real sshd."""

from __future__ import annotations

import hashlib
import io
import time

import pytest

from bench.errors import RunFailed
from provisioning import hosts
from provisioning.build import COMMIT_LABEL, build_on_host, spec_for
from provisioning.containers import Engine
from provisioning.remote import Remote
from tests.orch.conftest import ROOT, SshTestHost

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.docker]

# One tag per checkout: the engine is shared with other trees' tests.
TAG = "vllm-bench-build-test:" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
COMMIT = "5e7ab1e0c0de"


def test_bench_stage_built_on_the_host_carries_the_commit_label_and_streams_progress(
    ssh_host: SshTestHost, python_base: str
) -> None:
    host = hosts.resolve(ssh_host.alias)
    spec = spec_for("bench", TAG, commit=COMMIT, build_args={"PYTHON_BASE": python_base})
    out = io.StringIO()
    started = time.monotonic()
    with Engine(host) as engine:
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
    host = hosts.resolve(ssh_host.alias)
    missing = "vllm-bench-no-such-base:never"
    spec = spec_for("bench", TAG + "-broken", commit=COMMIT, build_args={"PYTHON_BASE": missing})
    out = io.StringIO()
    with Engine(host) as engine, pytest.raises(RunFailed) as caught:
        build_on_host(engine, spec, host=host.name, out=out)
    message = caught.value.one_line()
    assert f"building {TAG}-broken (target bench) on {host.name} failed" in message
    assert missing.split(":", maxsplit=1)[0] in message
    assert "\n" not in message
