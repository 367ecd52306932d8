"""`make bench [HOST=...] WORKLOAD=... RATES=... SLO=...` and `make compare-commits ...
WORKLOAD=...`: the variables reach the commands as --workload, --rates, --slo, one word each
whatever they hold, and nothing at all when not given (the command is what it was).

Real make on the real Makefile; `bench` and `python` in BIN are stand-ins that write down
their arguments (tests/hostile/test_makefile.py's), so nothing else runs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hostile.test_makefile import STUB, _hostile
from tests.support.require import require

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).parents[3]
MAKE_VARS = ("WORKLOAD", "RATES", "SLO", "HOST", "RUN_ARGS", "A", "B", "SLURM", "CLUSTER")
TARGETS = {
    "bench-local": ("bench", []),
    "bench": ("bench", ["HOST=gpu01"]),
    "compare-commits": ("compare-commits", ["HOST=gpu01", "A=abcdef1", "B=abcdef2"]),
    "bench-slurm": ("bench", ["SLURM=debug"]),
}


@pytest.fixture(autouse=True)
def _make_and_venv() -> None:
    require("make", paths=(ROOT / ".venv/bin/bench", ROOT / ".venv/bin/python"))


def _argv(tmp_path: Path, target: str, *words: str) -> list[str]:
    """The one command TARGET ran, as the stand-in wrote it down."""
    log = tmp_path / "argv.jsonl"
    log.unlink(missing_ok=True)
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name in ("bench", "python"):
        path = stubs / name
        path.write_text(STUB.format(python=sys.executable, log=str(log)))
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    stamp = tmp_path / "stamp"
    stamp.touch()  # newer than pyproject.toml: `setup` has nothing to do
    got = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), target, f"BIN={stubs}",
         f"STAMP={stamp}", *words],
        capture_output=True, text=True, timeout=60, check=False,
        env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", *MAKE_VARS)},
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    lines = log.read_text().splitlines()
    assert len(lines) == 1
    argv: list[str] = json.loads(lines[0])
    return argv


@pytest.mark.parametrize("case", list(TARGETS))
def test_workload_rates_and_slo_arrive_as_one_word_each_and_run_nothing(
    case: str, tmp_path: Path
) -> None:
    target, words = TARGETS[case]
    plain = _argv(tmp_path, target, *words, "RUN_ARGS=--duration 5")
    assert not {"--workload", "--rates", "--slo"} & set(plain)
    canary = tmp_path / "ran"
    values = {v: _hostile(canary, v) for v in ("WORKLOAD", "RATES", "SLO")}
    got = _argv(tmp_path, target, *words, "RUN_ARGS=--duration 5",
                *(f"{k}={v}" for k, v in values.items()))  # fmt: skip
    assert sorted(p.name for p in tmp_path.iterdir()) == ["argv.jsonl", "bin", "stamp"]
    flags = ["--workload", values["WORKLOAD"], "--rates", values["RATES"], "--slo", values["SLO"]]
    cut = got.index("--")  # the orchestrator's own options (bench local's too) before --
    assert got[cut - len(flags) : cut] == flags, got
    # and nothing else moved: the same command with the three flags taken out
    assert got[: cut - len(flags)] + got[cut:] == plain


def test_the_help_names_workload_on_both_targets() -> None:
    got = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "help"],
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    lines = {line.split()[1]: line for line in got.stdout.splitlines()}
    assert "WORKLOAD=" in lines["bench"] and "WORKLOAD=" in lines["compare-commits"]
