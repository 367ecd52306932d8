"""The published JSON Schema of results.json (docs/results.schema.json) is the one in force.

It is generated from the models (`bench schema`); `bench verify` validates results.json
with those same models, and every signed bundle carries a copy (results.schema.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.bundle import schema
from bench.cli import main
from bench.results import SCHEMA_VERSION

PUBLISHED = Path(__file__).parents[2] / "docs" / "results.schema.json"


def test_the_committed_schema_is_what_bench_schema_prints(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["schema"]) == 0
    printed = capsys.readouterr().out
    assert json.loads(PUBLISHED.read_text()) == json.loads(printed), (
        "docs/results.schema.json is stale: run `bench schema > docs/results.schema.json`"
    )
    assert json.loads(printed)["$id"] == f"urn:vllm-bench:results:v{SCHEMA_VERSION}"


def test_a_bundle_carries_the_published_schema(tmp_path: Path) -> None:
    path = schema.write_json_schema(tmp_path)
    assert json.loads(path.read_text()) == json.loads(PUBLISHED.read_text())
