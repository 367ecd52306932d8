"""The Slurm pieces without a cluster: the job asked of sbatch, the time limit, the state
read back, the node's local shell, and the CLI's choice between HOST and --slurm."""

from __future__ import annotations

import http.server
import itertools
import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.errors import Exit, UsageError
from bench.run.options import estimate_s
from bench.settings import Settings
from provisioning import cli
from provisioning.commands.slurm import slurm_choice
from provisioning.hosts.local import LocalShell, local_host
from provisioning.hosts.remote import RemoteCommandFailed
from provisioning.hosts.shell import CommandResult
from provisioning.slurm.jobs import JobRequest, JobState, Slurm, batch_script
from provisioning.slurm.submit import SlurmChoice, apply_cluster, time_limit_min, without_secrets


def _request(gpus: int) -> JobRequest:
    return JobRequest(
        name="vllm-bench-r1", partition="gpu", nodes=4, time_min=42, gpus_per_node=gpus,
        workdir="/shared/bench", output="/shared/runs/r1/slurm-%j.out", account="proj7",
    )  # fmt: skip


def _pairs(argv: list[str]) -> list[tuple[str, str]]:
    return list(itertools.pairwise(argv))


def test_sbatch_asks_one_task_per_exclusive_node_with_the_profiles_gpus() -> None:
    argv = _request(4).sbatch_argv("/shared/runs/r1/job.sh")
    assert argv[0] == "sbatch" and argv[-1] == "/shared/runs/r1/job.sh"
    pairs = _pairs(argv)
    for pair in [("--partition", "gpu"), ("--nodes", "4"), ("--ntasks-per-node", "1"),
                 ("--gpus-per-node", "4"), ("--time", "42"), ("--account", "proj7"),
                 ("--chdir", "/shared/bench")]:  # fmt: skip
        assert pair in pairs, pair
    assert "--exclusive" in argv and "--parsable" in argv


def test_a_profile_without_gpus_asks_for_none() -> None:
    assert not any(a.startswith("--gpus") for a in _request(0).sbatch_argv("job.sh"))


def test_zero_nodes_is_refused() -> None:
    with pytest.raises(UsageError):
        JobRequest("n", "p", 0, 1, 0, "/", "o").sbatch_argv("job.sh")


def test_the_batch_script_keeps_the_other_tasks_when_one_fails() -> None:
    script = batch_script(["/venv/bin/python", "-m", "provisioning", "node-run", "/a b"], "/l/%t")
    line = script.strip().splitlines()[-1]
    assert line.startswith("srun --ntasks-per-node=1 --kill-on-bad-exit=0 --output=/l/%t ")
    assert line.endswith("node-run '/a b'")  # quoted as one word


def test_time_limit_is_the_estimate_with_margin_and_the_server_start() -> None:
    small = estimate_s(
        ["--contexts", "8K", "--prefill-only-contexts", "--concurrencies", "1",
         "--duration", "2", "--max-tokens", "512"]
    )  # fmt: skip
    assert 5 < small < 20
    assert time_limit_min(60.0, small) == 12  # (8.8 x 1.5 + 60 + 600) / 60, rounded up
    published = estimate_s([])
    assert published > 30 * 60  # the card's whole matrix: more than half an hour
    assert time_limit_min(1800.0, published) > published * 1.5 / 60


def test_estimate_refuses_arguments_bench_run_would_refuse() -> None:
    with pytest.raises(UsageError):
        estimate_s(["--no-such-flag"])
    with pytest.raises(UsageError):
        estimate_s(["--duration", "0"])


def test_secrets_are_not_passed_to_sbatch() -> None:
    env = {"VLLM_API_KEY": "k", "HF_TOKEN": "t", "BENCH_API_KEY": "b", "SLURM_CONF": "/c", "A": "1"}
    assert without_secrets(env) == {"SLURM_CONF": "/c", "A": "1"}


class _Scripted:
    """A shell answering each command with a scripted result (what the cluster said)."""

    def __init__(self, answers: dict[str, tuple[int, str]]) -> None:
        self.host = local_host("login")
        self.answers = answers
        self.commands: list[str] = []

    def run(self, command: str, **_: object) -> CommandResult:
        self.commands.append(command)
        for prefix, (code, out) in self.answers.items():
            if command.startswith(prefix):
                return CommandResult(command, code, out, "")
        return CommandResult(command, 1, "", "unknown")


def test_state_comes_from_squeue_then_scontrol_then_sacct() -> None:
    shell = _Scripted({"squeue": (0, "PENDING|Resources|\n")})
    state = Slurm(shell).state("17")  # type: ignore[arg-type]
    assert state == JobState("PENDING", "Resources", "")
    assert state.pending and state.describe("17") == "job 17 PENDING (Resources)"
    shell = _Scripted({
        "squeue": (0, ""),
        "scontrol show job": (0, "JobId=17 JobState=CANCELLED Reason=None NodeList=n[1-2] "
                                 "ExitCode=0:15\n"),
    })  # fmt: skip
    state = Slurm(shell).state("17")  # type: ignore[arg-type]
    assert state is not None and state.finished
    assert state.describe("17") == "job 17 CANCELLED on n[1-2], exit 0:15"
    shell = _Scripted({"squeue": (1, ""), "scontrol": (1, ""), "sacct": (0, "TIMEOUT|n1|0:0\n")})
    state = Slurm(shell).state("17")  # type: ignore[arg-type]
    assert state == JobState("TIMEOUT", "", "n1", "0:0") and state.finished
    assert Slurm(_Scripted({})).state("17") is None  # type: ignore[arg-type]


def test_submit_returns_the_job_id_and_says_why_sbatch_refused() -> None:
    ok = _Scripted({"sbatch": (0, "4242;cluster\n")})
    assert Slurm(ok).submit(_request(0), "job.sh") == "4242"  # type: ignore[arg-type]
    assert ok.commands[0].startswith("sbatch --parsable --job-name vllm-bench-r1 ")
    refused = _Scripted({"sbatch": (1, "sbatch: error: invalid partition specified: gpu")})
    with pytest.raises(Exception, match="invalid partition specified: gpu"):
        Slurm(refused).submit(_request(0), "job.sh")  # type: ignore[arg-type]


@pytest.mark.subprocess
def test_local_shell_runs_commands_with_the_given_environment(tmp_path: Path) -> None:
    shell = LocalShell(local_host("n1"), environment={"ONLY": "this", "PATH": os.environ["PATH"]})
    res = shell.run('printf "%s/%s" "$ONLY" "${HOME:-none}"')
    assert res.ok and res.stdout == "this/none"
    assert not shell.run("exit 3").ok
    with pytest.raises(RemoteCommandFailed, match="exited with 3"):
        shell.run("echo nope >&2; exit 3", check=True)
    target = tmp_path / "f.txt"
    shell.write_text(str(target), "hello\n", mode=0o600)
    assert shell.read_text(str(target)) == "hello\n"
    assert target.stat().st_mode & 0o777 == 0o600


@pytest.fixture
def http_port() -> Iterator[int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = (self.headers.get("Authorization") or "-").encode()
            self.send_response(200 if self.path == "/health" else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.integration
def test_local_shell_reaches_the_servers_port_and_says_none_when_nothing_listens(
    http_port: int,
) -> None:
    shell = LocalShell(local_host("n1"))
    assert shell.http_get(http_port, "/health", headers={"Authorization": "Bearer x"}) == (
        200,
        b"Bearer x",
    )
    assert shell.http_get(http_port, "/nope") == (404, b"-")
    with socket.socket() as s:  # a port bound but not listening: refused
        s.bind(("127.0.0.1", 0))
        assert shell.http_get(s.getsockname()[1], "/health", timeout_s=2) is None


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["bench"], "no host given"),
        (["bench", "gpu01", "--slurm", "debug"], "HOST or --slurm"),
        (["bench", "--slurm", "debug", "--keep"], "--keep does not apply"),
    ],
)
def test_bench_takes_a_host_or_a_partition(
    argv: list[str], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == int(Exit.USAGE)
    assert says in capsys.readouterr().err


def _choice(inventory: Path, *words: str) -> SlurmChoice:
    """`provision bench --cluster hpc WORDS` as the command hands it to the Slurm side."""
    argv = ["bench", "--cluster", "hpc", "--inventory", str(inventory), *words]
    args = cli.build_parser().parse_args(argv)
    args.bench_args = ()
    return slurm_choice(args, Settings())


def test_a_cluster_in_hosts_toml_fills_what_the_command_line_left_unset(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.toml"
    inventory.write_text(
        '[clusters.hpc]\npartition = "gpu"\naccount = "proj7"\nlogin = "login01"\n'
        'shared_dir = "/shared/runs"\ncheckout = "/shared/bench"\nruntime = "docker"\n'
    )
    given = _choice(inventory)
    filled = apply_cluster(given)
    assert (filled.partition, filled.account, filled.cluster.login) == ("gpu", "proj7", "login01")
    assert (filled.cluster.shared_dir, filled.cluster.checkout) == (
        Path("/shared/runs"), "/shared/bench",
    )  # fmt: skip
    assert given.partition is None  # the choice itself is not changed
    filled = apply_cluster(_choice(inventory, "--slurm", "debug", "--account", "other"))
    assert (filled.partition, filled.account, filled.cluster.login) == ("debug", "other", "login01")


def test_a_cluster_whose_nodes_run_pyxis_is_refused_as_not_built(tmp_path: Path) -> None:
    inventory = tmp_path / "hosts.toml"
    inventory.write_text('[clusters.hpc]\npartition = "gpu"\nruntime = "pyxis"\n')
    with pytest.raises(UsageError, match="pyxis/enroot\\) is not built"):
        apply_cluster(_choice(inventory))
    with pytest.raises(UsageError, match="no cluster 'other'"):
        apply_cluster(_choice(inventory, "--cluster", "other"))
    inventory.write_text('[clusters.hpc]\nruntime = "singularity"\n')
    with pytest.raises(UsageError, match=r"clusters\.hpc\.runtime"):
        apply_cluster(_choice(inventory))
