"""Real builds: the bench target on the real engine; the GPU image stops early here."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from bench import __version__
from tests.image.conftest import ROOT, run

pytestmark = [pytest.mark.docker, pytest.mark.integration]

# The checkout's version (git's), which docker/build.sh passes in: the context has no .git.
BENCH_VERSION = __version__


def test_bench_image_runs_the_installed_cli(bench_image: str, docker_env: dict[str, str]) -> None:
    result = run(["docker", "run", "--rm", bench_image, "bench", "--version"], env=docker_env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"bench {BENCH_VERSION}"


def test_bench_image_labels_user_and_contents(bench_image: str, docker_env: dict[str, str]) -> None:
    inspected = run(["docker", "image", "inspect", bench_image], env=docker_env)
    config = json.loads(inspected.stdout)[0]["Config"]
    labels = config["Labels"]
    assert labels["bench.version"] == BENCH_VERSION
    assert labels["org.opencontainers.image.version"] == BENCH_VERSION
    assert re.fullmatch(r"\d+\.\d+\.\d+\.dev\d+\+g[0-9a-f]{7,}(\.d\d{8})?", BENCH_VERSION)
    # Built here on the offline debootstrap base (a locally imported image).
    assert labels["org.opencontainers.image.base.name"].startswith("bench-base:bookworm-py311-")
    assert config["User"] == "1000:1000"
    assert "8000/tcp" in config["ExposedPorts"]
    probe = run(
        [
            "docker",
            "run",
            "--rm",
            bench_image,
            "python",
            "-c",
            "import importlib.util as u, bench.launch_profile as l; "
            "print(u.find_spec('provisioning') is None, l.available())",
        ],
        env=docker_env,
    )
    assert probe.returncode == 0, probe.stderr
    # The CPU image carries the measurement side and its data, not the orchestrator.
    assert probe.stdout.strip() == "True ['cpu-vllm', 'published', 'smoke', 'twin']"
    # The self-test's generic part ran as the build's last step and left its facts.
    facts = run(
        ["docker", "run", "--rm", bench_image, "cat", "/opt/bench/image.json"], env=docker_env
    )
    assert facts.returncode == 0, facts.stderr
    assert json.loads(facts.stdout)["parts"] == ["python"]
    assert labels["bench.selftest"] == "/opt/bench/image.json"
    # Exactly requirements/runtime.lock: no dev tool, every pin as locked.
    freeze = run(
        ["docker", "run", "--rm", bench_image, "pip", "freeze", "--all", "--exclude", "bench"],
        env=docker_env,
    )
    assert freeze.returncode == 0, freeze.stderr
    from tests.unit.test_lock import RUNTIME, parse_lock

    locked = {n: p.version for n, p in parse_lock(RUNTIME.read_text(encoding="utf-8")).items()}
    installed = dict(line.lower().replace("_", "-").split("==") for line in freeze.stdout.split())
    assert {n: installed.get(n) for n in locked} == locked
    assert not {"pytest", "mypy", "ruff"} & set(installed)
    # The report is made in this image before signing: the self-test imported its matplotlib.
    assert json.loads(facts.stdout)["matplotlib"] == locked["matplotlib"]


def test_make_image_stops_early_without_the_registry(docker_env: dict[str, str]) -> None:
    before = run(["docker", "image", "ls", "-q", "bench-vllm"], env=docker_env).stdout
    result = run(["make", "--no-print-directory", "image"], env=docker_env, timeout=120)
    assert result.returncode != 0
    assert "cannot build the vLLM image here" in result.stderr
    assert "registry" in result.stderr and "unreachable" in result.stderr
    assert "Traceback" not in result.stderr
    # Stopped before any build step: no stage ran, no image appeared.
    assert "[vllm-build" not in result.stderr
    assert run(["docker", "image", "ls", "-q", "bench-vllm"], env=docker_env).stdout == before


def test_make_lock_says_the_registry_is_unreachable(docker_env: dict[str, str]) -> None:
    # `make lock` is the Python locks (minutes on PyPI), then the digests: the latter here.
    plan = run(["make", "--no-print-directory", "-n", "lock"], env=docker_env, timeout=60)
    assert plan.returncode == 0, plan.stderr
    assert "bash requirements/lock.sh\nbash docker/lock.sh\n" in plan.stdout
    dockerfile = (ROOT / "Dockerfile").read_text()
    result = run(["make", "--no-print-directory", "lock-images"], env=docker_env, timeout=60)
    assert result.returncode != 0
    assert "cannot re-resolve base image digests" in result.stderr
    assert "unreachable" in result.stderr
    assert (ROOT / "Dockerfile").read_text() == dockerfile


def test_build_sh_tags_the_version_without_plus_and_latest(
    bench_image: str, docker_env: dict[str, str]
) -> None:
    """No TAG: bench:<version, '+' as '-'> and bench:latest (compose.yaml's default)."""
    given = "0.2.0.dev0+gfeed" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:8]
    built = run(
        ["bash", "docker/build.sh", "bench"],
        env={**docker_env, "BENCH_VERSION": given},
        timeout=1200,
    )
    assert built.returncode == 0, built.stderr[-2000:]
    tag = built.stdout.strip()
    try:
        assert tag == "bench:" + given.replace("+", "-")
        inspect = [
            "docker",
            "image",
            "inspect",
            "-f",
            '{{.Id}} {{index .Config.Labels "bench.version"}}',
        ]
        mine = run([*inspect, tag], env=docker_env).stdout.split()
        assert mine[1] == given
        latest = run([*inspect, "bench:latest"], env=docker_env).stdout.split()
        assert latest[0] == mine[0]
        out = run(["docker", "run", "--rm", tag, "bench", "--version"], env=docker_env)
        assert out.stdout.strip() == f"bench {given}"
    finally:  # bench:latest back to an image of this checkout's real version
        run(["docker", "tag", bench_image, "bench:latest"], env=docker_env)
        run(["docker", "image", "rm", tag], env=docker_env)
