"""`--workload NAME|FILE` in the host flow (provisioning.flow.workload): what is checked here,
what is staged on the host, the `bench run` argv in the container, the server's mounts and
the clean-up; over the typed fakes of tests/provisioning/flow/flow_fakes.py."""

from __future__ import annotations

import dataclasses
import io
import json
import tomllib
from pathlib import Path

import pytest

from bench.errors import Exit, UsageError
from bench.workload_spec import Workload, available, load_workload
from provisioning.flow import workload as wl
from provisioning.flow.host_run import HostRun
from provisioning.flow.options import Options
from provisioning.flow.recipe import recipe_for
from provisioning.flow.seams import ServerContainer
from tests.provisioning.flow.flow_fakes import (
    HOST,
    RUN_DIR,
    FakeEngine,
    FakePlacement,
    FakeShell,
    finished_run,
    options,
    sweep_exec,
    workspace,
)
from tests.support.runs import small_results

INPUTS = f"{RUN_DIR}.inputs"
SMALL = """name = "small"
description = "3 rates, 40 requests: a \\"quick\\" one \\\\ ünïcode"
seed = 7

[arrivals]
kind = "rate"
rates = [1.0, 2.0, inf]
requests = 40

[lengths]
input_tokens = 256
output_tokens = 32
range_ratio = 0.5

[slo]
ttft_p99_s = 2.0
"""


def _file(tmp_path: Path, text: str = SMALL, name: str = "small.toml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _sharegpt(path: Path) -> Path:
    turns = [{"from": "human", "value": "tell me a story " * 8},
             {"from": "gpt", "value": "once upon a time " * 20}]  # fmt: skip
    path.write_text(json.dumps([{"id": str(i), "conversations": turns} for i in range(5)]))
    return path


def _argv(opts: Options) -> tuple[str, ...]:
    sweep, *_ = sweep_exec(FakeEngine(), FakeShell())
    return sweep.command(opts, ServerContainer("server-1", 49153), workspace())


def _with(tmp_path: Path, choice: wl.WorkloadChoice | None, **kw: object) -> Options:
    return dataclasses.replace(options(tmp_path), workload=choice, **kw)  # type: ignore[arg-type]


# -- what `bench run` gets --------------------------------------------------------------------


def test_without_a_workload_the_argv_is_what_it_was(tmp_path: Path) -> None:
    opts = _with(tmp_path, None, bench_args=("--duration", "5"))
    assert _argv(opts) == (
        "bench", "run", "--url", "http://127.0.0.1:8000", "--out", "/results/run",
        "--duration", "5",
    )  # fmt: skip
    assert wl.choose(None, None, None) is None


def test_a_preset_is_passed_by_name_with_its_overrides(tmp_path: Path) -> None:
    choice = wl.choose("smoke", "1,2,4", "ttft_p99<=2s,tpot_p99<=80ms")
    assert choice is not None and not choice.staged
    argv = _argv(_with(tmp_path, choice, bench_args=("--duration", "5")))
    assert argv == (
        "bench", "run", "--url", "http://127.0.0.1:8000", "--out", "/results/run",
        "--duration", "5", "--workload", "smoke", "--rates", "1,2,4",
        "--slo", "ttft_p99<=2s,tpot_p99<=80ms",
    )  # fmt: skip
    assert wl.choose("smoke", None, None) == wl.WorkloadChoice(ref="smoke")
    assert _argv(_with(tmp_path, wl.choose("smoke", None, None)))[-2:] == ("--workload", "smoke")


def test_a_file_is_passed_as_its_copy_in_the_container(tmp_path: Path) -> None:
    choice = wl.choose(str(_file(tmp_path)), "3,5", None)
    assert choice is not None and choice.staged and choice.data == ()
    argv = _argv(_with(tmp_path, choice))
    assert argv[-4:] == ("--workload", "/results/inputs/small.toml", "--rates", "3,5")
    assert argv.count("--workload") == 1
    # What the container reads is the workload this machine loaded, exactly.
    back = Workload.model_validate(tomllib.loads(choice.toml_text))
    assert back == load_workload(tmp_path / "small.toml")
    assert choice.command_args() == ("--workload", str(tmp_path / "small.toml"), "--rates", "3,5")


def test_an_odd_file_name_becomes_workload_toml(tmp_path: Path) -> None:
    choice = wl.choose(str(_file(tmp_path, name="my load;$(x).toml")), None, None)
    assert choice is not None and choice.toml_name == "workload.toml"


@pytest.mark.parametrize("name", available())
def test_every_shipped_preset_written_out_loads_back_the_same(name: str) -> None:
    loaded = load_workload(name)
    assert Workload.model_validate(tomllib.loads(wl.toml_text(loaded))) == loaded


# -- data files -------------------------------------------------------------------------------


@pytest.mark.parametrize("where", ["beside", "absolute"])
def test_a_dataset_named_by_path_is_copied_and_pinned(tmp_path: Path, where: str) -> None:
    folder = tmp_path if where == "beside" else tmp_path / "elsewhere"
    folder.mkdir(exist_ok=True)
    data = _sharegpt(folder / "conv.json")
    path = "conv.json" if where == "beside" else str(data)
    toml = f'name = "sg"\n[arrivals]\nrates = [2.0]\nrequests = 10\n[prompts]\nsource = "sharegpt"\npath = "{path}"\n'  # noqa: E501
    choice = wl.choose(str(_file(tmp_path, toml, "sg.toml")), None, None)
    assert choice is not None
    assert choice.data == (wl.StagedFile(data, f"data/{data.name}"),)
    back = Workload.model_validate(tomllib.loads(choice.toml_text))
    assert back.prompts.path == f"/results/inputs/data/{data.name}"
    assert back.prompts.sha256 == load_workload(tmp_path / "sg.toml").prompts.sha256 is not None


def test_a_trace_named_by_path_is_copied_too(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": i * 100, "input_length": 300, "output_length": 20}) + "\n"
        for i in range(5)
    ))  # fmt: skip
    toml = 'name = "tr"\n[arrivals]\nkind = "trace"\npath = "t.jsonl"\n'
    choice = wl.choose(str(_file(tmp_path, toml, "tr.toml")), None, None)
    assert choice is not None and choice.data == (wl.StagedFile(trace, "data/t.jsonl"),)
    back = Workload.model_validate(tomllib.loads(choice.toml_text))
    assert back.arrivals.path == "/results/inputs/data/t.jsonl" and back.arrivals.sha256


def test_a_shipped_data_file_is_the_images_and_not_pinned_unless_the_file_pins_it(
    tmp_path: Path,
) -> None:
    toml = 'name = "s"\n[arrivals]\nrates = [2.0]\n[prompts]\nsource = "sharegpt"\npath = "sharegpt-sample"\n'  # noqa: E501
    choice = wl.choose(str(_file(tmp_path, toml, "s.toml")), None, None)
    assert choice is not None and choice.data == ()
    back = Workload.model_validate(tomllib.loads(choice.toml_text))
    assert (back.prompts.path, back.prompts.sha256) == ("sharegpt-sample", None)
    pinned = load_workload("sharegpt-qps").prompts.sha256
    choice = wl.choose(str(_file(tmp_path, toml + f'sha256 = "{pinned}"\n', "p.toml")), None, None)
    assert choice is not None
    assert Workload.model_validate(tomllib.loads(choice.toml_text)).prompts.sha256 == pinned


# -- refused here -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ref", "rates", "slo", "said"),
    [
        ("no-such-preset", None, None, "unknown workload 'no-such-preset'"),
        ("missing/file.toml", None, None, "does not exist"),
        ("smoke", "0,1", None, "must be above 0"),
        ("inferencex-1k1k", "1,2", None, "--rates applies to rate arrivals"),
        ("smoke", None, "ttft_p99 is two", "slo"),
        (None, "1,2", None, "--rates and --slo apply to a workload"),
    ],
)
def test_a_bad_workload_is_one_usage_line(
    ref: str | None, rates: str | None, slo: str | None, said: str
) -> None:
    with pytest.raises(UsageError) as caught:
        wl.choose(ref, rates, slo)
    assert caught.value.exit_code == Exit.USAGE
    assert said in caught.value.one_line() and "\n" not in caught.value.one_line()


def test_an_unreadable_file_or_data_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is not valid TOML"):
        wl.choose(str(_file(tmp_path, "name = [", "bad.toml")), None, None)
    toml = 'name = "sg"\n[arrivals]\nrates = [2.0]\n[prompts]\nsource = "sharegpt"\npath = "gone.json"\n'  # noqa: E501
    with pytest.raises(UsageError, match="does not exist"):
        wl.choose(str(_file(tmp_path, toml, "sg.toml")), None, None)


# -- the flow ---------------------------------------------------------------------------------


def _run(
    tmp_path: Path, choice: wl.WorkloadChoice | None, *, keep: bool = False
) -> tuple[FakeEngine, FakeShell, HostRun]:
    engine, shell = FakeEngine(), FakeShell(files=finished_run())
    placement = FakePlacement(engine, tmp_path / "results" / "gpu01" / "r1")
    opts = dataclasses.replace(options(tmp_path, keep=keep), workload=choice)
    run = HostRun(HOST, opts, remote=shell, placement=placement,
                  out=io.StringIO(), clock=lambda: 0.0, sleep=lambda s: None)  # fmt: skip
    run.run()
    return engine, shell, run


def test_a_file_is_staged_mounted_read_only_passed_and_removed(tmp_path: Path) -> None:
    data = _sharegpt(tmp_path / "conv.json")
    toml = 'name = "sg"\n[arrivals]\nrates = [2.0]\nrequests = 10\n[prompts]\nsource = "sharegpt"\npath = "conv.json"\n'  # noqa: E501
    choice = wl.choose(str(_file(tmp_path, toml, "sg.toml")), None, None)
    engine, shell, run = _run(tmp_path, choice)
    assert list(run.outcome.timings_s)[:3] == ["docker", "host directories", "workload"]
    assert shell.files[f"{INPUTS}/sg.toml"] == choice.toml_text  # type: ignore[union-attr]
    assert shell.files[f"{INPUTS}/data/conv.json"] == data.read_text()
    server = engine.started[0]
    assert [(m.source, m.target, m.read_only) for m in server.mounts][-1] == (
        INPUTS, "/results/inputs", True,
    )  # fmt: skip
    assert engine.exec_commands[0][6:8] == ("--workload", "/results/inputs/sg.toml")
    assert shell.commands[-1] == f"rm -rf -- {INPUTS}"  # after the containers went


def test_a_kept_server_keeps_its_inputs(tmp_path: Path) -> None:
    choice = wl.choose(str(_file(tmp_path)), None, None)
    _, shell, _ = _run(tmp_path, choice, keep=True)
    assert not any(c.startswith("rm -rf") for c in shell.commands)


@pytest.mark.parametrize("choice", [None, wl.WorkloadChoice(ref="smoke")])
def test_a_preset_or_none_stages_nothing_and_mounts_what_it_did(
    tmp_path: Path, choice: wl.WorkloadChoice | None
) -> None:
    engine, shell, run = _run(tmp_path, choice)
    assert "workload" not in run.outcome.timings_s
    assert [m.target for m in engine.started[0].mounts] == ["/results/run", "/hf"]
    assert not any(".inputs" in c for c in shell.commands)
    assert ("--workload" in engine.exec_commands[0]) == (choice is not None)


def test_the_recipe_names_the_workload_as_given_here(tmp_path: Path) -> None:
    choice = wl.choose(str(_file(tmp_path)), "1,2", None)
    made = recipe_for(small_results(), _with(tmp_path, choice), host="gpu01",
                      image_id=None, weights=None)  # fmt: skip
    assert f"--workload {tmp_path / 'small.toml'} --rates 1,2" in made.commands[-1]
    plain = recipe_for(small_results(), _with(tmp_path, None), host="gpu01",
                       image_id=None, weights=None)  # fmt: skip
    assert "--workload" not in plain.commands[-1]
