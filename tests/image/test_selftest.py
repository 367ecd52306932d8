"""The image self-test's generic part (docker/image_selftest.py), run on this machine.

The `vllm` image runs parts python,cc,cuda as its last build step and the CPU `bench` image
runs part python (its build in tests/image/test_build.py); here the same script runs
against this machine's interpreter and compiler, and each missing piece is shown to fail
with its name.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.image.scripts import load_script

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docker" / "image_selftest.py"


def test_generic_parts_pass_here_and_write_the_facts(tmp_path: Path) -> None:
    out = tmp_path / "image.json"
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--parts", "python,cc", "--out", str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    facts = json.loads(out.read_text())
    assert facts["parts"] == ["python", "cc"]
    assert Path(facts["cc"]["python_include"], "Python.h").is_file()
    assert facts["python"]["version"] == ".".join(map(str, sys.version_info[:3]))
    import importlib.metadata as md

    assert facts["packages"]["pytest"] == md.version("pytest")
    assert "bench" in facts["packages"]
    assert facts["matplotlib"] == md.version("matplotlib")


def test_a_matplotlib_that_does_not_import_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    st = load_script("image_selftest")
    real = st.importlib.import_module

    def no_ft2font(name: str) -> object:
        if name == "matplotlib.ft2font":
            raise ImportError("numpy.core.multiarray failed to import")
        return real(name)

    monkeypatch.setattr(st.importlib, "import_module", no_ft2font)
    said = r"import matplotlib\.ft2font failed \(ImportError: numpy.core.multiarray failed to"
    with pytest.raises(st.Missing, match=said + r" import\): `bench report` needs matplotlib"):
        st.check_python({})


def test_a_missing_python_header_is_named(tmp_path: Path) -> None:
    st = load_script("image_selftest")
    with pytest.raises(st.Missing, match=r"Python\.h is missing: install python3\.\d+-dev"):
        st.check_cc({}, include=str(tmp_path))


def test_a_missing_compiler_is_named(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    st = load_script("image_selftest")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CC", raising=False)
    with pytest.raises(st.Missing, match="no C compiler"):
        st.check_cc({})


def test_a_compiler_that_fails_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    st = load_script("image_selftest")
    monkeypatch.setenv("CC", "false")
    with pytest.raises(st.Missing, match="does not compile with false"):
        st.check_cc({})


def test_the_cuda_part_fails_without_nvcc(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """This machine has no CUDA toolkit on PATH: the part names nvcc, exit 1, one line."""
    monkeypatch.setenv("PATH", str(tmp_path))
    res = subprocess.run(
        [sys.executable, str(SCRIPT), "--parts", "cuda"],
        capture_output=True,
        text=True,
        check=False,
        env={"PATH": str(tmp_path)},
    )
    assert res.returncode == 1
    assert res.stderr.strip().splitlines() == [
        "image self-test FAILED: nvcc is not on PATH: install cuda-nvcc "
        "(FlashInfer JIT-compiles with it)"
    ]


def _cpu_part(python: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--parts", "cpu"],
        capture_output=True, text=True, check=False, env={"BENCH_VLLM_PYTHON": python},
    )  # fmt: skip


def test_the_cpu_part_names_a_missing_server_interpreter_and_a_vllm_that_does_not_import(
    tmp_path: Path,
) -> None:
    """The `vllm-cpu` image's part runs the server's own interpreter (its image test runs
    it for real: tests/provisioning/flow/test_cpu_vllm.py). Here: none at all, then one
    without torch (this machine's)."""
    missing = _cpu_part(str(tmp_path / "python"))
    assert missing.returncode == 1
    assert missing.stderr.strip() == (
        f"image self-test FAILED: the server's interpreter {tmp_path / 'python'} is missing "
        "(BENCH_VLLM_PYTHON)"
    )
    bare = _cpu_part(sys.executable)
    assert bare.returncode == 1
    assert bare.stderr.strip().splitlines() == [
        "image self-test FAILED: vLLM's CPU build does not import: "
        "ModuleNotFoundError: No module named 'torch'"
    ]
