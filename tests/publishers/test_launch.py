"""A launch profile from a publisher's card: seeded where the card gives the server's
command, refused naming what is missing where it does not."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import CardError
from bench.launch_profile import LaunchProfile
from bench.publishers import inferencex, vllm_dashboard
from bench.publishers.launch import seed_profile
from bench.publishers.model import PublishedEngine
from tests.publishers.paths import DATA

COMMAND = (
    "vllm serve Qwen/Qwen3-8B --tensor-parallel-size 2 --max-model-len 8192 "
    "--api-key sk-secret-123 --port 8000"
)


def _vllm_card() -> tuple[object, object]:
    card = vllm_dashboard.read(
        DATA / "vllm-dashboard" / "serving_llama8B_tp1_sharegpt_qps_4.json", {}
    )
    # Validated as a reader builds it (model_copy would skip the validators).
    engine = PublishedEngine(**{**card.engine.model_dump(), "launch_flags": COMMAND.split()})
    return card, card.model_copy(update={"engine": engine})


def test_a_published_command_keeps_no_secret_in_the_card() -> None:
    engine = PublishedEngine(launch_flags=(*COMMAND.split(), "--hf-token=hf_abc"))
    assert (
        "sk-secret-123" not in engine.launch_flags
        and "--hf-token=<redacted>" in engine.launch_flags
    )
    assert engine.launch_flags[engine.launch_flags.index("--api-key") + 1] == "<redacted>"


def test_a_card_with_the_servers_command_seeds_a_profile_without_its_key() -> None:
    _, card = _vllm_card()
    profile = seed_profile(card, "qwen-tp2")  # type: ignore[arg-type]
    assert profile.gpus == 2 and profile.served_model_name == "Qwen/Qwen3-8B"
    assert profile.argv[:3] == ("vllm", "serve", "Qwen/Qwen3-8B")
    assert "--tensor-parallel-size" in profile.argv and "--max-model-len" in profile.argv
    assert "sk-secret-123" not in profile.model_dump_json()
    assert profile.secret_env == ("VLLM_API_KEY",)
    assert "vllm-dashboard" in profile.description and profile.image == "vllm"


def test_a_card_without_a_command_is_refused_naming_what_is_missing() -> None:
    card = inferencex.read(DATA / "inferencex" / "benchmark_results.json", {"id": "101"})
    with pytest.raises(CardError) as info:
        seed_profile(card, "x")
    line = str(info.value)
    assert "gives no launch command" in line and "\n" not in line
    assert "write the launch profile by hand" in line


def test_bench_card_launch_takes_a_publishers_card(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, card = _vllm_card()
    path = tmp_path / "card.json"
    path.write_text(card.model_dump_json())  # type: ignore[attr-defined]
    out = tmp_path / "qwen.toml"
    assert main(["card", "launch", str(path), "-o", str(out)]) == 0
    profile = LaunchProfile.model_validate(tomllib.loads(out.read_text()))
    assert profile.name == "qwen" and profile.gpus == 2
    bare = tmp_path / "bare.json"
    ix = inferencex.read(DATA / "inferencex" / "benchmark_results.json", {"id": "101"})
    bare.write_text(ix.model_dump_json())
    assert main(["card", "launch", str(bare)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "gives no launch command" in err[0]
