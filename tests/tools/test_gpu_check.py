"""`make gpu-check` (tools/gpu_check): on this machine without a GPU it says "no GPU" and
still smokes the twin; with the stand-in nvidia-smi (one H200 at a steady 300 W, its power
cap active, an energy counter) every part reads it as it would a real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.gpu_check import parts

# 300 W is 300 mJ per ms: the counter is 300 x the milliseconds of the clock, so the
# counter's energy and the power integral must agree.
_NVIDIA_SMI = r"""#!/bin/bash
case "$*" in
  *-lms*)
    while :; do
      ms=$(date +%s%3N)
      now=$(date -d "@${ms:0:-3}.${ms: -3}" +'%Y/%m/%d %H:%M:%S.%3N')
      printf '%s, 0, 300.00, 1980, 55, 90, 40, 0x0000000000000024, %s\n' "$now" $((ms * 300))
      sleep 0.05
    done;;
  *--query-gpu=index,*)
    echo "0, NVIDIA H200, GPU-0a1b2c3d, 00000000:18:00.0, 143771, 700.00, 1980, 570.86.15";;
  *--query-gpu=total_energy_consumption*) echo $(( $(date +%s%3N) * 300 ));;
  -q) echo "CUDA Version                              : 12.8";;
  --help-query-gpu) printf '"timestamp"\nWhen.\n\n"total_energy_consumption"\nEnergy.\n';;
  *) echo 0x0000000000000000;;
esac
"""


def _check(tmp_path: Path, path: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "out" / "gpu-check.json"
    done = subprocess.run(
        [sys.executable, "-m", "tools.gpu_check", "--out", str(out), "--load-s", "2",
         "--budget-s", "240"],
        capture_output=True, text=True, check=False, timeout=300,
        env={**os.environ, "PATH": path, "HOME": str(tmp_path)},
        cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]
    return done, json.loads(out.read_text())


def _parts(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in doc["parts"]}


@pytest.mark.integration
def test_without_a_gpu_it_says_so_and_smokes_the_twin(tmp_path: Path) -> None:
    empty = tmp_path / "bin"
    empty.mkdir()
    done, doc = _check(tmp_path, f"{empty}:/usr/bin:/bin")
    assert done.returncode == 6 and doc["ok"] is False
    got = _parts(doc)
    assert [p["name"] for p in doc["parts"]] == [
        "python", "inventory", "telemetry", "selftest_gpu", "smoke",
    ]  # fmt: skip
    assert got["python"]["status"] == "ok"
    assert got["inventory"]["message"] == "no GPU: nvidia-smi not found on PATH"
    assert got["telemetry"]["status"] == got["selftest_gpu"]["status"] == "skipped"
    smoke = got["smoke"]
    assert smoke["status"] == "ok", smoke["message"]
    assert "no GPU inference server was measured" in smoke["message"]
    assert [c["status"] for c in smoke["facts"]["cells"]] == ["valid", "valid"]
    assert "inventory     failed   no GPU: nvidia-smi not found on PATH" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("GPU check FAILED in ")


@pytest.mark.integration
def test_with_the_stand_in_nvidia_smi_every_gpu_part_reads_it(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(_NVIDIA_SMI)
    (bin_dir / "nvidia-smi").chmod(0o755)
    done, doc = _check(tmp_path, f"{bin_dir}:{os.environ['PATH']}")
    got = _parts(doc)
    assert got["inventory"]["message"] == "1 x NVIDIA H200 (driver 570.86.15, CUDA 12.8)"
    assert got["inventory"]["facts"]["query_gpu_energy_fields"] == ["total_energy_consumption"]
    tel = got["telemetry"]
    assert tel["status"] == "ok", tel["message"]
    assert tel["facts"]["fields"] == {
        "clock_limits": "clocks_event_reasons.active",
        "energy_counter": "total_energy_consumption",
    }
    assert tel["facts"]["energy_source"] == "energy_counter"
    energy = tel["facts"]["energy_j"]
    assert energy["reported"] == pytest.approx(energy["power_integral"], rel=0.02)
    assert tel["facts"]["gpu_throttled"] == "sw_thermal_slowdown active in 100% of samples"
    assert "idle (torch is not importable" in tel["message"]  # this venv has no torch
    # The self-test needs torch: one line saying so, not a traceback.
    assert got["selftest_gpu"]["status"] == "failed"
    assert "torch" in got["selftest_gpu"]["message"]
    smoke = got["smoke"]
    assert smoke["status"] == "ok", smoke["message"]
    assert smoke["facts"]["energy_from"] == "energy_counter"
    for cell in smoke["facts"]["cells"]:
        assert cell["energy_source"] == "energy_counter"
        assert cell["flags"] == {"gpu_throttled": "sw_thermal_slowdown active in 100% of samples"}
    assert done.returncode == 6  # the self-test failed


def test_a_missing_module_or_an_error_is_one_line_per_part() -> None:
    def missing() -> parts.Part:
        raise ModuleNotFoundError("No module named 'structlog'", name="structlog")

    def broken() -> parts.Part:
        raise OSError("disk\nfull " + "x" * 400)

    gone = parts.guarded("smoke", missing)
    assert (gone.name, gone.status) == ("smoke", "failed")
    assert gone.message.startswith("missing Python module structlog: install them: bash tools/")
    bad = parts.guarded("telemetry", broken)
    assert bad.message.startswith("OSError: disk full x") and len(bad.message) == 300
    assert "\n" not in bad.message


def test_a_context_never_waits_past_its_deadline() -> None:
    import time

    ctx = parts.Context(Path("."), time.monotonic() + 30, 5.0, None)
    assert 29 <= ctx.left(240) <= 30 and ctx.left(10) == 10
    late = parts.Context(Path("."), time.monotonic() - 5, 5.0, None)
    assert late.left(240) == 1.0


def test_the_load_runs_matmuls_on_every_gpu_torch_sees(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's bookkeeping on a stand-in torch with two GPUs (torch has no GPU here)."""
    import types

    from tools.gpu_check import load

    calls: list[str] = []

    class Tensor:
        def __matmul__(self, other: object) -> Tensor:
            calls.append("matmul")
            return self

    cuda = types.SimpleNamespace(
        is_available=lambda: True,
        device_count=lambda: 2,
        synchronize=lambda d: calls.append(f"sync {d}"),
    )
    fake = types.SimpleNamespace(
        __version__="2.11.0+cu130", version=types.SimpleNamespace(cuda="13.0"), cuda=cuda,
        bfloat16="bf16", device=lambda kind, i: f"{kind}:{i}",
        randn=lambda *size, device, dtype: Tensor(),
    )  # fmt: skip
    monkeypatch.setitem(sys.modules, "torch", fake)
    found = load._load(0.05)
    assert found["ran"] is True and found["gpus"] == 2 and found["torch_cuda"] == "13.0"
    rounds = found["matmuls_per_gpu"]
    assert rounds >= 1 and calls.count("matmul") == 2 * rounds
    assert calls.count("sync cuda:0") == calls.count("sync cuda:1") == rounds
