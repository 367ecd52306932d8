"""`make bench [HOST=... | SLURM=...] OTEL_URL=... METRICS_PORT=... METRICS_HOST=...`: the
variables reach the command as --otel-url, --metrics-port, --metrics-host, one word each
whatever they hold (the orchestrator's options with a host or Slurm; `bench run`'s, after
--, without a host), and nothing at all when not given.

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

LIVE_VARS = ("OTEL_URL", "METRICS_PORT", "METRICS_HOST")
MAKE_VARS = (*LIVE_VARS, "HOST", "RUN_ARGS", "SLURM", "CLUSTER", "WORKLOAD")
TARGETS = {"bench-local": [], "bench": ["HOST=gpu01"], "bench-slurm": ["SLURM=debug"]}


@pytest.fixture(autouse=True)
def _make_and_venv() -> None:
    require("make", paths=(ROOT / ".venv/bin/bench", ROOT / ".venv/bin/python"))


def _argv(tmp_path: Path, *words: str) -> list[str]:
    """The one command `make bench WORDS` ran, as the stand-in wrote it down."""
    return make_argv(tmp_path, "bench", *words, unset=MAKE_VARS)


@pytest.mark.parametrize("case", list(TARGETS))
def test_the_live_variables_arrive_as_one_word_each_and_run_nothing(
    case: str, tmp_path: Path
) -> None:
    words = TARGETS[case]
    plain = _argv(tmp_path, *words, "RUN_ARGS=--duration 5")
    assert not {"--otel-url", "--metrics-port", "--metrics-host"} & set(plain)
    canary = tmp_path / "ran"
    values = {v: _hostile(canary, v) for v in LIVE_VARS}
    got = _argv(tmp_path, *words, "RUN_ARGS=--duration 5", *(f"{k}={v}" for k, v in values.items()))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["argv.jsonl", "bin", "stamp"]
    flags = ["--otel-url", values["OTEL_URL"], "--metrics-port", values["METRICS_PORT"],
             "--metrics-host", values["METRICS_HOST"]]  # fmt: skip
    cut = got.index("--")
    if case == "bench-local":  # bench run's own options, first after --
        assert got[cut + 1 : cut + 1 + len(flags)] == flags, got
        assert got[: cut + 1] + got[cut + 1 + len(flags) :] == plain
    else:  # the orchestrator's options, last before --
        assert got[cut - len(flags) : cut] == flags, got
        assert got[: cut - len(flags)] + got[cut:] == plain


def test_the_help_names_the_live_variables_on_bench() -> None:
    got = subprocess.run(["make", "--no-print-directory", "-C", str(ROOT), "help"],
                         capture_output=True, text=True, timeout=60, check=True)  # fmt: skip
    lines = {line.split()[1]: line for line in got.stdout.splitlines()}
    assert "OTEL_URL=" in lines["bench"] and "METRICS_PORT=" in lines["bench"]
