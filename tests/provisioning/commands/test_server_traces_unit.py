"""`provision bench [--server-traces | --no-server-traces]` (what `make bench HOST=...
TRACES=1|0` runs) and a launch profile's `server_traces`: the server's argv and environment
as the engine is asked for them, `bench run`'s argv in the container, the recipe, the Slurm
job's copy; and every bad combination refused in one line, exit 2, before any host is
touched. Hosts, engines and threads are stand-ins; nothing connects."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.errors import Exit
from bench.launch_profile import LAUNCH_PROFILE_DIR, LaunchProfile, load_launch_profile
from bench.settings import Settings
from provisioning import cli
from provisioning.commands import bench
from provisioning.commands.slurm import slurm_choice
from provisioning.flow.options import Options
from provisioning.flow.recipe import recipe_for
from provisioning.flow.server_traces import ServerTraces
from provisioning.preflight.requirements import load_requirements
from provisioning.runs.targets import HostTarget, TargetChoice
from provisioning.slurm import node
from provisioning.slurm.node import NodeJob
from tests.provisioning.commands.test_live_options_unit import (
    _argv,
    _bench,
    _server_spec,
    _untouchable,
    stand_in_runs,
)
from tests.provisioning.flow.flow_fakes import HOST
from tests.support.runs import small_results

ENDPOINT = "http://127.0.0.1:4318/v1/traces"
PROTOCOL = {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}


def _opts(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, profile: LaunchProfile, *more: str
) -> Options:
    """The Options `provision bench gpu01 MORE` gives the one host run of PROFILE."""

    def target(choice: TargetChoice, name: str) -> HostTarget:
        req = load_requirements(profile.name, profile.gpus, image_ref="bench:test")
        return HostTarget(HOST, profile, req, "bench:test")

    seen = stand_in_runs(monkeypatch, target)
    assert cli.main(_bench(tmp_path, *more)) == 0
    (opts,) = seen
    return opts


@pytest.mark.parametrize(
    ("name", "more", "on"),
    [
        ("twin", (), False),
        ("cpu-vllm", (), True),
        ("published", (), False),
        ("smoke", (), False),
        ("published", ("--server-traces",), True),
        ("twin", ("--server-traces",), True),
        ("cpu-vllm", ("--no-server-traces",), False),
    ],
)
def test_the_server_traces_when_the_profile_or_the_option_says_so(
    name: str, more: tuple[str, ...], on: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile = load_launch_profile(name)
    opts = _opts(monkeypatch, tmp_path, profile, *more)
    assert opts.traces == (ServerTraces(4318) if on else None)
    engine, said = _server_spec(opts)
    (spec,) = engine.started
    run = _argv(opts)
    assert (f"tracing on: the server sends its spans to the run's receiver in the container "
            f"({ENDPOINT})" in said) is on  # fmt: skip
    if on:  # after the profile's own words; the protocol through the engine's API
        assert spec.command == (*profile.argv, "--otlp-traces-endpoint", ENDPOINT)
        assert PROTOCOL.items() <= spec.environment.items()
        assert run[-2:] == ("--otlp-traces-port", "4318")
    else:  # the profile's launch token for token (published: the card's)
        assert spec.command == profile.argv
        assert "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL" not in spec.environment
        assert "--otlp-traces-port" not in run
    # The spans stay in the container: nothing more is published.
    assert spec.publish == {profile.port: None} and spec.publish_on == {}


def test_the_profile_chooses_the_port(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profile = load_launch_profile("cpu-vllm").model_copy(update={"traces_port": 4400})
    opts = _opts(monkeypatch, tmp_path, profile, "--metrics-port", "4318")
    (spec,) = _server_spec(opts)[0].started
    assert spec.command[-2:] == ("--otlp-traces-endpoint", "http://127.0.0.1:4400/v1/traces")
    assert _argv(opts)[-4:] == ("--metrics-port", "4318", "--otlp-traces-port", "4400")


@pytest.mark.parametrize(
    ("more", "said"),
    [
        (["--", "--otlp-traces-port", "4318"], "--otlp-traces-port after -- (RUN_ARGS)"),
        (["--", "--otlp-traces-port=9"], "--otlp-traces-port after -- (RUN_ARGS)"),
        (["--no-server-traces", "--", "--otlp-traces-port", "9"], "--otlp-traces-port after --"),
        (
            ["--server-traces", "--metrics-port", "4318"],
            "--metrics-port 4318 is the port the run receives",
        ),
        (["--slurm", "gpu", "--", "--otlp-traces-port", "9"], "--otlp-traces-port after --"),
        (
            ["--slurm", "gpu", "--server-traces", "--metrics-port", "4318"],
            "--metrics-port 4318 is the port",
        ),
    ],
)
def test_a_bad_combination_exits_2_with_one_line_and_touches_no_host(
    more: list[str],
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    profile = load_launch_profile("twin")
    req = load_requirements(profile.name, profile.gpus, image_ref="bench:test")
    monkeypatch.setattr(bench, "resolve_target", lambda *a: HostTarget(HOST, profile, req, "b"))
    for name in ("preflight_host", "Remote", "run_all"):
        monkeypatch.setattr(bench, name, _untouchable)
    words = _bench(tmp_path, *more)
    if "--slurm" in more:
        words[1:2] = ["--profile", "twin"]  # no host: the fleet's profile
    assert cli.main(words) == int(Exit.USAGE)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("provision: error: ") and said in err[0], err


def test_tracing_off_frees_the_port_for_the_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    traced = load_launch_profile("cpu-vllm")
    opts = _opts(monkeypatch, tmp_path, traced, "--metrics-port", "4318", "--no-server-traces")
    assert opts.traces is None and opts.live is not None and opts.live.metrics_port == 4318


def test_the_recipe_records_the_launch_as_started_and_the_option_that_made_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def made(name: str, *more: str) -> tuple[tuple[str, ...], str]:
        opts = _opts(monkeypatch, tmp_path, load_launch_profile(name), *more)
        r = recipe_for(small_results(), opts, host="gpu01", image_id=None, weights=None)
        assert r.server.kind == "image"
        return r.server.launch_argv, r.commands[-1]

    published = load_launch_profile("published").argv
    assert made("published") == (published, made("published")[1])
    assert "server-traces" not in made("published")[1]
    argv, command = made("published", "--server-traces")
    assert argv == (*published, "--otlp-traces-endpoint", ENDPOINT)
    assert " --server-traces -- " in command
    argv, command = made("cpu-vllm")  # the profile's own choice: no option repeats it
    assert argv[-2:] == ("--otlp-traces-endpoint", ENDPOINT) and "server-traces" not in command
    argv, command = made("cpu-vllm", "--no-server-traces")
    assert argv == load_launch_profile("cpu-vllm").argv and " --no-server-traces --" in command
    argv, command = made("twin", "--server-traces")
    assert argv[-2:] == ("--otlp-traces-endpoint", ENDPOINT)
    assert " --server-traces -- " in command


@pytest.mark.parametrize(("more", "wanted"), [((), None), (("--server-traces",), True),
                                              (("--no-server-traces",), False)])  # fmt: skip
def test_a_slurm_job_carries_the_choice_to_every_node(
    more: tuple[str, ...], wanted: bool | None, tmp_path: Path
) -> None:
    args = cli.build_parser().parse_args(["bench", "--slurm", "gpu", *more])
    args.bench_args = ()
    assert slurm_choice(args, Settings()).server_traces is wanted
    # The twin as shipped (tracing off), and as a profile file that turns it on.
    traced = tmp_path / "profiles" / "twin.toml"
    traced.parent.mkdir()
    text = (LAUNCH_PROFILE_DIR / "twin.toml").read_text()
    assert "server_traces = false" in text
    traced.write_text(text.replace("server_traces = false", "server_traces = true"))
    for profile in ("twin", str(traced)):
        job = NodeJob(run_id="r1", profile=profile, image="bench:test", server_traces=wanted)
        assert NodeJob.model_validate_json(job.model_dump_json()) == job
        on = load_launch_profile(profile).server_traces if wanted is None else wanted
        run = node._node_run(job, HOST, tmp_path, Settings())
        assert run.opts.traces == (ServerTraces(4318) if on else None)
