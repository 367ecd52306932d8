"""`provision bench --otel-url URL --metrics-port N [--metrics-host ADDR]` (what `make bench
HOST=... OTEL_URL=... METRICS_PORT=...` runs): the `bench run` argv in the container, the
server container's published ports, the collector's headers in the exec's environment (never
on a command line), the Slurm job's copy; and every bad value refused in one line, exit 2,
before any host is touched. Hosts, engines and threads are stand-ins; nothing connects."""

from __future__ import annotations

import dataclasses
import io
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from pydantic import SecretStr

from bench.errors import Exit
from bench.launch_profile import load_launch_profile
from bench.secrets import MASK
from bench.settings import Settings
from provisioning import cli
from provisioning.commands import bench
from provisioning.commands.slurm import slurm_choice
from provisioning.flow.live import LiveChoice
from provisioning.flow.options import HostOutcome, Options
from provisioning.flow.seams import ServerContainer, Steps
from provisioning.flow.server_start import ServerStarter
from provisioning.preflight.requirements import load_requirements
from provisioning.runs.targets import HostTarget, TargetChoice
from provisioning.slurm import node, submit
from provisioning.slurm.node import NodeJob
from provisioning.slurm.submit import without_secrets
from tests.provisioning.flow.flow_fakes import (
    HOST,
    FakeEngine,
    FakeShell,
    options,
    sweep_exec,
    workspace,
)

HEADERS = "authorization=Bearer%20sk-live-0123456789abcdef"
PLAIN = ("bench", "run", "--url", "http://127.0.0.1:8000", "--out", "/results/run")


def _target(choice: TargetChoice, name: str) -> HostTarget:
    profile = load_launch_profile("twin")
    req = load_requirements(profile.name, profile.gpus, image_ref="bench:test")
    return HostTarget(HOST, profile, req, "bench:test")


class _Touched(AssertionError):
    pass


def _untouchable(*args: object, **kwargs: object) -> object:
    raise _Touched("a host was touched")


def stand_in_runs(
    monkeypatch: pytest.MonkeyPatch, target: Callable[[TargetChoice, str], HostTarget]
) -> list[Options]:
    """The Options of every host run `provision bench` will start, each host TARGET gives;
    no host is touched, no thread started."""
    seen: list[Options] = []

    def run_all(workers: Sequence[object]) -> bool:
        seen.extend(w.host_run.opts for w in workers)  # type: ignore[attr-defined]
        return True

    monkeypatch.setattr(bench, "resolve_target", target)
    monkeypatch.setattr(bench, "preflight_host", lambda *a, **k: None)
    monkeypatch.setattr(bench, "run_all", run_all)
    monkeypatch.setattr(bench, "summarise", lambda *a, **k: 0)
    return seen


@pytest.fixture
def swept(monkeypatch: pytest.MonkeyPatch) -> list[Options]:
    """The Options of every host run `provision bench` would start; no host, no thread."""
    seen = stand_in_runs(monkeypatch, _target)
    for name in ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS"):
        monkeypatch.delenv(name, raising=False)
    return seen


@pytest.fixture
def nothing_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("resolve_target", "preflight_host", "Remote", "bench_slurm"):
        monkeypatch.setattr(bench, name, _untouchable)


def _bench(tmp_path: Path, *more: str) -> list[str]:
    return ["bench", "gpu01", "--results", str(tmp_path), *more]


def _argv(opts: Options) -> tuple[str, ...]:
    sweep, *_ = sweep_exec(FakeEngine(), FakeShell())
    return sweep.command(opts, ServerContainer("server-1", 49153), workspace())


def _server_spec(opts: Options) -> tuple[FakeEngine, str]:
    engine, out = FakeEngine(), io.StringIO()
    steps = Steps(HostOutcome(HOST.name, "r1"), out, time.monotonic)
    starter = ServerStarter(
        engine, FakeShell(), opts,
        scope="r1-gpu01", image="image:test", where=workspace(), steps=steps, out=out,
    )  # fmt: skip
    starter.start_server()
    return engine, out.getvalue()


def test_bench_run_gets_the_url_and_port_and_nothing_without_them(
    tmp_path: Path, swept: list[Options]
) -> None:
    assert cli.main(_bench(tmp_path, "--", "--duration", "5")) == 0
    assert swept[-1].live is None
    assert _argv(swept[-1]) == (*PLAIN, "--duration", "5")  # as before live metrics
    words = _bench(tmp_path, "--otel-url", "http://collector.lan:4318", "--metrics-port", "9464")
    assert cli.main([*words, "--", "--duration", "5", "--otel-interval", "10"]) == 0
    opts = swept[-1]
    assert opts.live == LiveChoice("http://collector.lan:4318", 9464, "0.0.0.0")
    live_args = ("--otel-url", "http://collector.lan:4318", "--metrics-port", "9464")
    assert _argv(opts) == (*PLAIN, "--duration", "5", "--otel-interval", "10", *live_args)
    assert cli.main(_bench(tmp_path, "--otel-url", "https://otel.example/v1/metrics")) == 0
    assert _argv(swept[-1])[-2:] == ("--otel-url", "https://otel.example/v1/metrics")
    assert "--metrics-port" not in _argv(swept[-1])


def test_the_metrics_port_is_published_on_the_hosts_network_and_the_servers_stays_local(
    tmp_path: Path,
) -> None:
    plain = options(tmp_path)
    engine, said = _server_spec(plain)
    (spec,) = engine.started
    assert spec.publish == {plain.profile.port: None} and spec.publish_on == {}
    assert "Prometheus" not in said
    for host in ("0.0.0.0", "10.1.2.3"):
        opts = dataclasses.replace(plain, live=LiveChoice(None, 9464, host))
        engine, said = _server_spec(opts)
        (spec,) = engine.started
        assert spec.publish == {plain.profile.port: None}  # the server: 127.0.0.1, any port
        assert spec.publish_on == {9464: (host, 9464)}
        assert f"gpu01:9464/metrics (published on {host})" in said
    opts = dataclasses.replace(plain, live=LiveChoice("http://c.lan:4318", None))
    (spec,) = _server_spec(opts)[0].started
    assert spec.publish_on == {}


def test_the_collectors_headers_go_to_bench_runs_environment_not_its_command_line(
    tmp_path: Path, swept: list[Options], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", HEADERS)
    assert cli.main(_bench(tmp_path, "--metrics-port", "9464")) == 0
    assert swept[-1].secrets.otlp_headers == ()  # no collector: nothing to send them to
    assert cli.main(_bench(tmp_path, "--otel-url", "http://collector.lan:4318")) == 0
    opts = swept[-1]
    assert opts.secrets.otlp_environment() == {"OTEL_EXPORTER_OTLP_HEADERS": HEADERS}
    assert opts.secrets.masks().mask(f"echo {HEADERS}") == f"echo {MASK}"
    engine = FakeEngine()
    sweep, *_ = sweep_exec(engine, FakeShell())
    server = ServerContainer("server-1", 49153)
    command = sweep.command(opts, server, workspace())
    sweep.run(command, server, workspace(), opts)
    (env,) = engine.exec_env
    assert env["OTEL_EXPORTER_OTLP_HEADERS"] == HEADERS
    assert not any(HEADERS in word or "sk-live" in word for word in engine.exec_commands[0])


@pytest.mark.parametrize(
    ("more", "said"),
    [
        (["--otel-url", "ftp://collector.lan:4318"], "is not an http(s):// URL"),
        (["--otel-url", "http://u:sk-123@collector.lan:4318"], "user:password@"),
        (["--otel-url", "http://collector.lan:4318/v1/metrics?key=sk-1"], "query string"),
        (["--otel-url", "http://127.0.0.1:4318"], "the container itself"),
        (["--otel-url", "http://localhost:4318"], "the container itself"),
        (["--otel-url", "http://[::1]:4318"], "the container itself"),
        (["--otel-url", "http://0.0.0.0:4318"], "the container itself"),
        (["--metrics-port", "0"], "--metrics-port 0 is not a TCP port (1 to 65535)"),
        (["--metrics-port", "65536"], "is not a TCP port"),
        (["--metrics-port", "9464", "--metrics-host", "gpu01"], "is not an IP address"),
        (["--metrics-host", "0.0.0.0"], "--metrics-host applies to --metrics-port"),
        (["--", "--metrics-port", "9464"], "--metrics-port after -- (RUN_ARGS)"),
        (["--", "--otel-url=http://c.lan:4318"], "--otel-url after -- (RUN_ARGS)"),
        (["--slurm", "gpu", "--otel-url", "http://localhost:4318"], "the container itself"),
    ],
)
def test_a_bad_value_exits_2_with_one_line_and_touches_no_host(
    more: list[str],
    said: str,
    tmp_path: Path,
    nothing_touched: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    words = _bench(tmp_path, *more)
    if "--slurm" in more:
        words.remove("gpu01")
    assert cli.main(words) == int(Exit.USAGE)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("provision: error: ") and said in err[0], err
    assert "sk-1" not in err[0]  # a refused credential is not repeated
    if "user:password@" in said or "query" in said:
        assert "OTEL_EXPORTER_OTLP_HEADERS" in err[0]


def test_the_metrics_port_cannot_be_the_servers_own(
    tmp_path: Path, swept: list[Options], capsys: pytest.CaptureFixture[str]
) -> None:
    port = load_launch_profile("twin").port
    assert cli.main(_bench(tmp_path, "--metrics-port", str(port))) == int(Exit.USAGE)
    assert f"--metrics-port {port} is the port of the server" in capsys.readouterr().err
    assert swept == []  # no host run started


def test_a_slurm_job_carries_the_choice_to_every_node_and_no_headers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    argv = ["bench", "--slurm", "gpu", "--otel-url", "http://collector.lan:4318"]
    args = cli.build_parser().parse_args([*argv, "--metrics-port", "9464"])
    args.bench_args = ()
    live = slurm_choice(args, Settings()).live
    assert live == LiveChoice("http://collector.lan:4318", 9464, "0.0.0.0")
    job = NodeJob(run_id="r1", profile="twin", image="bench:test", otel_url=live.otel_url,
                  metrics_port=live.metrics_port, metrics_host=live.metrics_host)  # fmt: skip
    assert NodeJob.model_validate_json(job.model_dump_json()).live() == live
    assert NodeJob(run_id="r1", profile="twin", image="bench:test").live() is None
    assert without_secrets({"OTEL_EXPORTER_OTLP_HEADERS": HEADERS, "A": "1"}) == {"A": "1"}
    # The node passes on the headers its own environment sets (none came through Slurm).
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS", HEADERS)
    run = node._node_run(job, HOST, tmp_path, Settings())
    assert run.opts.live == live
    assert run.opts.secrets.otlp_headers == (
        ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", SecretStr(HEADERS)),
    )


def test_the_submitter_says_the_headers_set_here_stay_here(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_METRICS_HEADERS", raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", HEADERS)
    submit._say_headers_stay(LiveChoice(None, 9464))  # no collector: nothing to say
    assert capsys.readouterr().err == ""
    submit._say_headers_stay(LiveChoice("http://collector.lan:4318"))
    err = capsys.readouterr().err
    assert "OTEL_EXPORTER_OTLP_HEADERS not sent through Slurm" in err and HEADERS not in err
