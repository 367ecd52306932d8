"""What a launch needs from a GPU host, as data (provisioning/host_requirements.toml).

The launch profile says how many GPUs the server uses; this file adds what only the
host check cares about: which GPU model and how much memory per GPU the published numbers
were measured on, how much disk the weights and the image take, and whether the model's
Hugging Face repository is gated (needs a token).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from bench.errors import ProfileError, validation_message
from provisioning.image.cuda_compat import CudaRequirement

REQUIREMENTS_FILE = Path(__file__).with_name("host_requirements.toml")
GIB = 1 << 30

# CUDA 13.x needs an R580 driver or newer: NVIDIA's minor-version-compatibility table
# (docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html) lists
# "CUDA 13.x: >= 580", and a CUDA 13.2 image runs on any such driver.
MIN_DRIVER_CUDA_13 = (580, 0)


class _Entry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    gpu_model: str | None = None
    gpu_memory_mib: int | None = Field(default=None, ge=0)
    weights_gib: float = Field(default=0.0, ge=0)
    image_gib: float = Field(default=0.0, ge=0)
    hf_model: str | None = None
    hf_token_required: bool = False
    # "hub": downloaded from the Hugging Face hub; "generated": built on the host by the
    # weights step (bench.rehearsal_model, in a container of the run's image).
    weights_source: Literal["hub", "generated"] = "hub"
    host_memory_gib: float = Field(default=0.0, ge=0, le=1 << 20)
    host_memory_why: str = ""


@dataclass(frozen=True)
class Requirements:
    """Everything preflight compares the host against."""

    profile: str
    gpus: int
    gpu_model: str | None = None  # a substring of nvidia-smi's name, e.g. "RTX PRO 6000"
    gpu_memory_mib: int | None = None  # per GPU, as nvidia-smi reports memory.total
    min_driver: tuple[int, ...] = MIN_DRIVER_CUDA_13
    weights_bytes: int = 0
    image_bytes: int = 0
    hf_model: str | None = None
    hf_token_required: bool = False
    image_ref: str | None = None  # when present on the host, its disk is not needed again
    # What the image needs from the driver when the host does not have the image to ask
    # (read from the image on this machine, else from the Dockerfile); None: no CUDA.
    image_cuda: CudaRequirement | None = None
    model_revision: str | None = None  # the launch profile's pinned hub commit
    download_weights: bool = True  # False: the weights must already be in the host's cache
    weights_generated: bool = False  # built on the host, never downloaded (the rehearsal's)
    memory_bytes: int = 0  # the host's RAM (MemTotal) the launch needs
    memory_why: str = ""  # and why, in a few words (host_requirements.toml)


def load_requirements(
    profile: str,
    gpus: int,
    *,
    image_ref: str | None = None,
    image_cuda: CudaRequirement | None = None,
    model_revision: str | None = None,
    download_weights: bool = True,
    path: Path = REQUIREMENTS_FILE,
) -> Requirements:
    try:
        table = tomllib.loads(path.read_text())
        entry = _Entry.model_validate(table.get(profile, {}))
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: [{profile}] is malformed: {exc}".splitlines()[0]) from None
    except ValidationError as exc:
        raise ProfileError(f"{path}: [{profile}] is malformed: {validation_message(exc)}") from None
    return Requirements(
        profile=profile,
        gpus=gpus,
        gpu_model=entry.gpu_model,
        gpu_memory_mib=entry.gpu_memory_mib,
        weights_bytes=int(entry.weights_gib * GIB),
        image_bytes=int(entry.image_gib * GIB),
        hf_model=entry.hf_model,
        hf_token_required=entry.hf_token_required,
        image_ref=image_ref,
        image_cuda=image_cuda,
        model_revision=model_revision,
        download_weights=download_weights,
        weights_generated=entry.weights_source == "generated",
        memory_bytes=int(entry.host_memory_gib * GIB),
        memory_why=entry.host_memory_why,
    )
