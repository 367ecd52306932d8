"""compose.yaml: generated from the launch profiles, validated by real Docker Compose v2."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from bench.launch_profile import load_launch_profile
from tests.image.conftest import ROOT, run
from tests.image.dockerfile_rules import parse

pytestmark = [pytest.mark.docker]


def _config(env: dict[str, str], *profiles: str) -> dict[str, object]:
    argv = ["docker", "compose", "-f", "compose.yaml"]
    for p in profiles:
        argv += ["--profile", p]
    result = run([*argv, "config", "--format", "json"], env=env)
    assert result.returncode == 0, result.stderr
    config: dict[str, object] = json.loads(result.stdout)
    return config


def _services(config: dict[str, object]) -> dict[str, dict[str, object]]:
    services = config["services"]
    assert isinstance(services, dict)
    return services


GENERATOR = [sys.executable, "-m", "provisioning.commands.compose_file"]


def test_compose_yaml_is_generated_from_the_profiles() -> None:
    result = run([*GENERATOR, "--check", "compose.yaml"])
    assert result.returncode == 0, result.stderr
    assert run(GENERATOR).stdout == (ROOT / "compose.yaml").read_text(encoding="utf-8")


def test_check_reports_a_hand_edit(tmp_path: Path) -> None:
    edited = tmp_path / "compose.yaml"
    edited.write_text(
        (ROOT / "compose.yaml").read_text().replace('"0.91"', '"0.95"'), encoding="utf-8"
    )
    result = run([*GENERATOR, "--check", str(edited)])
    assert result.returncode == 1
    assert result.stderr.strip() == f"{edited} is out of date: run `make compose`"


def test_vllm_service_runs_the_profile_token_for_token(docker_env: dict[str, str]) -> None:
    env = {**docker_env, "VLLM_API_KEY": "k-from-env"}
    env.pop("HF_TOKEN", None)
    vllm = _services(_config(env, "vllm"))["vllm"]
    published = load_launch_profile("published")
    assert vllm["command"] == list(published.argv)
    assert vllm["ipc"] == "host"
    # Passed through from the caller's environment; an unset HF_TOKEN stays unset.
    # HF_HUB_OFFLINE: the weights service fetched them; the server's start never downloads.
    assert vllm["environment"] == {
        "VLLM_API_KEY": "k-from-env",
        "HF_TOKEN": None,
        "HF_HUB_OFFLINE": "1",
    }
    assert vllm["depends_on"]["weights"]["condition"] == "service_completed_successfully"  # type: ignore[index]
    weights = _services(_config(docker_env, "vllm"))["weights"]
    assert weights["command"][:3] == ["hf", "download", published.argv[2]]  # type: ignore[index]
    # The PTX/Triton/FlashInfer caches on a named volume at the image's cache path.
    assert any(v["target"] == "/var/cache/jit" for v in vllm["volumes"])  # type: ignore[attr-defined]
    assert vllm["ports"] == [
        {
            "mode": "ingress",
            "host_ip": "127.0.0.1",
            "target": 8000,
            "published": "8000",
            "protocol": "tcp",
        }
    ]
    devices = vllm["deploy"]["resources"]["reservations"]["devices"]  # type: ignore[index]
    assert devices == [{"capabilities": ["gpu"], "driver": "nvidia", "count": published.gpus}]
    assert any(v["target"] == "/root/.cache/huggingface" for v in vllm["volumes"])  # type: ignore[attr-defined]
    health = vllm["healthcheck"]
    assert "/health" in " ".join(health["test"])  # type: ignore[index]
    assert health["start_period"] == "1h0m0s"  # type: ignore[index]


def test_twin_profile_replaces_vllm_without_gpus(docker_env: dict[str, str]) -> None:
    services = _services(_config(docker_env, "twin"))
    assert set(services) == {"twin", "bench"}
    twin = services["twin"]
    assert twin["command"] == list(load_launch_profile("twin").argv)
    assert "deploy" not in twin or not twin["deploy"]
    assert "ipc" not in twin
    assert "volumes" not in twin
    assert twin["ports"][0]["host_ip"] == "127.0.0.1"  # type: ignore[index]
    bench = services["bench"]
    assert bench["depends_on"]["twin"] == {"condition": "service_healthy", "required": False}  # type: ignore[index]
    assert bench["command"][:2] == ["bench", "run"]  # type: ignore[index]
    assert "http://server:8000" in bench["command"]  # type: ignore[operator]
    assert bench["volumes"][0]["target"] == "/results"  # type: ignore[index]


def test_the_api_key_is_never_in_the_file_or_a_command(docker_env: dict[str, str]) -> None:
    text = (ROOT / "compose.yaml").read_text(encoding="utf-8")
    assert "--api-key" not in text
    env = {**docker_env, "VLLM_API_KEY": "s3cr3t-value"}
    services = _services(_config(env, "vllm", "twin"))
    for name, service in services.items():
        assert "s3cr3t-value" not in json.dumps(service.get("command")), name
        if name != "weights":  # the download needs HF_TOKEN only
            assert service["environment"]["VLLM_API_KEY"] == "s3cr3t-value", name  # type: ignore[index]


def test_default_vllm_image_tag_names_the_dockerfile_commit() -> None:
    commit = parse((ROOT / "Dockerfile").read_text()).global_args["VLLM_COMMIT"]
    assert (
        f"image: ${{BENCH_VLLM_IMAGE:-bench-vllm:{commit}}}" in (ROOT / "compose.yaml").read_text()
    )
