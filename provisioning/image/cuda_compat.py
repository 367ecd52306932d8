"""Can this host's driver start the image? Its CUDA ceiling against what the image requires.

The NVIDIA container toolkit refuses to start a container whose NVIDIA_REQUIRE_CUDA
(`cuda>=13.2 brand=...` in the nvidia/cuda 13.2 images) the driver does not satisfy
("requirement error: unsatisfied condition: cuda>=13.2, please update your driver"), and
kernels shipped only as PTX from nvcc 13.2 (FlashAttention-2 for compute capability 12.0)
cannot be JIT-compiled by an older driver. So the check compares two CUDA versions:

- the driver's ceiling, as `nvidia-smi` prints it in its header ("CUDA Version: 13.0");
- the image's requirement, read from the image's own config (NVIDIA_REQUIRE_CUDA) when the
  image is on the host or on this machine; before the image exists, from the Dockerfile's
  CUDA_VERSION build argument for the launch profile's stage. The check names its source.

It runs before anything is pulled, copied or built.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from provisioning.hosts.shell import CommandResult

_SMI_CUDA = re.compile(r"CUDA Version:\s*(\d+)\.(\d+)")
_REQUIRE = re.compile(r"(?:^|\s)cuda>=(\d+)\.(\d+)")
_DOCKERFILE_CUDA = re.compile(r"^ARG CUDA_VERSION=(\d+)\.(\d+)\s*$", re.M)

Version = tuple[int, int]


@dataclass(frozen=True)
class CudaRequirement:
    """The CUDA an image needs from the driver, and where that was read."""

    version: Version
    source: str


def driver_cuda(nvidia_smi_text: str) -> Version | None:
    """The driver's CUDA ceiling from nvidia-smi's header; None when it prints none."""
    match = _SMI_CUDA.search(nvidia_smi_text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def required_cuda(env: list[str]) -> Version | None:
    """cuda>=X.Y of NVIDIA_REQUIRE_CUDA in an image's environment; None when it sets none."""
    for item in env:
        name, _, value = item.partition("=")
        if name == "NVIDIA_REQUIRE_CUDA":
            match = _REQUIRE.search(value)
            if match:
                return int(match.group(1)), int(match.group(2))
    return None


def image_env_command(ref: str) -> str:
    return f"docker image inspect --format '{{{{json .Config.Env}}}}' {shlex.quote(ref)}"


def from_inspect(result: CommandResult, where: str, ref: str) -> CudaRequirement | None:
    """The requirement from `docker image inspect` output (None: no image, or none set)."""
    if not result.ok:
        return None
    try:
        env = json.loads(result.stdout)
    except json.JSONDecodeError:
        return None
    if not isinstance(env, list):
        return None
    version = required_cuda([str(e) for e in env])
    if version is None:
        return None
    return CudaRequirement(version, f"NVIDIA_REQUIRE_CUDA of {ref} on {where}")


def from_dockerfile(dockerfile: Path) -> CudaRequirement | None:
    """Before the image exists: the CUDA the Dockerfile builds it on (its CUDA base)."""
    try:
        match = _DOCKERFILE_CUDA.search(dockerfile.read_text())
    except OSError:
        return None
    if match is None:
        return None
    version = (int(match.group(1)), int(match.group(2)))
    return CudaRequirement(version, f"{dockerfile.name} CUDA_VERSION (image not built yet)")


def fmt(version: Version) -> str:
    return f"{version[0]}.{version[1]}"
