"""`provision bench` and `compare-commits` with --workload, --rates, --slo (what `make bench
WORKLOAD=...` and `make compare-commits ... WORKLOAD=...` run): the `bench run` argv every
sweep gets in the container, and a bad workload refused here, exit 2, before any host is
touched. Hosts, engines and threads are stand-ins; nothing connects."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from bench.errors import Exit
from bench.launch_profile import load_launch_profile
from provisioning import cli
from provisioning.commands import bench, compare
from provisioning.flow.options import Options
from provisioning.flow.seams import ServerContainer
from provisioning.image import ensure
from provisioning.preflight.requirements import load_requirements
from provisioning.runs.targets import HostTarget, TargetChoice
from tests.provisioning.flow.flow_fakes import HOST, FakeEngine, FakeShell, sweep_exec, workspace

SMALL = """name = "small"
[arrivals]
rates = [1.0, 2.0, 4.0]
requests = 40
[lengths]
input_tokens = 256
output_tokens = 32
"""


def _target(choice: TargetChoice, name: str) -> HostTarget:
    # Without the twin profile's tracing: its `bench run` flags are test_server_traces_unit's.
    profile = load_launch_profile("twin").model_copy(update={"server_traces": False})
    req = load_requirements(profile.name, profile.gpus, image_ref="bench:test")
    return HostTarget(HOST, profile, req, "bench:test")


class _Touched(AssertionError):
    pass


def _untouchable(*args: object, **kwargs: object) -> object:
    raise _Touched("a host was touched")


@pytest.fixture
def swept(monkeypatch: pytest.MonkeyPatch) -> list[Options]:
    """The Options of every sweep the command would run; no host, engine or thread."""
    seen: list[Options] = []

    def run_all(workers: Sequence[object]) -> bool:
        seen.extend(w.host_run.opts for w in workers)  # type: ignore[attr-defined]
        return True  # as if interrupted: the compare stops after its first sweep

    class NoEngine:
        def __init__(self, host: object) -> None:
            pass

        def __enter__(self) -> NoEngine:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

    for module in (bench, compare):
        monkeypatch.setattr(module, "resolve_target", _target)
        monkeypatch.setattr(module, "preflight_host", lambda *a, **k: None)
        monkeypatch.setattr(module, "run_all", run_all)
        monkeypatch.setattr(module, "summarise", lambda *a, **k: 0)
    monkeypatch.setattr(compare, "DockerEngine", NoEngine)
    monkeypatch.setattr(ensure, "ensure_image", lambda *a, **k: "sha256:" + "2" * 64)
    return seen


@pytest.fixture
def nothing_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (bench, compare):
        monkeypatch.setattr(module, "resolve_target", _untouchable)
        monkeypatch.setattr(module, "preflight_host", _untouchable)
        monkeypatch.setattr(module, "Remote", _untouchable)
    monkeypatch.setattr(compare, "DockerEngine", _untouchable)
    monkeypatch.setattr(bench, "bench_slurm", _untouchable)


def _argv(opts: Options) -> tuple[str, ...]:
    sweep, *_ = sweep_exec(FakeEngine(), FakeShell())
    return sweep.command(opts, ServerContainer("server-1", 49153), workspace())


BENCH = ["bench", "gpu01", "--results", "{tmp}"]
COMMITS = ["compare-commits", "gpu01", "--commit-a", "abcdef1", "--commit-b", "abcdef2",
           "--results", "{tmp}"]  # fmt: skip
COMMANDS = {"bench": BENCH, "compare-commits": COMMITS}


def _words(command: str, tmp_path: Path, *more: str) -> list[str]:
    return [w.format(tmp=tmp_path) for w in COMMANDS[command]] + list(more)


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize("order", ["interleaved", "sequential"])
def test_bench_run_gets_the_workload_exactly_when_one_is_given(
    command: str, order: str, tmp_path: Path, swept: list[Options]
) -> None:
    extra = ["--order", order] if command == "compare-commits" else []
    tail = ["--", "--duration", "5"]
    assert cli.main(_words(command, tmp_path, *extra, *tail)) == 0
    plain = _argv(swept[-1])
    assert "--workload" not in plain and "--rates" not in plain and "--slo" not in plain
    assert plain == (
        "bench",
        "run",
        "--url",
        "http://127.0.0.1:8000",
        "--out",
        "/results/run",
        "--duration",
        "5",
    )  # fmt: skip  (what it was before workloads)
    words = _words(command, tmp_path, *extra, "--workload", "smoke", "--rates", "1,2",
                   "--slo", "ttft_p99<=2s", *tail)  # fmt: skip
    assert cli.main(words) == 0
    assert _argv(swept[-1]) == (*plain, "--workload", "smoke", "--rates", "1,2",
                                "--slo", "ttft_p99<=2s")  # fmt: skip


@pytest.mark.parametrize("command", list(COMMANDS))
def test_a_file_reaches_bench_run_as_its_path_in_the_container(
    command: str, tmp_path: Path, swept: list[Options]
) -> None:
    path = tmp_path / "small.toml"
    path.write_text(SMALL)
    assert cli.main(_words(command, tmp_path, "--workload", str(path))) == 0
    opts = swept[-1]
    assert _argv(opts)[-2:] == ("--workload", "/results/inputs/small.toml")
    assert opts.workload is not None and opts.workload.staged


def test_a_workload_run_is_judged_against_a_card_only_when_one_is_named(
    tmp_path: Path, swept: list[Options], monkeypatch: pytest.MonkeyPatch
) -> None:
    cards: list[object] = []

    def summarise(workers: object, allowed: object, card: object, **kw: object) -> int:
        cards.append(card)
        return 0

    monkeypatch.setattr(bench, "summarise", summarise)
    for more in ([], ["--workload", "smoke"], ["--workload", "smoke", "--card", "c.txt"]):
        assert cli.main(_words("bench", tmp_path, *more)) == 0
    assert cards[0] is not None and cards[1] is None and cards[2] == Path("c.txt")


@pytest.mark.parametrize("command", list(COMMANDS))
@pytest.mark.parametrize(
    ("more", "said"),
    [
        (["--workload", "no-such-preset"], "unknown workload 'no-such-preset'"),
        (["--workload", "missing.toml"], "workload missing.toml does not exist"),
        (["--workload", "smoke", "--rates", "fast"], "--rates 'fast' is not a rate"),
        (["--rates", "1,2"], "--rates and --slo apply to a workload"),
        (["--workload", "smoke", "--", "--workload", "smoke"], "--workload is given twice"),
        (["--slo", "ttft_p99<=2s", "--", "--slo=x"], "--slo is given twice"),
    ],
)
def test_a_bad_workload_exits_2_with_one_line_and_touches_no_host(
    command: str,
    more: list[str],
    said: str,
    tmp_path: Path,
    nothing_touched: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if "--slo" in more and "--workload" not in more:
        more = ["--workload", "smoke", *more]
    assert cli.main(_words(command, tmp_path, *more)) == int(Exit.USAGE)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("provision: error: ") and said in err[0], err
    assert not (tmp_path / "gpu01").exists()


def test_a_workload_with_slurm_is_refused_before_anything(
    tmp_path: Path, nothing_touched: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["bench", "--slurm", "debug", "--workload", "smoke"]) == int(Exit.USAGE)
    assert "not supported with --slurm" in capsys.readouterr().err
