"""results.json and the run directory's JSON through their one reader (bench.run_files):
missing, too large, not JSON, hostile nesting, another schema: one BenchError line of the
class the caller asks for, naming the file, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import run_files
from bench.errors import BenchError, UsageError, VerifyFailed
from tests.support.runs import small_results


def _one_line(exc: BenchError) -> str:
    line = exc.one_line()
    assert "\n" not in line and "Traceback" not in line
    return line


def test_a_good_results_file_reads_back_equal(tmp_path: Path) -> None:
    results = small_results()
    (tmp_path / run_files.RESULTS).write_text(results.model_dump_json(indent=2))
    assert run_files.load_results(tmp_path) == results


def test_missing_results_is_one_line_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError) as got:
        run_files.load_results(tmp_path)
    assert _one_line(got.value).startswith(f"{tmp_path / run_files.RESULTS}: missing")


def test_oversize_results_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / run_files.RESULTS
    path.write_bytes(b" " * 1001 + b"{}")
    with pytest.raises(UsageError) as got:
        run_files.read_json(path, max_bytes=1000)
    assert "larger than 1,000 bytes" in _one_line(got.value)
    with open(path, "r+b") as f:  # past the real bound: a sparse file, never read whole
        f.truncate(run_files.JSON_MAX_BYTES + 10)
    with pytest.raises(UsageError, match="larger than"):
        run_files.load_results(tmp_path)


@pytest.mark.parametrize(
    "raw",
    [b'{"schema_version": 1, "cells": [', b"\xff\xfe not utf-8", b"[" * 100_000 + b"]" * 100_000],
    ids=["torn", "not-utf8", "deep-nesting"],
)
def test_results_that_are_not_json_are_one_line(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / run_files.RESULTS).write_bytes(raw)
    with pytest.raises(UsageError) as got:
        run_files.load_results(tmp_path)
    assert f"{run_files.RESULTS}: not valid JSON" in _one_line(got.value)


def test_another_schema_version_or_a_wrong_field_is_named(tmp_path: Path) -> None:
    doc = json.loads(small_results().model_dump_json())
    (tmp_path / run_files.RESULTS).write_text(json.dumps({**doc, "schema_version": 99}))
    with pytest.raises(VerifyFailed) as got:
        run_files.load_results(tmp_path, shown=run_files.RESULTS, error=VerifyFailed)
    assert _one_line(got.value).startswith(
        "results.json: schema version 99, this bench reads 1, 2, 3"
    )
    doc["cells"][0]["concurrency"] = "many"
    (tmp_path / run_files.RESULTS).write_text(json.dumps(doc))
    with pytest.raises(VerifyFailed) as got:
        run_files.load_results(tmp_path, shown=run_files.RESULTS, error=VerifyFailed)
    assert _one_line(got.value).startswith(
        "results.json: does not match the results schema at cells.0.concurrency: "
    )


def test_an_array_or_a_file_without_its_version_is_no_results_file(tmp_path: Path) -> None:
    (tmp_path / run_files.RESULTS).write_text("[1, 2]")
    with pytest.raises(UsageError, match="results schema at document: not a JSON object"):
        run_files.load_results(tmp_path)
    doc = json.loads(small_results().model_dump_json())
    del doc["schema_version"]  # the model would default it: refused all the same
    (tmp_path / run_files.RESULTS).write_text(json.dumps(doc))
    with pytest.raises(UsageError, match="results schema at schema_version: missing"):
        run_files.load_results(tmp_path)
