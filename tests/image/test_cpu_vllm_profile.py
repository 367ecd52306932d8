"""The cpu-vllm profile: the published launch rehearsed on CPU, each of its flags kept or
dropped with a reason (the orchestrator's side of it: tests/provisioning/runs/)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from bench.errors import ProfileError
from bench.launch_profile import LAUNCH_PROFILE_DIR, flag_names, load_launch_profile

ROOT = Path(__file__).resolve().parents[2]
# The flags this profile adds for the CPU, none of them in the published launch.
ADDED = {"--enforce-eager", "--kv-cache-memory-bytes"}


def test_every_published_flag_is_kept_or_dropped_never_both() -> None:
    cpu, published = load_launch_profile("cpu-vllm"), load_launch_profile("published")
    assert cpu.rehearses == "published"
    kept, dropped, theirs = (
        set(flag_names(cpu.argv)),
        set(cpu.dropped_flags),
        flag_names(published.argv),
    )
    assert len(theirs) == len(set(theirs)) == 15
    assert set(theirs) <= kept | dropped, sorted(set(theirs) - kept - dropped)
    assert not kept & dropped
    assert dropped <= set(theirs), sorted(dropped - set(theirs))  # no stale entry
    assert kept - set(theirs) == ADDED
    assert all(len(why) > 30 for why in cpu.dropped_flags.values())


def test_kept_flags_keep_the_published_values_but_the_models_length() -> None:
    cpu, published = load_launch_profile("cpu-vllm"), load_launch_profile("published")
    switches = {"--trust-remote-code", "--enable-auto-tool-choice"}  # flags without a value
    for flag in set(flag_names(cpu.argv)) - ADDED - switches - {"--max-model-len"}:
        assert cpu.flag(flag) == published.flag(flag) is not None, flag
    assert switches <= set(cpu.argv) & set(published.argv)
    assert cpu.flag("--reasoning-parser") == "qwen3" and cpu.flag("--host") == "0.0.0.0"
    # The tiny model's max_position_embeddings (bench/rehearsal_model.py).
    make_model = (ROOT / "bench/rehearsal_model.py").read_text()
    assert f"MAX_POSITIONS = {int(cpu.flag('--max-model-len') or 0):_}" in make_model
    assert (cpu.image, cpu.gpus, cpu.port, cpu.served_model_name) == ("vllm-cpu", 0, 8000, "qwen")
    assert "--api-key" not in cpu.argv and "VLLM_API_KEY" in cpu.secret_env


GOOD = """schema_version = 1
name = "{name}"
description = "d"
image = "vllm-cpu"
gpus = {gpus}
port = 8000
served_model_name = "m"
startup_timeout_s = 10.0
argv = ["vllm", "serve", "m", "--port", "8000"]
{extra}"""


REHEARSES = 'rehearses = "published"\n[dropped_flags]\n'


def _write(tmp_path: Path, name: str, **fields: object) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(GOOD.format(name=name, **{"gpus": 0, "extra": "", **fields}))
    return path


@pytest.mark.parametrize(
    ("gpus", "extra", "problem"),
    [
        (1, "", "a launch on the vllm-cpu image runs on CPU; gpus must be 0"),
        (0, '[dropped_flags]\n"--quantization" = "why"\n', "dropped_flags needs rehearses"),
        (0, REHEARSES + '"--port" = "why"\n', "--port is both in argv and in dropped_flags"),
        (0, REHEARSES + '"quantization" = "why"\n', "dropped flag 'quantization' is not a --flag"),
        (0, REHEARSES + '"--quantization" = " "\n', "dropped flag --quantization has no reason"),
    ],
)
def test_bad_rehearsals_fail_in_one_line(
    tmp_path: Path, gpus: int, extra: str, problem: str
) -> None:
    with pytest.raises(ProfileError, match=re.escape(problem)) as info:
        load_launch_profile(_write(tmp_path, "r", gpus=gpus, extra=extra))
    assert "\n" not in str(info.value)


def test_a_good_rehearsal_loads(tmp_path: Path) -> None:
    extra = 'rehearses = "published"\n[dropped_flags]\n"--quantization" = "not quantised"\n'
    profile = load_launch_profile(_write(tmp_path, "r", extra=extra))
    assert profile.dropped_flags == {"--quantization": "not quantised"}
    assert (LAUNCH_PROFILE_DIR / "cpu-vllm.toml").is_file()
