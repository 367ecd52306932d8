"""What bench writes, bench can read back (issue 29, rule 5; S7): a figure no run can make
makes its cell invalid with the reason; results.json is checked against its own schema
before it is written; `bench sign` refuses what `bench verify` would refuse. And who writes
what: RunDir.save writes results.json and its marker, the sweep's `save` adds tables.md."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench.bundle import seal
from bench.errors import RunFailed, VerifyFailed
from bench.results import CellExtras, Distribution
from bench.run import card_tables, outcome, sweep
from bench.run.rundir import RunDir
from tests.support.runs import small_results, write_run_dir


def test_a_figure_that_is_not_finite_is_named_as_the_reason() -> None:
    figures = small_results().cells[0].figures
    assert figures is not None
    assert outcome.first_implausible(figures) is None
    huge = figures.model_copy(update={"average_active": float("inf")})
    assert outcome.first_implausible(huge) == (
        "implausible average_active inf: a figure lies between 0 and 1e+12"
    )
    nested = CellExtras(ttft=Distribution(n=1, mean=1e300, p50=1, p90=1, p99=1, min=1, max=1))
    assert outcome.first_implausible(nested) == (
        "implausible mean 1e+300: a figure lies between 0 and 1e+12"
    )


def test_results_that_would_not_read_back_are_never_written(tmp_path: Path) -> None:
    rundir = RunDir(tmp_path / "r")
    rundir.create()
    good = small_results()
    rundir.save(good)
    before = (rundir.path / "results.json").read_bytes()
    figures = good.cells[0].figures
    assert figures is not None
    bad_cell = good.cells[0].model_copy(
        update={"figures": figures.model_copy(update={"average_active": float("inf")})}
    )
    bad = good.model_copy(update={"cells": (bad_cell, *good.cells[1:])})
    with pytest.raises(RunFailed, match=r"results.json would not read back: cells.0.figures"):
        rundir.save(bad)
    assert (rundir.path / "results.json").read_bytes() == before
    assert sorted(p.name for p in rundir.path.iterdir() if p.name.startswith(".")) == []


def test_save_writes_results_and_the_marker_only_and_the_sweeps_save_adds_tables(
    tmp_path: Path,
) -> None:
    rundir = RunDir(tmp_path / "r")
    rundir.create()
    results = small_results().model_copy(update={"state": "running"})
    rundir.save(results)
    assert sorted(p.name for p in rundir.path.iterdir()) == ["INCOMPLETE", "results.json"]
    sweep.save(rundir, results)
    assert sorted(p.name for p in rundir.path.iterdir()) == [
        "INCOMPLETE",
        "results.json",
        "tables.md",
    ]
    tables = (rundir.path / "tables.md").read_text(encoding="utf-8")
    assert tables == card_tables.render(results) + "\n"
    assert "8K" in tables  # the cell of small_results, not an empty page


def test_sign_refuses_what_verify_would_refuse(tmp_path: Path) -> None:
    root = write_run_dir(tmp_path / "run")
    doc = json.loads((root / "results.json").read_text())
    doc["cells"][0]["figures"]["average_active"] = None  # what inf was written as
    (root / "results.json").write_text(json.dumps(doc))
    with pytest.raises(VerifyFailed, match=r"results.json: .*cells.0.figures.average_active"):
        seal.seal(root, tmp_path / "no-key", now=datetime.now(UTC))
    assert not (root / "manifest.json").exists()
