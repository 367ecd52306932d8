"""The launch profiles: the published launch equals the card's, bad profiles fail in one line."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from bench.errors import Exit, ProfileError
from bench.launch_profile import available, card_argv, load_launch_profile

# The card's launch command as printed on the card (published/…73a5831127a9.txt).
CARD = (
    '"$HOME/env_rtxpro6k-qwen-vllm-73a5831127a9/bin/vllm" serve '
    "Qwen/Qwen3.5-397B-A17B-GPTQ-Int4 --served-model-name qwen --trust-remote-code "
    "--tensor-parallel-size 4 --reasoning-parser qwen3 --enable-auto-tool-choice "
    "--tool-call-parser qwen3_coder --max-model-len 262144 --gpu-memory-utilization 0.91 "
    "--host 0.0.0.0 --port 8000 --api-key <redacted> --attention-backend FLASH_ATTN "
    "--linear-backend marlin --moe-backend triton "
    '--speculative-config \'{"method":"mtp","num_speculative_tokens":2}\' '
    "--quantization moe_wna16"
)


def test_shipped_profiles_are_listed() -> None:
    assert available() == ["cpu-vllm", "published", "smoke", "twin"]


def test_published_argv_is_the_card_token_for_token_without_the_key() -> None:
    profile = load_launch_profile("published")
    expected = [t for t in shlex.split(CARD)[1:] if t not in ("--api-key", "<redacted>")]
    assert list(profile.argv) == ["vllm", *expected]
    assert profile.card_launch_command == CARD
    assert profile.gpus == 4
    assert profile.image == "vllm"
    assert profile.flag("--speculative-config") == '{"method":"mtp","num_speculative_tokens":2}'
    assert profile.flag("--quantization") == "moe_wna16"
    assert profile.secret_env == ("VLLM_API_KEY", "HF_TOKEN")
    assert profile.ipc_host is True
    assert profile.model_cache == "/root/.cache/huggingface"
    assert not any("api-key" in t or "redacted" in t for t in profile.argv)


# Flags of the published launch that belong to its model (the 397B GPTQ MoE with MTP).
MODEL_FLAGS: tuple[str, ...] = ("--max-model-len", "--quantization", "--linear-backend")
MODEL_FLAGS += ("--moe-backend", "--speculative-config")


def test_smoke_keeps_every_model_independent_published_flag() -> None:
    """`make smoke`: the published launch with a small pinned model; only the flags that
    belong to the 397B model are left out, and --revision is the profile's pin."""
    smoke, published = load_launch_profile("smoke"), load_launch_profile("published")
    assert (smoke.image, smoke.gpus, smoke.port) == (published.image, published.gpus, 8000)
    for i, token in enumerate(published.argv[3:], start=3):
        if token.startswith("--") and token not in MODEL_FLAGS:
            value = published.argv[i + 1] if i + 1 < len(published.argv) else None
            has_value = value is not None and not value.startswith("--")
            assert smoke.flag(token) == (value if has_value else smoke.flag(token)), token
            assert token in smoke.argv, token
    assert not any(flag in smoke.argv for flag in MODEL_FLAGS)
    assert smoke.model_revision is not None and len(smoke.model_revision) == 40
    assert smoke.flag("--revision") == smoke.model_revision


def test_twin_runs_on_the_bench_image_without_gpus() -> None:
    profile = load_launch_profile("twin")
    assert profile.image == "bench"
    assert profile.gpus == 0
    assert profile.argv[:3] == ("bench", "twin", "serve")
    assert profile.flag("--port") == str(profile.port) == "8000"
    assert profile.flag("--host") == "0.0.0.0"
    assert (profile.ipc_host, profile.model_cache) == (False, None)


def test_card_argv_drops_executable_and_key() -> None:
    assert card_argv("/x/vllm serve m --api-key s3cret --port 1") == ("serve", "m", "--port", "1")
    assert card_argv("/x/vllm serve m --api-key=s3cret") == ("serve", "m")


def test_flag_reads_both_spellings() -> None:
    profile = load_launch_profile("published").model_copy(
        update={"argv": ("vllm", "serve", "m", "--port=8000")}
    )
    assert profile.flag("--port") == "8000"
    assert profile.flag("--host") is None


def test_unknown_profile_names_the_choices() -> None:
    with pytest.raises(ProfileError) as err:
        load_launch_profile("publshed")
    assert err.value.exit_code == Exit.USAGE
    line = err.value.one_line()
    assert "unknown launch profile 'publshed'" in line
    assert "published, smoke, twin" in line
    assert "\n" not in line


def _write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(body, encoding="utf-8")
    return path


GOOD = """
schema_version = 1
name = "{name}"
description = "d"
image = "vllm"
gpus = {gpus}
port = 8000
served_model_name = "qwen"
secret_env = ["VLLM_API_KEY"]
startup_timeout_s = 60.0
argv = [{argv}]
"""
GOOD_ARGV = '"vllm", "serve", "m", "--tensor-parallel-size", "2", "--port", "8000"'


def test_a_good_profile_loads_by_path(tmp_path: Path) -> None:
    path = _write(tmp_path, "mine", GOOD.format(name="mine", gpus=2, argv=GOOD_ARGV))
    assert load_launch_profile(path).gpus == 2


@pytest.mark.parametrize(
    ("name", "gpus", "argv", "message"),
    [
        ("k", 2, GOOD_ARGV + ', "--api-key", "x"', "secrets never go on a command line"),
        ("k", 2, GOOD_ARGV + ', "--api-key=x"', "secrets never go on a command line"),
        ("p", 2, '"vllm", "serve", "m", "--tensor-parallel-size", "2", "--port", "9"', "--port 9"),
        ("g", 4, GOOD_ARGV, "needs 2 GPUs but gpus is 4"),
        ("n", -1, GOOD_ARGV, "gpus: Input should be greater than or equal to 0"),
        ("e", 2, "", "argv: Tuple should have at least 1 item"),
    ],
)
def test_malformed_profiles_fail_in_one_line(
    tmp_path: Path, name: str, gpus: int, argv: str, message: str
) -> None:
    path = _write(tmp_path, name, GOOD.format(name=name, gpus=gpus, argv=argv))
    with pytest.raises(ProfileError) as err:
        load_launch_profile(path)
    line = err.value.one_line()
    assert message in line
    assert str(path) in line
    assert "\n" not in line


def test_unknown_field_is_refused(tmp_path: Path) -> None:
    body = GOOD.format(name="u", gpus=2, argv=GOOD_ARGV) + 'gpu = "typo"\n'
    with pytest.raises(ProfileError, match="gpu: Extra inputs are not permitted"):
        load_launch_profile(_write(tmp_path, "u", body))


def test_model_cache_must_be_absolute(tmp_path: Path) -> None:
    body = GOOD.format(name="c", gpus=2, argv=GOOD_ARGV) + 'model_cache = "cache"\n'
    with pytest.raises(ProfileError, match="model_cache: String should match pattern"):
        load_launch_profile(_write(tmp_path, "c", body))


def test_bench_image_with_gpus_is_refused(tmp_path: Path) -> None:
    body = GOOD.format(name="b", gpus=1, argv='"bench", "twin", "serve"').replace(
        'image = "vllm"', 'image = "bench"'
    )
    with pytest.raises(ProfileError, match="gpus must be 0"):
        load_launch_profile(_write(tmp_path, "b", body))


def test_argv_must_match_the_card_it_claims(tmp_path: Path) -> None:
    published = (Path(__file__).parents[2] / "bench/launch_profiles/published.toml").read_text()
    tampered = published.replace('"--max-model-len", "262144"', '"--max-model-len", "131072"')
    with pytest.raises(ProfileError, match="token 14: '131072' vs card '262144'"):
        load_launch_profile(_write(tmp_path, "published", tampered))


def test_tracing_is_on_for_the_vllm_rehearsal_and_off_for_the_cards_launch_and_the_twin() -> None:
    on = {name: load_launch_profile(name).server_traces for name in available()}
    assert on == {"cpu-vllm": True, "published": False, "smoke": False, "twin": False}
    assert {load_launch_profile(name).traces_port for name in available()} == {4318}


def test_a_profile_sets_its_traces_port(tmp_path: Path) -> None:
    body = (
        GOOD.format(name="t", gpus=2, argv=GOOD_ARGV) + "server_traces = true\ntraces_port = 4400\n"
    )
    profile = load_launch_profile(_write(tmp_path, "t", body))
    assert (profile.server_traces, profile.traces_port) == (True, 4400)


@pytest.mark.parametrize(
    ("more", "argv", "message"),
    [
        ("traces_port = 8000\n", GOOD_ARGV, "traces_port 8000 is the server's own port"),
        ("traces_port = 0\n", GOOD_ARGV, "traces_port: Input should be greater than or equal to 1"),
        ('server_traces = "yes"\n', GOOD_ARGV, "server_traces: Input should be a valid boolean"),
        ("", GOOD_ARGV + ', "--otlp-traces-endpoint", "http://c:4318/v1/traces"',
         "argv carries --otlp-traces-endpoint; tracing is the orchestrator's to add"),
        ("", GOOD_ARGV + ', "--otlp-traces-endpoint=http://c:4318/v1/traces"',
         "argv carries --otlp-traces-endpoint"),
    ],
)  # fmt: skip
def test_a_bad_tracing_setting_fails_in_one_line(
    tmp_path: Path, more: str, argv: str, message: str
) -> None:
    path = _write(tmp_path, "t", GOOD.format(name="t", gpus=2, argv=argv) + more)
    with pytest.raises(ProfileError) as err:
        load_launch_profile(path)
    line = err.value.one_line()
    assert message in line and str(path) in line and "\n" not in line


def test_invalid_toml_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="is not valid TOML"):
        load_launch_profile(_write(tmp_path, "bad", "name = [unclosed\n"))
    with pytest.raises(ProfileError, match="does not exist"):
        load_launch_profile(tmp_path / "nope.toml")


def test_name_must_match_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "other", GOOD.format(name="mine", gpus=2, argv=GOOD_ARGV))
    with pytest.raises(ProfileError, match="differs from the file name"):
        load_launch_profile(path)
