"""The run's image built on the host from this checkout's Dockerfile (`--image-source build`).

The build context is this repository as .dockerignore selects it (pyproject.toml and
bench/), sent as a tar over the Docker SDK's SSH connection; the host's engine builds the
launch profile's stage with BuildKit (the Dockerfile's cache mounts need it) and
`--network host` (pip inside the build reaches PyPI as the host does). BuildProgress lines come
back as `docker build --progress plain` prints them; the image is identified by the id the
engine reports (the sha256 of its config), which the rest of the run uses instead of the tag.

The engine's builtin Dockerfile frontend reads the file: its `# syntax=` line is dropped,
since that would make BuildKit pull the frontend image from a registry the host may not
reach (the Dockerfile uses no syntax newer than the builtin frontend of Engine 20.10).

The vLLM commit is the build argument VLLM_COMMIT (the Dockerfile pins a default) and is
also set as the image label bench.vllm.commit, so every bundle records it (the `vllm`
stage labels it itself; the CPU-only `bench` stage has no vLLM, the label says which
commit the image was built for).
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from bench import __version__, image_tag
from bench.errors import RunFailed, UsageError
from provisioning.containers.engine import DockerEngine
from provisioning.containers.local_images import build_context
from provisioning.image import buildkit

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMMIT_LABEL = "bench.vllm.commit"
SOURCES = ("auto", "build", "stream")
WHEELS_TARGET = "vllm-cpu"  # the stage that installs from .wheelhouse/ of the context
# The Dockerfile as the engine reads it travels in the context under this name (the
# generated .dockerignore of the context keeps it out of COPY).
_CONTEXT_DOCKERFILE = ".dockerfile.provision"
_COMMIT = re.compile(r"[0-9a-fA-F]{7,40}")
_PINNED = re.compile(r"^ARG VLLM_COMMIT=(\S+)\s*$", re.M)
_TAIL_LINES = 15


@dataclass(frozen=True)
class BuildSpec:
    """One image to build on the host: the stage, its tag, build arguments and labels."""

    target: str
    tag: str
    commit: str
    build_args: Mapping[str, str] = field(default_factory=dict)
    root: Path = ROOT

    @property
    def labels(self) -> dict[str, str]:
        return {COMMIT_LABEL: self.commit}


def valid_commit(text: str, name: str = "commit") -> str:
    """A vLLM commit as given by the user: 7 to 40 hex digits, lower-cased."""
    if not _COMMIT.fullmatch(text):
        raise UsageError(
            f"{name}={text!r} is not a commit",
            hint="give 7 to 40 hexadecimal digits of a vLLM commit, e.g. 73a5831127a9",
        )
    return text.lower()


def pinned_commit(dockerfile: Path = DOCKERFILE) -> str:
    """The Dockerfile's default VLLM_COMMIT (the commit of the published card)."""
    found = _PINNED.search(dockerfile.read_text())
    if found is None:
        raise UsageError(f"{dockerfile} sets no default ARG VLLM_COMMIT")
    return found.group(1).lower()


def same_commit(a: str, b: str) -> bool:
    """Two abbreviations of one commit (the shorter is a prefix of the longer)."""
    return a.startswith(b) or b.startswith(a)


def parse_build_args(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, eq, value = item.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise UsageError(f"--build-arg {item!r} is not NAME=VALUE")
        out[name] = value
    return out


def commit_tag(target: str, commit: str) -> str:
    """The tag of an image built for a vLLM commit (docker/build.sh's for the vllm stage)."""
    tag = image_tag(__version__)
    return f"bench-vllm:{commit}" if target == "vllm" else f"bench:{tag}-vllm-{commit}"


def spec_for(
    target: str, tag: str, *, commit: str | None, build_args: Mapping[str, str]
) -> BuildSpec:
    """The build of TARGET for COMMIT (default: VLLM_COMMIT of build_args, else the pin)."""
    pinned = pinned_commit()
    chosen = commit or build_args.get("VLLM_COMMIT") or pinned
    chosen = valid_commit(chosen, "VLLM_COMMIT")
    args = {"BENCH_VERSION": __version__, **build_args, "VLLM_COMMIT": chosen}
    if not same_commit(chosen, pinned) and "VLLM_VERSION" not in build_args:
        # The pinned version string is the pin's: another commit is checked instead by the
        # hash in its version (docker/check_version.sh), so no one has to know it up front.
        args["VLLM_VERSION"] = ""
    return BuildSpec(target=target, tag=tag, commit=chosen, build_args=args)


# The stages' base images, as build arguments the Dockerfile gives a default (a digest).
_BASE_ARGS = {"vllm": ("CUDA_DEVEL_IMAGE", "CUDA_RUNTIME_IMAGE")}
_PYTHON_BASE_ARGS = ("PYTHON_BASE",)


def base_images(spec: BuildSpec) -> tuple[str, ...]:
    """The images SPEC's stage is built FROM: its build arguments, else the Dockerfile's."""
    text = (spec.root / "Dockerfile").read_text()
    found = []
    for name in _BASE_ARGS.get(spec.target, _PYTHON_BASE_ARGS):
        default = re.search(rf"^ARG {name}=(\S+)\s*$", text, re.M)
        value = spec.build_args.get(name) or (default.group(1) if default else None)
        if value:
            found.append(value)
    return tuple(found)


def engine_dockerfile(text: str) -> str:
    """The Dockerfile for the engine's builtin frontend: without its `# syntax=` line."""
    first, _, rest = text.partition("\n")
    return rest if first.replace(" ", "").lower().startswith("#syntax=") else text


def build_on_host(engine: DockerEngine, spec: BuildSpec, *, host: str, out: TextIO) -> str:
    """Build SPEC with the host's engine, progress on OUT; returns the image id."""
    text = engine_dockerfile((spec.root / "Dockerfile").read_text())
    params = {
        "t": spec.tag,
        "target": spec.target,
        "dockerfile": _CONTEXT_DOCKERFILE,
        "buildargs": json.dumps(dict(spec.build_args)),
        "labels": json.dumps(spec.labels),
        "networkmode": "host",
        "rm": "1",
    }
    progress = buildkit.BuildProgress()
    tail: deque[str] = deque(maxlen=_TAIL_LINES)
    image_id: str | None = None

    def show(line: str) -> None:
        tail.append(line)
        print(f"[{host}] {line}", file=out, flush=True)

    wheels = spec.target == WHEELS_TARGET
    with build_context(spec.root, _CONTEXT_DOCKERFILE, text, wheels=wheels) as context:
        for message in engine.build(context, params):
            if message.get("id") == buildkit.TRACE_ID:
                try:
                    lines = progress.lines(str(message.get("aux", "")))
                except buildkit.MalformedTrace as exc:
                    lines = [f"(unreadable build progress: {exc})"]
                for line in lines:
                    show(line)
            elif message.get("id") == buildkit.IMAGE_ID:
                image_id = str((message.get("aux") or {}).get("ID") or "") or None
            elif "error" in message or "errorDetail" in message:
                detail = message.get("errorDetail") or {}
                why = str(detail.get("message") or message.get("error") or "").strip()
                raise RunFailed(
                    f"building {spec.tag} (target {spec.target}) on {host} failed: {why}",
                    hint="the build's last lines are above; an offline host needs the base "
                    "images present (e.g. --build-arg PYTHON_BASE=bench-base:latest for bench)",
                )
            elif isinstance(message.get("stream"), str):
                for line in message["stream"].splitlines():
                    if line.strip():
                        show(line)
    if image_id is None:
        raise RunFailed(
            f"building {spec.tag} on {host} ended without an image id; last lines: "
            + " | ".join(tail)
        )
    return image_id
