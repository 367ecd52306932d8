"""Project-wide rules: import direction, settings, exit codes."""

from __future__ import annotations

import ast
import pathlib

import pytest

from bench.errors import Exit, ProfileError, SettingsError
from bench.settings import load_settings

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_bench_never_imports_provisioning() -> None:
    offenders = []
    for path in (ROOT / "bench").rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path}:{n}" for n in names if n.split(".")[0] == "provisioning"]
    assert offenders == []


def test_settings_from_environment_and_vllm_api_key_fallback() -> None:
    s = load_settings({"BENCH_LOG_FORMAT": "json", "VLLM_API_KEY": "sk-abc"})
    assert s.log_format == "json"
    assert s.api_key is not None and s.api_key.get_secret_value() == "sk-abc"
    assert s.redacted()["api_key"] == "********"
    assert "sk-abc" not in repr(s)


def test_malformed_setting_is_one_line_naming_the_variable() -> None:
    with pytest.raises(SettingsError) as info:
        load_settings({"BENCH_LOG_FORMAT": "yaml"})
    assert "BENCH_LOG_FORMAT" in info.value.one_line()
    assert "\n" not in info.value.one_line()
    assert info.value.exit_code == Exit.USAGE


def test_unknown_setting_is_refused() -> None:
    with pytest.raises(SettingsError, match="BENCH_NOPE"):
        load_settings({"BENCH_NOPE": "1"})


def test_profile_error_is_a_usage_error() -> None:
    assert ProfileError("x").exit_code is Exit.USAGE
    assert int(Exit.USAGE) == 2


@pytest.mark.parametrize(
    ("env", "named", "why"),
    [
        ({"BENCH_API_KEY": "sk-x\r"}, "BENCH_API_KEY", "control character"),  # issue 29 S1
        ({"VLLM_API_KEY": "sk-x\r\n"}, "VLLM_API_KEY", "control character"),
        ({"BENCH_API_KEY": "sk-ключ"}, "BENCH_API_KEY", "not ASCII"),  # H6
        ({"BENCH_TOKENIZER_API_KEY": "sk-é"}, "BENCH_TOKENIZER_API_KEY", "not ASCII"),
        ({"BENCH_CA_FILE": "/nonexistent/ca.pem"}, "BENCH_CA_FILE", "is not a file"),  # H6
        (
            {"BENCH_LOG_FORMAT": "json", "BENCH_LOG_FORMAT__X": "1"},
            "BENCH_LOG_FORMAT__X",
            "not a nested setting",
        ),
        (
            {"BENCH_LOG_FORMAT__X": "1", "BENCH_LOG_FORMAT": "json"},
            "BENCH_LOG_FORMAT",
            "not a nested setting",
        ),
        ({"BENCH_LOG_LEVEL": "loud"}, "BENCH_LOG_LEVEL", "Input should be"),  # L5
    ],
)
def test_every_malformed_setting_is_one_usage_line_that_never_shows_a_key(
    env: dict[str, str], named: str, why: str
) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(env)
    line = info.value.one_line()
    assert f"setting {named} is invalid" in line and why in line, line
    assert "\n" not in line and "sk-" not in line
    assert info.value.exit_code == Exit.USAGE


def test_a_ca_file_that_holds_no_certificate_is_refused(tmp_path: pathlib.Path) -> None:
    not_pem = tmp_path / "ca.pem"
    not_pem.write_text("just text\n")
    with pytest.raises(SettingsError, match=r"BENCH_CA_FILE is invalid: .* holds no PEM"):
        load_settings({"BENCH_CA_FILE": str(not_pem)})


def test_a_log_level_is_taken_in_any_case() -> None:
    assert load_settings({"BENCH_LOG_LEVEL": "DEBUG"}).log_level == "debug"
