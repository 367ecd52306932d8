"""A card's launch command seeds a launch profile; `bench card` on the command line."""

from __future__ import annotations

import json
import pathlib
import tomllib

import pytest

from bench.card.launch import FROM_ENVIRONMENT, profile_toml, seed_from_command, seed_profile
from bench.card.model import Card
from bench.card.parse import read_card
from bench.cli import main
from bench.errors import ProfileError
from bench.launch_profile import LaunchProfile, load_launch_profile

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


def test_shipped_command_seeds_model_flags_and_four_gpus(shipped_card_path: pathlib.Path) -> None:
    card = read_card(shipped_card_path)
    assert card.launch_command is not None
    seed = seed_from_command(card.launch_command)
    assert (seed.engine, seed.model, seed.served_model_name) == (
        "vllm",
        "Qwen/Qwen3.5-397B-A17B-GPTQ-Int4",
        "qwen",
    )
    assert (seed.gpu_count, seed.max_model_len, seed.api_key) == (4, 262144, FROM_ENVIRONMENT)
    args = list(seed.args)
    assert "<redacted>" not in args and "--api-key" not in args
    assert "--host" not in args and "--port" not in args
    spec = args.index("--speculative-config")
    assert json.loads(args[spec + 1]) == {"method": "mtp", "num_speculative_tokens": 2}
    assert args[-2:] == ["--quantization", "moe_wna16"]
    assert "--trust-remote-code" in args and "--enable-auto-tool-choice" in args


def test_short_tp_flag_and_sglang() -> None:
    assert (
        seed_from_command("vllm serve m -tp 2 --pipeline-parallel-size=2 --enforce-eager").gpu_count
        == 4
    )
    seed = seed_from_command(
        "python -m sglang.launch_server --model-path meta-llama/Llama-3.1-8B-Instruct --tp-size 2"
    )
    assert (seed.engine, seed.model, seed.gpu_count, seed.api_key) == (
        "sglang",
        "meta-llama/Llama-3.1-8B-Instruct",
        2,
        None,
    )


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("llama-server -m model.gguf -ngl 99", "neither 'vllm serve'"),
        ("vllm serve m --tensor-parallel-size four", "needs a positive count"),
        ("vllm serve --enforce-eager", "names no model"),
        ("vllm serve m 'unclosed", "does not split"),
    ],
)
def test_commands_that_cannot_seed(command: str, words: str) -> None:
    with pytest.raises(ProfileError, match=words):
        seed_from_command(command)


def test_cli_import_writes_the_reference(
    shipped_card_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "card.json"
    assert main(["card", "import", str(shipped_card_path), "-o", str(out)]) == 0
    card = Card.model_validate_json(out.read_text())
    assert card == read_card(shipped_card_path)


def test_cli_bad_card_is_exit_2_with_the_line(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["card", "import", str(FIXTURES / "malformed_metadata_no_value.txt")]) == 2
    err = capsys.readouterr().err
    assert "malformed_metadata_no_value.txt line 43: expected a value line" in err
    assert "Traceback" not in err
    assert main(["card", "import", str(tmp_path / "absent.txt")]) == 2


def test_seeded_profile_equals_the_shipped_published_profile(
    shipped_card_path: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    out = tmp_path / "mine.toml"
    assert main(["card", "launch", str(shipped_card_path), "-o", str(out)]) == 0
    mine = load_launch_profile(out)
    shipped = load_launch_profile("published")
    assert mine.name == "mine"
    assert (mine.argv, mine.gpus, mine.port, mine.served_model_name) == (
        shipped.argv,
        shipped.gpus,
        shipped.port,
        shipped.served_model_name,
    )
    assert mine.secret_env == ("VLLM_API_KEY",)
    assert mine.card_launch_command == shipped.card_launch_command
    assert "<redacted>" not in mine.argv and "--api-key" not in mine.argv


def test_profile_toml_round_trips() -> None:
    card = read_card(FIXTURES / "deepseek-v3.1-fp8_8x-h200_vllm.txt")
    with pytest.raises(ProfileError, match="makes no valid profile"):
        # -tp 8 gives 8 GPUs, but LaunchProfile counts only --tensor-parallel-size.
        seed_profile(card, "deepseek")
    fixed = card.model_copy(
        update={
            "launch_command": (card.launch_command or "").replace(
                "-tp 8", "--tensor-parallel-size 8"
            )
        }
    )
    profile = seed_profile(fixed, "deepseek")
    assert LaunchProfile.model_validate(tomllib.loads(profile_toml(profile))) == profile
    assert profile.gpus == 8 and profile.served_model_name == "deepseek"
    # A rehearsal's dropped flags (a table of reasons) come back too.
    rehearsal = load_launch_profile("cpu-vllm")
    assert LaunchProfile.model_validate(tomllib.loads(profile_toml(rehearsal))) == rehearsal


def test_cli_launch_without_command_is_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    # The llama.cpp card has no launch command (its rows made whole: see
    # test_parse_other_cards, a card whose rows do not cover its matrix is exit 2 anyway).
    text = (FIXTURES / "qwen3-30b-a3b-q4km_m3max_llamacpp.txt").read_text(encoding="utf-8")
    text = text.replace(
        "| Sustained decode | 8K | 4 |",
        "| Sustained decode | 8K | 2 | Valid | 92.5 | 47.7 | 230 ms | 20.9 ms | 2.0 | 0 | 2,775 "
        "| 30.0 s |\n| Sustained decode | 8K | 4 |",
    ).replace(
        "| Prefill | 8K | 1 | Valid | 655.0 | — | 12,507 ms | — | — | 1 | — | — |",
        "| Prefill | 8K | 1 | Valid | 655.0 | — | 12,507 ms | — | — | 1 | — | — |\n"
        "| Prefill | 16K | 1 | Valid | 540.0 | — | 30,341 ms | — | — | 1 | — | — |",
    )
    card = tmp_path / "llamacpp.txt"
    card.write_text(text, encoding="utf-8")
    assert main(["card", "launch", str(card)]) == 2
    assert "has no launch command" in capsys.readouterr().err
