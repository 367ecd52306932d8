"""`make bench [HOST=...] WORKLOAD=... RATES=... SLO=...` and `make compare-commits ...
WORKLOAD=...`: the variables reach the commands as --workload, --rates, --slo, one word each
whatever they hold, and nothing at all when not given (the command is what it was).

Real make on the real Makefile; `bench` and `python` in BIN are stand-ins that write down
their arguments (tests/support/make_stand_ins.py), so nothing else runs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.hostile.test_makefile import _hostile
from tests.support.make_stand_ins import ROOT, make_argv
from tests.support.require import require

pytestmark = pytest.mark.subprocess

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
    return make_argv(tmp_path, target, *words, unset=MAKE_VARS)


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
