"""`bench verify` checks that a bundle says where its figures come from (issue 16): the recipe,
bench's commit (and so whether its tree was dirty), the image, the server's package freeze
and the weights. A bundle that is signed and intact but lacks any of them is exit 5, in one
line naming each missing piece; --integrity-only checks the signature, hashes and schema."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from bench import cli
from bench.bundle import recipe as recipe_mod
from bench.bundle import seal
from bench.bundle.recipe import RECIPE_NAME, ImageServer, Recipe
from bench.errors import Exit
from tests.bundle.conftest import Keys
from tests.support.runs import SMALL_ENVIRONMENT, small_results, write_run_dir

pytestmark = pytest.mark.subprocess


def _verify(root: Path, keys: Keys, *extra: str) -> list[str]:
    return ["verify", str(root), "--allowed-signers", str(keys.allowed), *extra]


def _sealed(root: Path, keys: Keys) -> Path:
    seal.seal(root, keys.private, now=datetime.now(UTC))
    return root


def test_a_complete_bundle_verifies_and_shows_its_provenance(
    tmp_path: Path, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    root = _sealed(write_run_dir(tmp_path / "run"), keys)
    recipe = Recipe.model_validate_json((root / RECIPE_NAME).read_text())
    assert recipe.bench.commit == "81a476982" and not recipe.bench.dirty
    assert recipe.server.kind == "external"
    assert cli.main(_verify(root, keys)) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("provenance: "))
    assert "bench 0.2.0.dev3+g81a476982 (commit 81a476982, clean tree)" in line
    assert "recipe: recipe.json (external server)" in line
    assert f"image: sha256:{'1' * 64}" in line
    assert "server packages: 2 recorded" in line
    assert "weights: Qwen/Qwen3.5-397B-A17B-GPTQ-Int4 at 0123456789abcdef" in line
    assert ", pinned" in line


def _image_recipe(root: Path) -> None:
    server = ImageServer(
        image_id=None, image_ref="bench-vllm:x", launch_profile="published", launch_argv=("vllm",)
    )
    made = recipe_mod.for_image(
        small_results(),
        server=server,
        host_requirements={"gpus": "4"},
        build_command=None,
        orchestrate=["python", "-m", "provisioning", "bench", "gpu01"],
    )
    recipe_mod.write(root, made)


def _without(key: str) -> Callable[[dict[str, Any]], None]:
    def edit(env: dict[str, Any]) -> None:
        env.pop(key)

    return edit


def _no_freeze(env: dict[str, Any]) -> None:
    env["image"] = {**env["image"], "selftest": {}}


def _no_image_id(env: dict[str, Any]) -> None:
    env["image"] = {**env["image"], "digest": None}
    env["recipe"] = "image"  # (read by the test: the orchestrator's recipe names an image)


def _weights_without_hashes(env: dict[str, Any]) -> None:
    env["weights"] = {**env["weights"], "files": {}}


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (_without("weights"), "environment.json: no weights record"),
        (_without("image"), "environment.json: no image record"),
        (_no_freeze, "environment.json: no package freeze of the server"),
        (_no_image_id, "the server ran in an image but no image id"),
        (_weights_without_hashes, "without a revision and file hashes"),
    ],
    ids=["no-weights", "no-image", "no-freeze", "no-image-id", "no-file-hashes"],
)
def test_a_missing_provenance_field_fails_in_one_line(
    tmp_path: Path,
    keys: Keys,
    capsys: pytest.CaptureFixture[str],
    edit: Callable[[dict[str, Any]], None],
    words: str,
) -> None:
    root = write_run_dir(tmp_path / "run")
    env = json.loads(json.dumps(SMALL_ENVIRONMENT))
    edit(env)
    if env.pop("recipe", None) == "image":
        _image_recipe(root)
    (root / "environment.json").write_text(json.dumps(env))
    _sealed(root, keys)
    assert cli.main(_verify(root, keys)) == Exit.VERIFY_FAILED
    err = capsys.readouterr().err
    assert err.startswith("bench: error: provenance incomplete: ")
    assert words in err and err.count("\n") == 1 and "Traceback" not in err
    assert cli.main(_verify(root, keys, "--integrity-only")) == 0


def test_no_commit_and_a_malformed_recipe_are_both_named(
    tmp_path: Path, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_run_dir(tmp_path / "run")
    old = small_results().model_copy(update={"bench_version": "0.1.0"})
    (root / "results.json").write_text(old.model_dump_json())
    (root / RECIPE_NAME).write_text(json.dumps({"schema_version": 1}))
    _sealed(root, keys)  # a recipe that is there is kept as it is
    assert cli.main(_verify(root, keys)) == Exit.VERIFY_FAILED
    err = capsys.readouterr().err
    assert "results.json: bench version 0.1.0 names no commit" in err
    assert "recipe.json: malformed at run_id" in err
    assert err.count("\n") == 1


def test_a_twin_bundle_states_no_image_and_no_weights_and_verifies(
    tmp_path: Path, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_run_dir(tmp_path / "run")
    twin = small_results()
    server = twin.server.model_copy(
        update={"version_payload": {"twin": {"profile": "published", "speed": 5.0, "seed": 0}}}
    )
    (root / "results.json").write_text(twin.model_copy(update={"server": server}).model_dump_json())
    env = {
        "image": {"in_container": False, "digest": None, "labels": {}},
        "bench": {"version": "x", "settings": {}, "packages": {"httpx": "0.28.1"}},
        "weights": {"note": "not applicable: the twin loads no weights"},
    }
    (root / "environment.json").write_text(json.dumps(env))
    _sealed(root, keys)
    recipe = Recipe.model_validate_json((root / RECIPE_NAME).read_text())
    assert recipe.server.kind == "twin"
    assert recipe.commands[-1].startswith(".venv/bin/bench local --profile published --speed 5 --")
    assert cli.main(_verify(root, keys)) == 0
    out = capsys.readouterr().out
    assert "image: none (not run in a container)" in out
    assert "weights: not applicable (twin)" in out


def test_the_published_schema_describes_recipe_json_and_the_provenance(tmp_path: Path) -> None:
    """docs/results.schema.json carries recipe.json's schema (#/$defs/Recipe) and says what
    environment.json must record: a stock JSON Schema tool checks a bundle's recipe."""
    published = json.loads((Path(__file__).parents[2] / "docs" / "results.schema.json").read_text())
    assert "recipe.json" in published["description"]
    assert "weights" in published["description"] and "package freeze" in published["description"]
    assert "dirty" in published["properties"]["bench_version"]["description"]
    validator = jsonschema.Draft202012Validator(
        {"$ref": "#/$defs/Recipe", "$defs": published["$defs"]}
    )
    root = write_run_dir(tmp_path / "run")
    seal.write_default_recipe(root)
    recipe = json.loads((root / RECIPE_NAME).read_text())
    assert list(validator.iter_errors(recipe)) == []
    _image_recipe(root)
    assert list(validator.iter_errors(json.loads((root / RECIPE_NAME).read_text()))) == []
    del recipe["commands"]
    assert [e.message for e in validator.iter_errors(recipe)] == [
        "'commands' is a required property"
    ]
