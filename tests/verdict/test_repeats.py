"""An input given twice is one input (issue 29, S3/S4): compare and fleet refuse the same
run (its run id, its manifest, its records) under two paths, on one side or across sides,
in one line with exit 2, where they used to count it twice and forge a verdict."""

from __future__ import annotations

import pathlib
import shutil

import pytest

from bench.card.model import Card
from bench.cli import main
from bench.errors import Exit
from tests.support.procs import assert_one_line_error
from tests.support.synth import make_results
from tests.verdict.test_vllm_saved import _save, vllm_record


def _run(tmp: pathlib.Path, name: str, card: Card, seed: int) -> pathlib.Path:
    root = tmp / name
    root.mkdir()
    results = make_results(card, speed=10.0, noise=0.02, seed=seed)
    (root / "results.json").write_text(results.model_dump_json())
    return root


def _error(capsys: pytest.CaptureFixture[str]) -> str:
    return assert_one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize(
    "shape",
    [
        ["compare", "A", "A", "--vs", "B", "B"],  # S3: zero noise, every cell "changed"
        ["compare", "A", "Acopy", "--vs", "B", "C"],  # a copy on one side
        ["compare", "A", "--vs", "Acopy"],  # across sides
        ["compare", "A", "Acopy"],
        ["fleet", "A", "Acopy", "B"],  # S4: B "stands out" of a median of two copies
        ["fleet", "A", "A", "B"],
    ],
)
def test_the_same_run_given_twice_is_refused_in_one_line(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], shape: list[str]
) -> None:
    paths = {n: _run(tmp_path, n, card, seed) for seed, n in enumerate("ABC")}
    paths["Acopy"] = pathlib.Path(shutil.copytree(paths["A"], tmp_path / "Acopy"))
    argv = [str(paths[w]) if w in paths else w for w in shape]
    assert main(argv) == Exit.USAGE
    line = _error(capsys)
    assert "are the same run (run id run-test-" in line and "an input given twice" in line


def test_distinct_runs_are_still_compared_and_fleeted(
    card: Card, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b, c, d = (_run(tmp_path, n, card, seed) for seed, n in enumerate("ABCD"))
    assert main(["compare", str(a), str(b), "--vs", str(c), str(d)]) != Exit.USAGE
    assert main(["fleet", str(a), str(b), str(c)]) != Exit.USAGE
    assert "same run" not in capsys.readouterr().err


def test_the_same_vllm_saved_records_twice_are_refused(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = _save(tmp_path / "one.json", [vllm_record(1, 8192, 100.0, 10.0)])
    two = tmp_path / "two.json"
    shutil.copy(one, two)
    assert main(["compare", str(one), str(two)]) == Exit.USAGE
    assert "are the same run (records sha256 " in _error(capsys)
