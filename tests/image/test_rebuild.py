"""Build reproducibility where it can be checked here (issue 16): the CPU `bench` image built
twice from scratch (`--no-cache`, every step run again) installs the same packages at the
same versions and the same bench wheel, byte for byte (the Dockerfile keeps the wheel in
/opt/bench/wheel and fixes its times with SOURCE_DATE_EPOCH).

Slow (two full builds, minutes on two cores), but part of `make test`."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.image.conftest import run

pytestmark = [
    pytest.mark.docker,
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(3600),
]

TAGS = ("bench:rebuild-1", "bench:rebuild-2")


@pytest.fixture
def rebuilt(docker_env: dict[str, str]) -> Iterator[tuple[str, ...]]:
    logs = []
    try:
        for tag in TAGS:
            built = run(
                ["bash", "docker/build.sh", "bench", tag],
                env={**docker_env, "BUILD_NO_CACHE": "1"},
                timeout=1800,
            )
            assert built.returncode == 0, built.stderr[-3000:]
            logs.append(built.stderr)
        yield tuple(logs)
    finally:
        run(["docker", "image", "rm", "-f", *TAGS], env=docker_env)


def _in(tag: str, script: str, env: dict[str, str]) -> str:
    done = run(["docker", "run", "--rm", tag, "sh", "-c", script], env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_two_builds_from_scratch_install_the_same_packages_and_wheel(
    rebuilt: tuple[str, ...], docker_env: dict[str, str]
) -> None:
    for log in rebuilt:  # every step ran again: nothing came from the layer cache
        steps = [line for line in log.splitlines() if "pip install --require-hashes" in line]
        assert steps and not any("CACHED" in line for line in steps), log[-2000:]
    freezes = [_in(t, "pip freeze --all", docker_env) for t in TAGS]
    assert freezes[0] == freezes[1]
    assert "bench @ file:///opt/bench/wheel/bench-" in freezes[0]  # the kept wheel
    assert len(freezes[0].splitlines()) > 20
    wheels = [_in(t, "sha256sum /opt/bench/wheel/bench-*.whl", docker_env) for t in TAGS]
    assert wheels[0] == wheels[1]
    digest, name = wheels[0].split()
    assert len(digest) == 64 and name.endswith("-py3-none-any.whl")
    # The self-test's package set, which every bundle's environment.json carries, agrees.
    facts = [json.loads(_in(t, "cat /opt/bench/image.json", docker_env)) for t in TAGS]
    assert facts[0]["packages"] == facts[1]["packages"]
    assert "pydantic" in facts[0]["packages"]
