"""The twin launched from the bench image exactly as the `twin` launch profile says."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Iterator

import httpx
import pytest

from bench.launch_profile import load_launch_profile
from tests.image.conftest import run
from tests.support.sse import chat_body, stream_chat

pytestmark = [pytest.mark.docker, pytest.mark.integration]

API_KEY = secrets.token_hex(12)


@pytest.fixture(scope="module")
def twin_url(bench_image: str, docker_env: dict[str, str]) -> Iterator[tuple[str, str]]:
    profile = load_launch_profile("twin")
    name = f"bench-twin-test-{os.getpid()}"
    started = run(
        [
            "docker",
            "run",
            "--detach",
            "--rm",
            "--name",
            name,
            "--env",
            "VLLM_API_KEY",  # the value comes from our environment, not argv
            "--publish",
            f"127.0.0.1::{profile.port}",
            bench_image,
            *profile.argv,
        ],
        env={**docker_env, "VLLM_API_KEY": API_KEY},
    )
    assert started.returncode == 0, started.stderr
    try:
        port = run(["docker", "port", name, str(profile.port)], env=docker_env).stdout
        url = "http://" + port.strip().splitlines()[0]
        assert url.startswith("http://127.0.0.1:")
        deadline = time.monotonic() + profile.startup_timeout_s
        while True:
            try:
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                logs = run(["docker", "logs", name], env=docker_env)
                pytest.fail(f"twin container not healthy: {logs.stderr[-2000:]}", pytrace=False)
            time.sleep(0.2)
        yield url, name
    finally:
        run(["docker", "rm", "--force", name], env=docker_env)


def test_health_and_model(twin_url: tuple[str, str]) -> None:
    url, _ = twin_url
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200
    models = httpx.get(
        f"{url}/v1/models", headers={"Authorization": f"Bearer {API_KEY}"}, timeout=5
    ).json()
    assert [m["id"] for m in models["data"]] == [load_launch_profile("twin").served_model_name]


def test_streaming_completion_from_the_container(twin_url: tuple[str, str]) -> None:
    url, _ = twin_url
    with httpx.Client(
        base_url=url, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=60
    ) as client:
        out = stream_chat(
            client, chat_body("hello from the image test", max_tokens=24, model="qwen")
        )
    assert out.status == 200, out.error
    assert out.done
    assert len(out.content_chunks()) >= 1
    usages = [c["usage"]["completion_tokens"] for c in out.chunks if c.get("usage")]
    assert usages == sorted(usages)  # cumulative on every chunk
    assert usages[-1] == 24


def test_key_comes_from_the_environment_only(
    twin_url: tuple[str, str], docker_env: dict[str, str]
) -> None:
    url, name = twin_url
    denied = httpx.post(f"{url}/v1/chat/completions", json=chat_body("x", 4), timeout=10)
    assert denied.status_code == 401
    config = json.loads(run(["docker", "inspect", name], env=docker_env).stdout)[0]["Config"]
    assert API_KEY not in json.dumps(config["Cmd"])
    assert config["Cmd"] == list(load_launch_profile("twin").argv)
