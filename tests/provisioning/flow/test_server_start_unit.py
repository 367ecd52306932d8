"""The server container as ServerStarter asks the engine for it, per launch profile."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from bench.launch_profile import load_launch_profile
from provisioning.flow.options import HostOutcome, Options
from provisioning.flow.seams import Steps
from provisioning.flow.server_start import ServerStarter
from provisioning.preflight.requirements import load_requirements
from tests.provisioning.flow.flow_fakes import HOST, FakeEngine, FakeShell, workspace


@pytest.mark.parametrize(
    ("name", "ipc_host"),
    # cpu-vllm: one CPU worker, but vLLM's API server and engine core still need a 160 MiB
    # shared-memory ring (Docker gives 64 MiB); the profile's ipc_host said so and was ignored.
    [("cpu-vllm", True), ("published", True), ("smoke", True), ("twin", False)],
)
def test_the_server_shares_the_hosts_ipc_when_the_profile_says_so(
    tmp_path: Path, name: str, ipc_host: bool
) -> None:
    profile = load_launch_profile(name)
    opts = Options(
        profile=profile,
        requirements=load_requirements(name, profile.gpus, download_weights=False),
        image_ref="image:test", run_id="r1", results_dir=tmp_path,
        allowed_signers=tmp_path / "allowed_signers",
    )  # fmt: skip
    engine, out = FakeEngine(), io.StringIO()
    steps = Steps(HostOutcome(HOST.name, "r1"), out, time.monotonic)
    starter = ServerStarter(
        engine, FakeShell(), opts,
        scope="r1-gpu01", image="image:test", where=workspace(), steps=steps, out=out,
    )  # fmt: skip
    starter.start_server()
    (spec,) = engine.started
    assert spec.ipc_host is ipc_host
    assert spec.command == profile.argv and spec.gpus == profile.gpus
    # Weights the weights step fetched (or found): the server never downloads.
    assert (spec.environment.get("HF_HUB_OFFLINE") == "1") is (name != "twin")
