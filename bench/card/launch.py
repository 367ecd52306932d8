"""Seed a launch profile from a card's launch command.

`seed_from_command` reads what defines the server under test (engine, model, served
name, flags, GPU count = tensor x pipeline x data parallel sizes); `seed_profile` turns a
vLLM card into a `bench.launch_profile.LaunchProfile` (TOML): argv is the card's command
token for token less the executable's path and `--api-key <redacted>`, whose key comes
"from environment" (VLLM_API_KEY, listed in secret_env) and is never written down.
"""

from __future__ import annotations

import json
import shlex
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bench.card.model import Card
from bench.errors import ProfileError, validation_message
from bench.launch_profile import LaunchProfile, card_argv

FROM_ENVIRONMENT = "from environment"
_DROPPED = {"--host", "--port", "--api-key"}
# Flags whose product is the number of GPUs one server spans.
_PARALLEL = {
    "vllm": {
        "--tensor-parallel-size",
        "-tp",
        "--pipeline-parallel-size",
        "-pp",
        "--data-parallel-size",
        "-dp",
    },
    "sglang": {"--tp-size", "--tp", "--pp-size", "--dp-size", "--dp"},
}


class LaunchSeed(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: Literal["vllm", "sglang"]
    model: str
    served_model_name: str | None
    gpu_count: int
    max_model_len: int | None
    args: tuple[str, ...]
    api_key: Literal["from environment"] | None


def _engine(argv: list[str]) -> tuple[Literal["vllm", "sglang"], list[str]]:
    if "serve" in argv and argv[0].rsplit("/", 1)[-1] in ("vllm", "vllm.exe"):
        return "vllm", argv[argv.index("serve") + 1 :]
    if "sglang.launch_server" in argv:
        return "sglang", argv[argv.index("sglang.launch_server") + 1 :]
    if argv[:3] == ["python", "-m", "vllm.entrypoints.openai.api_server"]:
        return "vllm", argv[3:]
    raise ProfileError(
        f"launch command is neither 'vllm serve' nor sglang's launch_server: {argv[0]!r}",
        hint="write the launch profile by hand for this engine",
    )


def _pairs(rest: list[str]) -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = []
    i = 0
    while i < len(rest):
        flag = rest[i]
        if not flag.startswith("-"):
            raise ProfileError(f"launch command: expected a flag, got {flag!r}")
        if "=" in flag and flag.startswith("--"):
            name, value = flag.split("=", 1)
            out.append((name, value))
            i += 1
        elif i + 1 < len(rest) and not rest[i + 1].startswith("--"):
            out.append((flag, rest[i + 1]))
            i += 2
        else:
            out.append((flag, None))
            i += 1
    return out


def seed_from_command(command: str) -> LaunchSeed:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        raise ProfileError(f"launch command does not split into arguments: {exc}") from None
    if not argv:
        raise ProfileError("launch command is empty")
    engine, rest = _engine(argv)
    model: str | None = None
    if engine == "vllm" and rest and not rest[0].startswith("-"):
        model, rest = rest[0], rest[1:]
    pairs = _pairs(rest)
    values = dict(pairs)
    model = model or values.get("--model") or values.get("--model-path")
    if not model:
        raise ProfileError("launch command names no model", hint="add the model to the command")
    gpus = 1
    for flag, value in pairs:
        if flag in _PARALLEL[engine]:
            if value is None or not value.isdigit() or int(value) < 1:
                raise ProfileError(f"launch command: {flag} needs a positive count, got {value!r}")
            gpus *= int(value)
    args: list[str] = []
    for flag, value in pairs:
        if flag in _DROPPED or flag in ("--model", "--model-path"):
            continue
        args += [flag] if value is None else [flag, value]
    max_len = values.get("--max-model-len") or values.get("--context-length")
    return LaunchSeed(
        engine=engine,
        model=model,
        served_model_name=values.get("--served-model-name"),
        gpu_count=gpus,
        max_model_len=int(max_len) if max_len and max_len.isdigit() else None,
        args=tuple(args),
        api_key=FROM_ENVIRONMENT if "--api-key" in values else None,
    )


def _toml_value(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON escapes are valid TOML
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list | tuple):
        return "[\n" + "".join(f"    {_toml_value(v)},\n" for v in value) + "]"
    if isinstance(value, dict):  # an inline table (a profile's dropped_flags)
        return (
            "{"
            + ", ".join(f"{_toml_value(str(k))} = {_toml_value(v)}" for k, v in value.items())
            + "}"
        )
    raise TypeError(f"no TOML form for {type(value).__name__}")


def profile_toml(profile: LaunchProfile) -> str:
    head = (
        f"# Seeded by `bench card launch` from {profile.card}: argv is the card's command less\n"
        "# the executable's path and --api-key (the key comes from VLLM_API_KEY).\n"
    )
    body = [
        f"{name} = {_toml_value(value)}"
        for name, value in profile.model_dump().items()
        if value is not None
    ]
    return head + "\n".join(body) + "\n"


def seed_profile(card: Card, name: str, startup_timeout_s: float = 3600.0) -> LaunchProfile:
    if card.launch_command is None:
        raise ProfileError(f"{card.source} has no launch command", hint="write the profile by hand")
    description = (
        f"{card.model} on {card.hardware}, "
        f"{card.plan.engine} {card.plan.engine_version} (seeded from the card)"
    )
    return profile_from_command(card.source, description, card.launch_command, name,
                                startup_timeout_s)  # fmt: skip


def profile_from_command(
    source: str, description: str, command: str, name: str, startup_timeout_s: float = 3600.0
) -> LaunchProfile:
    """The launch profile of a vLLM launch COMMAND a card (named SOURCE) published."""
    seed = seed_from_command(command)
    if seed.engine != "vllm":
        raise ProfileError(
            f"{source}: a {seed.engine} launch cannot seed a profile (the image runs vLLM)",
            hint="write the profile by hand",
        )
    argv = ("vllm", *card_argv(command))
    port = next((argv[i + 1] for i, t in enumerate(argv[:-1]) if t == "--port"), "8000")
    data = {
        "schema_version": 1,
        "name": name,
        "description": description,
        "image": "vllm",
        "gpus": seed.gpu_count,
        "port": int(port),
        "served_model_name": seed.served_model_name or seed.model,
        "secret_env": ["VLLM_API_KEY"] if seed.api_key else [],
        "startup_timeout_s": startup_timeout_s,
        "card": source,
        "card_launch_command": command,
        "argv": list(argv),
    }
    try:
        return LaunchProfile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(
            f"{source}: the launch command makes no valid profile: {validation_message(exc)}"
        ) from None
