"""`bench provenance BUNDLE [--recipe]` (issue 16): the chain from the figures back to their
sources, and the commands that re-create the run; a bad bundle is one line and exit 5."""

from __future__ import annotations

import io
import json
import shlex
import tarfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bench import cli
from bench.bundle import manifest, seal, sign
from bench.bundle.pack import pack
from bench.bundle.recipe import RECIPE_NAME, run_args
from bench.errors import Exit
from bench.run.options import settings_from as _settings
from tests.bundle.conftest import Keys
from tests.support.runs import SMALL_ENVIRONMENT, small_results, write_run_dir

pytestmark = pytest.mark.subprocess


@pytest.fixture
def bundle(tmp_path: Path, keys: Keys) -> Path:
    root = write_run_dir(tmp_path / "run")
    seal.seal(root, keys.private, now=datetime.now(UTC))
    return pack(root, tmp_path / "run.tar.gz")


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["provenance", *argv])
    got = capsys.readouterr()
    return code, got.out, got.err


def test_the_chain_names_every_source(
    bundle: Path, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, str(bundle), "--allowed-signers", str(keys.allowed))
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == f"Provenance of run run-20261202T1130Z-abc ({bundle})"

    def field(name: str) -> str:
        return next(x for x in lines if x.startswith(name + " "))

    assert "verified, signed by alice@example.org (SHA256:" in field("signature")
    listed = json.loads(_member(bundle, "manifest.json"))["files"]
    sha = {f["path"]: f["sha256"] for f in listed}
    assert field("figures").endswith(f"sha256 {sha['results.json']}")
    assert field("made by").endswith("(commit 81a476982, clean tree)")
    image = SMALL_ENVIRONMENT["image"]
    assert isinstance(image, dict)
    assert f"image        {image['digest']}; labels: bench.version=" in out
    assert "bench.vllm.commit=73a5831127a9" in field("image")
    assert field("packages").startswith("packages     2 packages (from the image's self-test")
    assert field("weights").endswith("at 0123456789abcdef0123456789abcdef01234567, pinned")
    assert f"               {'3' * 64}  model-00001-of-00002.safetensors" in lines
    assert field("run").startswith("run          bench run --api chat --contexts 8K ")
    assert f"sha256 {sha[RECIPE_NAME]}" in field("recipe")


def _member(archive: Path, name: str) -> bytes:
    with tarfile.open(archive) as tar:
        member = next(m for m in tar.getmembers() if m.name.endswith("/" + name))
        handle = tar.extractfile(member)
        assert handle is not None
        return handle.read()


def test_the_recipe_repeats_the_runs_exact_settings(
    bundle: Path, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = _run(capsys, str(bundle), "--recipe", "--allowed-signers", str(keys.allowed))
    assert code == 0
    commands = [x for x in out.splitlines() if not x.startswith("#")]
    assert commands[0] == "git checkout 81a476982  # in a clone of this repository"
    assert commands[1] == "make setup"
    words = shlex.split(commands[-1])
    assert words[:2] == [".venv/bin/bench", "run"]
    # The recorded `bench run` arguments give back exactly the recorded settings.
    args = cli.build_parser().parse_args(words[1:])
    assert _settings(args) == small_results().settings


def test_a_bundle_without_a_recipe_says_so(
    tmp_path: Path, keys: Keys, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_run_dir(tmp_path / "run")
    seal.seal(root, keys.private, now=datetime.now(UTC))
    (root / RECIPE_NAME).unlink()  # as an older bench signed it: manifest without a recipe
    (root / manifest.ATTESTATION_NAME).unlink()  # and without an attestation
    made = manifest.build(root, run_id="run", created_at=datetime.now(UTC))
    sign.sign(manifest.write(root, made), keys.private)
    code, out, _ = _run(capsys, str(root), "--allowed-signers", str(keys.allowed))
    assert code == 0 and "recipe       recipe.json: missing" in out
    code, _, err = _run(capsys, str(root), "--recipe", "--allowed-signers", str(keys.allowed))
    assert code == Exit.VERIFY_FAILED
    assert err.startswith("bench: error: recipe.json: missing") and err.count("\n") == 1


def _traversal(bundle: Path, tmp: Path) -> Path:
    bad = tmp / "evil.tar.gz"
    with tarfile.open(bad, "w:gz") as tar:
        data = b"echo owned\n"
        info = tarfile.TarInfo("../evil.sh")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return bad


def _tampered(bundle: Path, tmp: Path) -> Path:
    root = tmp / "opened"
    with tarfile.open(bundle) as tar:
        tar.extractall(root, filter="data")
    inner = next(root.iterdir())
    env = json.loads((inner / "environment.json").read_text())
    env["weights"]["revision"] = "f" * 40  # a different snapshot, claimed after signing
    (inner / "environment.json").write_text(json.dumps(env))
    return inner


def _not_gzip(bundle: Path, tmp: Path) -> Path:
    bad = tmp / "plain.tar.gz"
    bad.write_bytes(b"not a gzip file at all")
    return bad


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (_traversal, "refused"),
        (_tampered, "environment.json"),
        (_not_gzip, "not a readable .tar.gz"),
    ],
    ids=["path-traversal", "tampered", "not-gzip"],
)
@pytest.mark.parametrize("recipe", [False, True], ids=["chain", "recipe"])
def test_a_bad_bundle_is_one_line_and_exit_5(
    bundle: Path,
    keys: Keys,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    make: Callable[[Path, Path], Path],
    words: str,
    recipe: bool,
) -> None:
    bad = make(bundle, tmp_path)
    flags = ["--recipe"] if recipe else []
    code, out, err = _run(capsys, str(bad), *flags, "--allowed-signers", str(keys.allowed))
    assert code == Exit.VERIFY_FAILED, err
    assert out == "" and err.startswith("bench: error: ") and err.count("\n") == 1
    assert words in err and "Traceback" not in err
    assert not (tmp_path.parent / "evil.sh").exists()


def test_no_such_bundle_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = _run(capsys, str(tmp_path / "nope.tar.gz"))
    assert code == Exit.USAGE and err.count("\n") == 1


def test_the_recipe_repeats_a_sequential_stages_cells() -> None:
    s = small_results().settings.model_copy(update={"cells": (("8K", 1),)})
    words = ["run", *run_args(s)]
    assert "--cells" in words
    assert _settings(cli.build_parser().parse_args(words)).cells == (("8K", 1),)
