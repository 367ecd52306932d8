"""results.json against its schema: the pydantic models of `bench.results` are the schema.

A JSON Schema generated from those models goes into every bundle (results.schema.json) so
that people without bench can validate results.json with any JSON Schema tool.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench import run_files, writes
from bench.bundle import recipe
from bench.errors import VerifyFailed
from bench.results import SCHEMA_VERSION, Results

RESULTS_NAME = run_files.RESULTS  # `bench manifest` (manifest.refresh) names it so
SCHEMA_NAME = "results.schema.json"


PROVENANCE = (
    "results.json of a bench bundle. The bundle also carries recipe.json, valid against "
    "#/$defs/Recipe (the commands that re-create the run), and environment.json, which "
    "`bench verify` requires to record: `image` (with `digest`, the image id, when the "
    "recipe's server is an image), the server's package freeze (`image.selftest.packages`, "
    "or for the twin `bench.packages`), and `weights` (`model`, `revision`, `pinned` and the "
    "sha256 of every file in `files`, or a `note` saying why no weights are loaded). Every "
    "file is listed with its sha256 in manifest.json, which the signature covers."
)


def json_schema() -> dict[str, Any]:
    schema = Results.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"urn:vllm-bench:results:v{SCHEMA_VERSION}"
    schema["description"] = PROVENANCE
    # recipe.json's schema beside results.json's, its definitions merged into $defs (the
    # names do not collide; the test of the published schema checks it).
    recipe_schema = recipe.json_schema()
    defs = schema.setdefault("$defs", {})
    extra = recipe_schema.pop("$defs", {})
    if not isinstance(extra, dict) or set(extra) & set(defs) or "Recipe" in defs:
        raise AssertionError("recipe.json's definitions collide with results.json's")
    defs.update(extra)
    defs["Recipe"] = recipe_schema
    return schema


def write_json_schema(root: Path) -> Path:
    path = root / SCHEMA_NAME
    writes.write_atomic(path, json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")
    return path


def validate_results(root: Path) -> Results:
    """Parse root/results.json with the models; a problem names the file and the field."""
    return run_files.load_results(root, shown=RESULTS_NAME, error=VerifyFailed)
