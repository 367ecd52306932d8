"""The lock of the server's Python (issue 16): the vllm-build stage installs against
requirements/vllm/vllm-<commit>.constraints when the repository has one, and `make
lock-vllm` (docker/lock_vllm.sh) writes that file from a build without constraints.

The real resolution needs the registry and a vLLM build host; here `docker` and the
registry probe's `python3` are stand-ins on PATH (as the twin tests stand in for
nvidia-smi), so what the script asks Docker for and what it keeps are checked."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.image.dockerfile_rules import parse

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
TEXT = (ROOT / "Dockerfile").read_text(encoding="utf-8")
COMMIT = parse(TEXT).global_args["VLLM_COMMIT"]

FREEZE = """\
triton==3.5.0
torch==2.9.0+cu132
-e git+https://example.org/x.git#egg=x
vllm @ file:///dist/vllm-0.30.1rc1.dev452+g73a583112-cp312-cp312-linux_x86_64.whl
Flask==3.0.0
numpy==2.2.1
local-thing @ file:///tmp/local_thing-1.0-py3-none-any.whl
"""


def test_the_build_stage_reads_the_commits_constraints_before_any_install() -> None:
    stage = parse(TEXT).stage("vllm-build")
    keys = [(i.keyword, i.args) for i in stage.instructions]
    copy = keys.index(("COPY", "requirements/vllm/ /opt/constraints/"))
    env = keys.index(("ENV", "PIP_CONSTRAINT=/opt/vllm.constraints"))
    pick = next(n for n, (k, a) in enumerate(keys) if k == "RUN" and "/opt/constraints/" in a)
    assert copy < pick < env
    assert 'c="/opt/constraints/vllm-${VLLM_COMMIT}.constraints"' in keys[pick][1]
    assert '[ "${VLLM_CONSTRAINTS}" = auto ]' in keys[pick][1]
    installs = [n for n, (k, a) in enumerate(keys) if k == "RUN" and "pip install" in a]
    assert installs and env < min(installs)
    assert ("ARG", "VLLM_CONSTRAINTS=auto") in keys
    assert "!requirements/vllm/" in (ROOT / ".dockerignore").read_text().split()


def _tree(tmp: Path, freeze: str) -> tuple[Path, dict[str, str], Path]:
    """A copy of what the script reads, and stand-ins for docker and the registry probe."""
    root = tmp / "repo"
    (root / "docker").mkdir(parents=True)
    (root / "requirements" / "vllm").mkdir(parents=True)
    for name in ("docker/lock_vllm.sh", "docker/registry.sh", "Dockerfile"):
        shutil.copy(ROOT / name, root / name)
    bin_dir, calls = tmp / "bin", tmp / "docker-calls"
    bin_dir.mkdir()
    (tmp / "freeze.txt").write_text(freeze)
    (bin_dir / "docker").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {calls}\n'
        f'case "$1" in run) cat {tmp / "freeze.txt"} ;; esac\n'
        "exit 0\n"
    )
    (bin_dir / "python3").write_text("#!/bin/sh\nexit 0\n")  # the registry answers
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HOME": str(tmp)}
    return root, env, calls


def test_lock_vllm_keeps_the_unconstrained_builds_freeze(tmp_path: Path) -> None:
    root, env, calls = _tree(tmp_path, FREEZE)
    done = subprocess.run(
        ["bash", str(root / "docker" / "lock_vllm.sh")],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = root / "requirements" / "vllm" / f"vllm-{COMMIT}.constraints"
    assert done.stdout.strip() == str(out)
    build = next(c for c in calls.read_text().splitlines() if c.startswith("build "))
    assert "--target vllm-build" in build
    assert f"--build-arg VLLM_COMMIT={COMMIT}" in build
    assert "--build-arg VLLM_CONSTRAINTS=none" in build  # resolved freely, not from itself
    pins = [x for x in out.read_text().splitlines() if not x.startswith("#")]
    assert pins == ["Flask==3.0.0", "numpy==2.2.1", "torch==2.9.0+cu132", "triton==3.5.0"]
    assert f"for vLLM {COMMIT}" in out.read_text()


def test_lock_vllm_writes_nothing_from_a_freeze_without_torch(tmp_path: Path) -> None:
    root, env, _ = _tree(tmp_path, "numpy==2.2.1\n")
    done = subprocess.run(
        ["bash", str(root / "docker" / "lock_vllm.sh")],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "lock_vllm.sh: error: the build's freeze has no torch: not written"
    ]
    assert sorted(p.name for p in (root / "requirements" / "vllm").iterdir()) == []


def test_lock_vllm_stops_first_without_a_registry(tmp_path: Path) -> None:
    root, env, calls = _tree(tmp_path, FREEZE)
    (tmp_path / "bin" / "python3").write_text("#!/bin/sh\nexit 1\n")  # unreachable
    done = subprocess.run(
        ["bash", str(root / "docker" / "lock_vllm.sh")],
        env=env, capture_output=True, text=True, check=False, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.strip() == (
        "lock_vllm.sh: error: cannot resolve the vLLM build's dependencies here: "
        "the container registry (registry-1.docker.io) is unreachable from this machine"
    )
    assert not any(c.startswith("build ") for c in calls.read_text().splitlines())
