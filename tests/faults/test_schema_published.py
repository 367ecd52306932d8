"""The published JSON Schema of results.json (docs/results.schema.json) is the one in force.

It is generated from the models (`bench schema`); `bench verify` validates results.json
with those same models, and every signed bundle carries a copy (results.schema.json).
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from bench.bundle import schema
from bench.cli import main
from bench.errors import VerifyFailed
from bench.results import SCHEMA_VERSION, Results
from tests.support.runs import card_results, small_results

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


def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(PUBLISHED.read_text()))


def test_real_results_validate_against_the_published_schema_with_a_stock_validator() -> None:
    """Anyone without bench can check results.json with any JSON Schema tool."""
    validator = _validator()
    for results in (small_results(), card_results(speed_factor=10.0)):
        errors = list(validator.iter_errors(json.loads(results.model_dump_json())))
        assert errors == []


@pytest.mark.parametrize(
    ("path", "value"),
    [(("cells", 0, "status"), "great"), (("schema_version",), "one"), (("run_id",), None)],
)
def test_schema_and_bench_verify_refuse_the_same_broken_results(
    path: tuple[str | int, ...], value: object, tmp_path: Path
) -> None:
    doc = json.loads(small_results().model_dump_json())
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert list(_validator().iter_errors(doc)), "the published schema accepted it"
    (tmp_path / "results.json").write_text(json.dumps(doc))
    with pytest.raises(VerifyFailed, match=r"^results.json: "):
        schema.validate_results(tmp_path)


def test_the_new_optional_fields_validate_and_results_without_them_still_do() -> None:
    """Additive only: the launch's prefix-cache hit rate and the start-up log as a KV source
    validate; results written before them (no such key) still validate, unchanged."""
    validator = _validator()
    doc = json.loads(small_results().model_dump_json())
    cell = doc["cells"][0]
    cell["extras"] = {"launch_prefix_cache_hit_rate": 0.97}
    doc["plan"]["kv"]["source"] = "startup_log"
    doc["measurement"]["kv_source"] = "startup_log"
    assert list(validator.iter_errors(doc)) == []
    cell["extras"]["launch_prefix_cache_hit_rate"] = "high"
    assert list(validator.iter_errors(doc))
    old = json.loads(small_results().model_dump_json())
    old["cells"][0]["extras"] = {"prefix_cache_hit_rate": 0.5}  # as an older bench wrote it
    assert list(validator.iter_errors(old)) == []
    Results.model_validate(old)
