"""Containers on the test host through the Docker SDK over the real sshd."""

from __future__ import annotations

import base64
import time
import urllib.parse
import uuid
from collections.abc import Iterator

import pytest

from bench.secrets import KnownSecrets
from provisioning.containers.engine import LABEL_ROLE, LABEL_RUN, ContainerSpec, DockerEngine
from provisioning.containers.local_images import local_image_chunks, local_image_id
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from tests.provisioning.conftest import SshTestHost

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.docker]

TWIN = ("bench", "twin", "serve", "--profile", "published", "--host", "0.0.0.0", "--port", "8000")


def _wait_health(remote: Remote, port: int, timeout_s: float = 60) -> bytes:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = remote.http_get(port, "/health")
        if got is not None and got[0] == 200:
            models = remote.http_get(port, "/v1/models")
            assert models is not None
            return models[1]
        time.sleep(0.2)
    raise AssertionError("the twin never answered /health")


def test_server_container_starts_over_ssh_answers_and_is_removed(
    ssh_host: SshTestHost, bench_image: str
) -> None:
    host = inventory.resolve(ssh_host.alias)
    run_id = f"t{uuid.uuid4().hex[:10]}"
    lines: list[str] = []
    with DockerEngine(host) as engine, Remote(host) as remote:
        try:
            cid = engine.start(
                ContainerSpec(image=bench_image, command=TWIN, run_id=run_id, role="server",
                              publish={8000: None}, user="1000:1000")
            )  # fmt: skip
            port = engine.host_port(cid, 8000)
            engine.follow_logs(cid, lines.append)
            assert b'"id": "qwen"' in _wait_health(remote, port)
            assert engine.containers_of(run_id) == [f"vllm-bench-{run_id}-server"]
            fmt = (
                f'{{{{index .Config.Labels "{LABEL_RUN}"}}}} '
                f'{{{{index .Config.Labels "{LABEL_ROLE}"}}}} {{{{.HostConfig.PortBindings}}}}'
            )
            labels = remote.run(f"docker inspect -f '{fmt}' {cid}").stdout
            assert labels.startswith(f"{run_id} server ")
            assert "127.0.0.1" in labels  # published on the host's loopback only
        finally:
            removed = engine.remove_run(run_id)
        assert removed == [f"vllm-bench-{run_id}-server"]
        assert engine.containers_of(run_id) == []
    assert any("twin_started" in line or "listening" in line for line in lines)


def test_exec_streams_output_and_reports_exit_code(ssh_host: SshTestHost, bench_image: str) -> None:
    host = inventory.resolve(ssh_host.alias)
    run_id = f"t{uuid.uuid4().hex[:10]}"
    with DockerEngine(host) as engine:
        try:
            cid = engine.start(ContainerSpec(image=bench_image, command=("sleep", "60"),
                                             run_id=run_id, role="server"))  # fmt: skip
            exec_id, stream = engine.exec_stream(
                cid,
                ["sh", "-c", 'echo "key=$SECRET_ONE"; exit 3'],
                environment={"SECRET_ONE": "s3"},
            )
            assert b"".join(stream) == b"key=s3\n"
            running, code, pid = engine.exec_result(exec_id)
            assert (running, code) == (False, 3) and pid > 0
        finally:
            engine.remove_run(run_id)


def test_container_that_exits_keeps_its_log_tail(ssh_host: SshTestHost, bench_image: str) -> None:
    host = inventory.resolve(ssh_host.alias)
    run_id = f"t{uuid.uuid4().hex[:10]}"
    with DockerEngine(host) as engine:
        try:
            bad = ("bench", "twin", "serve", "--nope")
            cid = engine.start(
                ContainerSpec(image=bench_image, run_id=run_id, role="server", command=bad)
            )
            assert engine.wait(cid, timeout_s=60) == 2
            assert engine.state(cid) == ("exited", 2)
            assert "--nope" in engine.log_tail(cid)
        finally:
            engine.remove_run(run_id)
        assert engine.state(cid) == ("removed", None)


def test_a_local_image_streams_to_the_host_over_ssh(
    ssh_host: SshTestHost, bench_image: str
) -> None:
    # docker save here → chunked upload through the SDK's SSH channel → docker load there
    # (the test host shares this machine's engine, so the image id must come back equal).
    local_id = local_image_id(bench_image)
    chunks = local_image_chunks(bench_image)
    sent = 0

    def counted() -> Iterator[bytes]:
        nonlocal sent
        for chunk in chunks:
            sent += len(chunk)
            yield chunk

    with DockerEngine(inventory.resolve(ssh_host.alias)) as engine:
        loaded = engine.load(counted())
        assert local_id in loaded
        assert engine.image_id(bench_image) == local_id
    assert sent > 50 << 20  # the whole image went through, not a reference


def test_a_containers_log_reaches_us_with_the_runs_secrets_masked(
    ssh_host: SshTestHost, bench_image: str
) -> None:
    """Issue 48: the engine is provisioning's door for a server's log (the excerpt of a
    failed start, the bundle's server.log): every form of a secret it knows is masked."""
    key = f"sk-log-canary-{uuid.uuid4().hex}"
    b64 = base64.b64encode(f"Bearer {key}".encode()).decode()
    host = inventory.resolve(ssh_host.alias)
    run_id = f"t{uuid.uuid4().hex[:10]}"
    lines: list[str] = []
    script = 'echo "args: api_key=$K"; echo "auth: $B"; echo "url: $U"; sleep 2'
    with DockerEngine(host, secrets=KnownSecrets([key])) as engine:
        try:
            cid = engine.start(
                ContainerSpec(image=bench_image, command=("sh", "-c", script), run_id=run_id,
                              role="server", environment={"K": key, "B": b64,
                              "U": urllib.parse.quote(key, safe="")})
            )  # fmt: skip
            engine.follow_logs(cid, lines.append)
            assert engine.wait(cid, timeout_s=60) == 0
            tail = engine.log_tail(cid)
        finally:
            engine.remove_run(run_id)
    for text in (tail, "\n".join(lines)):
        assert text.count("********") == 3, text
        assert key not in text and b64[12:-4] not in text and "canary" not in text, text
