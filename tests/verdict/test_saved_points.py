"""What reading AIPerf's exports and GuideLLM's reports share (bench.verdict.saved_points,
bench.verdict.saved_files), each test run on both tools' fixtures (tests/data/aiperf/ and
tests/data/guidellm/: rate4/ and rate4-seed1/ two runs of a 4 requests/s point, conc4/ one of
4 streams; their READMEs have the commands)."""

from __future__ import annotations

import pathlib
import shutil
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, given, settings

from bench.cli import main
from bench.errors import UsageError
from bench.verdict import aiperf_saved, guidellm_saved
from bench.verdict.compare import Policy, compare
from tests.support import saved_runs

DATA = pathlib.Path(__file__).parent.parent / "data"
VLLM_SAVED = DATA / "publishers/vllm-dashboard/serving_llama8B_tp1_sharegpt_qps_4.json"
BENCH_RESULTS = DATA / "noise_corpus/vllm-cpu/runs/03"
# Files no reader takes: not UTF-8, cut short, not an object, nested 100,000 deep, 5,001 digits.
BAD_BYTES = (b"\xff\xfe", b"{", b"[1, 2]", b"[" * 100_000, b'{"n": 1' + b"0" * 5000 + b"}")


@dataclass(frozen=True)
class Tool:
    reader: saved_runs.Reader
    data: pathlib.Path  # its fixture folder
    file: str  # the name it gives a file
    other: str  # a JSON file of another kind beside its own
    none: str  # the error for a folder of none
    made: str  # how a run's provenance says it was made
    bad_bytes: tuple[str, ...]  # its error for each of BAD_BYTES


TOOLS = {
    "aiperf": Tool(
        aiperf_saved,
        DATA / "aiperf",
        "profile_export_aiperf.json",
        "inputs.json",
        "holds no AIPerf profile exports",
        "exported by AIPerf",
        ("not UTF-8", "not JSON", "not a JSON object", "not JSON", "not JSON"),
    ),
    "guidellm": Tool(
        guidellm_saved,
        DATA / "guidellm",
        "benchmarks.json",
        "other.json",
        "holds no GuideLLM benchmarks",
        "written by GuideLLM",
        ("not valid JSON",) * 2 + ("not a JSON object",) + ("not valid JSON",) * 2,
    ),
}


@pytest.fixture(params=list(TOOLS))
def tool(request: pytest.FixtureRequest) -> Tool:
    return TOOLS[request.param]


def test_the_fixture_folder_is_one_run_of_two_points(tool: Tool) -> None:
    assert tool.reader.recognises(tool.data)
    run = tool.reader.load(tool.data)
    assert set(run.cells) == {("workload", "4/s", 0), ("workload", "closed", 4)}
    assert run.contexts == ("4/s", "closed") and run.concurrencies == (0, 4)
    assert run.settings == {"model": "tiny", "api": "chat"}
    assert run.trust == "unsigned" and run.speed_factor == 1.0
    assert tool.made in run.provenance
    assert run.metadata["records"] == "3"


def test_recognises_no_other_files(tool: Tool) -> None:
    assert not tool.reader.recognises(VLLM_SAVED)  # vllm bench serve --save-result
    assert not tool.reader.recognises(BENCH_RESULTS)  # a bench run directory
    assert not tool.reader.recognises(BENCH_RESULTS / "results.json")
    assert not tool.reader.recognises(tool.data / "README.md")
    assert not tool.reader.recognises(tool.data / "nothing-here.json")


def test_the_same_run_twice_changes_nothing(tool: Tool) -> None:
    run = tool.reader.load(tool.data)
    c = compare(run, tool.reader.load(tool.data), Policy())
    assert {x.key for x in c.cells} == set(run.cells)
    assert not [x for x in c.cells if x.flagged]


def test_a_folder_passes_over_other_json(tool: Tool, tmp_path: pathlib.Path) -> None:
    shutil.copy(tool.data / "conc4" / tool.file, tmp_path / tool.file)
    (tmp_path / tool.other).write_text('{"data": []}', encoding="utf-8")
    assert list(tool.reader.load(tmp_path).cells) == [("workload", "closed", 4)]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / tool.other).write_text("{}", encoding="utf-8")
    assert not tool.reader.recognises(empty)
    with pytest.raises(UsageError, match=tool.none):
        tool.reader.load(empty)


@pytest.mark.parametrize("bad", range(len(BAD_BYTES)))
def test_bad_bytes_are_one_line_errors(tool: Tool, tmp_path: pathlib.Path, bad: int) -> None:
    path = tmp_path / tool.file
    path.write_bytes(BAD_BYTES[bad])
    assert tool.bad_bytes[bad] in saved_runs.one_line_error(tool.reader, path)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=saved_runs.HOSTILE_BYTES)
def test_hostile_bytes_are_figures_or_one_line_errors(
    tool: Tool, tmp_path: pathlib.Path, raw: bytes
) -> None:
    path = tmp_path / "b.json"
    path.write_bytes(raw)
    saved_runs.figures_or_one_line_error(tool.reader, path)


def test_bench_compare_reads_two_runs_as_a_user_gives_them(
    tool: Tool, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["compare", str(tool.data / "rate4"), str(tool.data / "rate4-seed1")])
    out = capsys.readouterr().out
    assert code == 9  # one run a side: raw Δ only, as for any two single runs
    assert "| 4/s |" in out and "CANNOT TELL NOISE FROM CHANGE (ONE TRIAL A SIDE)" in out
    assert tool.made in out
