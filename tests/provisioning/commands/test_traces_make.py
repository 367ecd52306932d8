"""`make bench HOST=...|SLURM=... TRACES=1|0`: --server-traces or --no-server-traces among
the orchestrator's options, nothing without TRACES; any other value, or TRACES without a
host (`bench local`), stops make with one line and runs nothing.

Real make on the real Makefile; `bench` and `python` in BIN are stand-ins
(tests/support/make_stand_ins.py), so nothing else runs."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.provisioning.commands.test_live_make import MAKE_VARS, _argv
from tests.support.make_stand_ins import ROOT
from tests.support.require import require

pytestmark = pytest.mark.subprocess


@pytest.fixture(autouse=True)
def _make_and_venv() -> None:
    require("make", paths=(ROOT / ".venv/bin/bench", ROOT / ".venv/bin/python"))


@pytest.mark.parametrize("where", [["HOST=gpu01"], ["SLURM=debug"]])
def test_traces_reach_the_orchestrator_as_its_option(where: list[str], tmp_path: Path) -> None:
    plain = _argv(tmp_path, *where, "RUN_ARGS=--duration 5")
    assert not {"--server-traces", "--no-server-traces"} & set(plain)
    for value, flag in (("1", "--server-traces"), ("0", "--no-server-traces")):
        got = _argv(tmp_path, *where, "RUN_ARGS=--duration 5", f"TRACES={value}")
        cut = got.index("--")
        assert got[cut - 1] == flag, got
        assert got[: cut - 1] + got[cut:] == plain


@pytest.mark.parametrize(
    ("words", "said"),
    [
        (["HOST=gpu01", "TRACES=yes"], "TRACES= is 1 or 0"),
        (["SLURM=debug", "TRACES=$(shell touch {tmp}/ran)`touch {tmp}/ran`"], "TRACES= is 1 or"),
        (["TRACES=1"], "TRACES= applies to HOST= or SLURM= runs"),
    ],
)
def test_a_bad_value_or_no_host_stops_make_before_anything_runs(
    words: list[str], said: str, tmp_path: Path
) -> None:
    stamp = tmp_path / "stamp"
    stamp.touch()  # newer than pyproject.toml: `setup` has nothing to do
    got = subprocess.run(
        ["make", "--no-print-directory", "-C", str(ROOT), "bench", f"BIN={tmp_path / 'none'}",
         f"STAMP={stamp}", *(w.format(tmp=tmp_path) for w in words)],
        capture_output=True, text=True, timeout=60, check=False, cwd=tmp_path,
        env={k: v for k, v in os.environ.items()
             if k not in ("MAKEFLAGS", "MFLAGS", "TRACES", *MAKE_VARS)},
    )  # fmt: skip
    assert got.returncode != 0 and said in got.stderr, got.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["stamp"]  # nothing ran
