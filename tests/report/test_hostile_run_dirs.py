"""Run directories whose files are wrong-shaped or hostile, under `bench report` and
`bench export` (issue 29, H8, M1, M6): one line naming the file, never a traceback, never
a file written outside the output folder."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.cli import main
from bench.errors import Exit
from tests.support.procs import assert_one_line_error
from tests.support.runs import write_run_dir


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    return assert_one_line_error(capsys.readouterr().err)


@pytest.mark.parametrize(
    "env",
    [
        {"gpu": [1]},
        {"host": "h"},
        {"gpu": {"gpus": [{"name": 5}, {"name": "a"}, 7]}},
        {"launch": {"argv": [1, 2]}},
        [1, 2],
        "text",
    ],
)
def test_a_wrong_shaped_environment_reads_as_not_recorded(tmp_path: Path, env: object) -> None:
    """H8: `{"gpu": [1]}` or `{"host": "h"}` was an AttributeError traceback."""
    root = write_run_dir(tmp_path / "run")
    (root / "environment.json").write_text(json.dumps(env))
    assert main(["report", str(root)]) == Exit.OK
    assert (root / "report.html").is_file()


def test_a_bad_telemetry_line_is_one_line_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_run_dir(tmp_path / "run")
    (root / "gpu_telemetry.jsonl").write_text('{"x": 1}\n')
    assert main(["report", str(root)]) == Exit.USAGE
    assert "gpu_telemetry.jsonl line 1: not a telemetry window" in _one_line(capsys)


@pytest.mark.parametrize(
    ("path", "value", "words"),
    [
        (("server", "speed_factor"), 1e-308, "server.speed_factor"),  # H8: inf in the export
        (("run_id",), "../escaped-by-run-id", "run_id"),  # M1: a file outside the folder
        (("run_id",), "ABSOLUTE", "run_id"),  # an absolute path, beside this test's folder
    ],
)
def test_a_results_json_bench_would_never_write_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
    path: tuple[str, ...], value: object, words: str,
) -> None:  # fmt: skip
    outside = tmp_path.parent / f"abs-by-run-id-{tmp_path.name}"
    if value == "ABSOLUTE":
        value = str(outside)
    root = write_run_dir(tmp_path / "run")
    doc = json.loads((root / "results.json").read_text())
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    (root / "results.json").write_text(json.dumps(doc))
    work = tmp_path / "work" / "here"
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    before = sorted(p for p in tmp_path.rglob("*"))
    for command in (["export", str(root), "--format", "csv"], ["report", str(root)]):
        assert main(command) != Exit.OK
        line = _one_line(capsys)
        assert "results.json" in line and words in line, line
    assert sorted(p for p in tmp_path.rglob("*")) == before
    assert not outside.with_suffix(".csv").exists()
    assert not Path(f"{outside}.csv").exists()


def test_a_json_other_than_results_json_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """M6: `bench export A/notes.json` exported A/results.json, silently."""
    root = write_run_dir(tmp_path / "run")
    (root / "notes.json").write_text("{}")
    assert main(["export", str(root / "notes.json"), "--out", str(tmp_path / "x.csv")]) == 2
    assert "notes.json: a .json other than results.json" in _one_line(capsys)
    assert not (tmp_path / "x.csv").exists()
