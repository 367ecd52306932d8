"""The whole host flow (provisioning.flow.host_run.HostRun) over typed fakes of its seams: the order
of the steps, what the placement is asked, the clean-up whatever happens, the interrupts.

The same flow against a real engine and sshd is tests/provisioning/flow/test_flow.py; a Slurm node's
placement (provisioning.slurm.node.OnNode) is checked here on this machine's own shell.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from bench.errors import Exit, Interrupted, ServerError
from provisioning.containers.docker_sdk import ContainerFailed
from provisioning.flow.host_run import HostRun
from provisioning.flow.options import HostOutcome
from provisioning.flow.readiness import wait_ready
from provisioning.flow.reconnect import HostLost
from provisioning.flow.seams import ServerContainer, Steps
from provisioning.hosts.local import LocalShell, local_host
from provisioning.slurm.node import OnNode
from tests.provisioning.flow.flow_fakes import (
    HOME,
    HOST,
    IMAGE_ID,
    RUN_DIR,
    FakeEngine,
    FakePlacement,
    FakeShell,
    finished_run,
    options,
)

SCOPE = "r1-gpu01"


def _run(
    tmp_path: Path,
    engine: FakeEngine,
    shell: FakeShell,
    *,
    keep: bool = False,
    complete: bool = True,
) -> tuple[HostRun, FakePlacement, io.StringIO]:
    out = io.StringIO()
    placement = FakePlacement(engine, tmp_path / "results" / "gpu01" / "r1", complete=complete)
    opts = options(tmp_path, keep=keep, api_key="secret-key-1234")
    run = HostRun(HOST, opts, remote=shell, placement=placement,
                  out=out, clock=lambda: 0.0, sleep=lambda s: None)  # fmt: skip
    return run, placement, out


def test_the_steps_run_in_order_and_the_placement_gets_the_signed_archive(
    tmp_path: Path,
) -> None:
    engine, shell = FakeEngine(), FakeShell(files=finished_run())
    run, placement, out = _run(tmp_path, engine, shell)
    outcome = run.run()
    assert list(outcome.timings_s) == [
        "docker",
        "host directories",
        "image",
        "server start",
        "readiness",
        "sweep",
        "report",
        "sign",
    ]  # fmt: skip  (the twin needs no GPU self-test and no weights)
    assert placement.prepared == [(HOME, SCOPE)]
    assert placement.delivered == [f"{RUN_DIR}.tar.gz"]
    assert outcome.image_id == IMAGE_ID and outcome.complete and outcome.error is None
    server, report, manifest, attest, pack = engine.started
    assert (server.role, server.image, server.user) == ("server", IMAGE_ID, "1000:1000")
    assert server.publish == {8000: None} and server.hostname == "gpu01"
    assert server.environment["VLLM_API_KEY"] == "secret-key-1234"  # through the API
    assert not any("secret-key-1234" in word for word in server.command)
    assert [m.target for m in server.mounts] == ["/results/run", "/hf"]
    assert report.command == ("bench", "report", "/results/run")
    assert [c.command[:2] for c in (manifest, attest, pack)] == [
        ("bench", "manifest"), ("bench", "attest"), ("bench", "pack")
    ]  # fmt: skip
    assert engine.exec_commands[0][:2] == ("bench", "run")
    assert engine.removed == [(SCOPE, ())] and engine.closed  # nothing left behind
    assert shell.files[f"{RUN_DIR}/server.log"] == "INFO server-1 log line\n"
    assert "[gpu01] server ready" in out.getvalue()


def test_the_report_is_made_in_a_container_of_the_image_before_the_manifest_is_signed(
    tmp_path: Path,
) -> None:
    shell = FakeShell(files=finished_run())
    engine = FakeEngine(journal=shell.commands)  # one timeline: containers and host commands
    run, _, out = _run(tmp_path, engine, shell)
    run.run()
    timeline = [c for c in shell.commands if c.startswith("container ") or "-Y sign" in c]
    assert [c.split(" -q ")[0] for c in timeline] == [
        "container server",
        "container report",
        "container manifest",
        f"rm -f {RUN_DIR}/manifest.json.sig && ssh-keygen -Y sign",
        "container attest",  # after the signature, over the same manifest: as `bench sign`
        "container pack",
    ]
    report = engine.started[1]
    assert (report.image, report.user) == (IMAGE_ID, "1000:1000")
    assert [(m.source, m.target) for m in report.mounts] == [(RUN_DIR, "/results/run")]
    # It sees what the flow learnt: recipe.json and server.log were written before it ran.
    first_report = shell.commands.index("container report")
    assert f"{RUN_DIR}/recipe.json" in shell.files and f"{RUN_DIR}/server.log" in shell.files
    assert "container manifest" not in shell.commands[:first_report]
    assert "[gpu01] report ..." in out.getvalue()


def test_a_report_that_fails_is_one_line_and_the_bundle_is_signed_without_it(
    tmp_path: Path,
) -> None:
    traceback = (
        'Traceback (most recent call last):\n  File "x.py", line 1\n'
        "bench: error: matplotlib is not installed; the report needs it\x1b[0m\n\n"
    )
    engine = FakeEngine(helper_exits={"report": (3, traceback)})
    shell = FakeShell(files=finished_run())
    run, placement, out = _run(tmp_path, engine, shell)
    outcome = run.run()
    # Not the run's failure: the figures are signed and delivered as always.
    assert outcome.error is None and outcome.complete
    assert [s.role for s in engine.started] == ["server", "report", "manifest", "attest", "pack"]
    assert placement.delivered == [f"{RUN_DIR}.tar.gz"]
    said = [line for line in out.getvalue().splitlines() if "report" in line]
    assert said == [
        "[gpu01] report ...",
        "[gpu01] no report.html: `bench report` on gpu01 exited with 3: bench: error: "
        "matplotlib is not installed; the report needs it?[0m; signing the bundle without it",
    ]
    assert "Traceback" not in out.getvalue()


def test_an_image_without_bench_attest_signs_the_bundle_without_an_attestation(
    tmp_path: Path,
) -> None:
    said = "bench: error: argument command: invalid choice: 'attest' (choose from 'run', ...)"
    engine = FakeEngine(helper_exits={"attest": (2, f"usage: bench ...\n{said}\n")})
    shell = FakeShell(files=finished_run())
    run, placement, out = _run(tmp_path, engine, shell)
    outcome = run.run()
    # Not the run's failure: signed (manifest.json.sig) and delivered; verify says so.
    assert outcome.error is None and outcome.complete
    assert [s.role for s in engine.started] == ["server", "report", "manifest", "attest", "pack"]
    assert placement.delivered == [f"{RUN_DIR}.tar.gz"]
    assert [line for line in out.getvalue().splitlines() if "attest" in line] == [
        f"[gpu01] no attestation.intoto.json: `bench attest` on gpu01 exited with 2: {said}; "
        "the bundle is signed without it"
    ]


def test_keep_leaves_the_server_running_and_says_where(tmp_path: Path) -> None:
    engine, shell = FakeEngine(), FakeShell(files=finished_run())
    run, _, out = _run(tmp_path, engine, shell, keep=True)
    run.run()
    assert engine.removed == [(SCOPE, ("server",))]
    assert "--keep: server left running on the host's 127.0.0.1:49153" in out.getvalue()


def test_host_never_back_is_the_error_and_clean_up_is_still_tried(tmp_path: Path) -> None:
    engine, shell = FakeEngine(down_for=None, breaks=True), FakeShell()
    run, placement, _ = _run(tmp_path, engine, shell)
    with pytest.raises(HostLost) as caught:
        run.run()
    assert caught.value.exit_code == Exit.RUN_FAILED
    # the sweep's reconnect gave up after its attempts; the clean-up tried once more
    assert engine.reconnects == 2 * shell.retry.attempts
    assert engine.removed == [] and engine.closed
    assert run.outcome.error is caught.value  # the first error stays the one reported
    assert placement.delivered == []  # no results.json: nothing to seal


def test_clean_up_reconnects_when_the_connection_is_gone(tmp_path: Path) -> None:
    engine, shell = FakeEngine(down_for=0), FakeShell(files=finished_run())
    run, placement, out = _run(tmp_path, engine, shell)
    placement.after_delivery = lambda: setattr(engine, "down", True)  # dropped just then
    outcome = run.run()
    assert outcome.error is None and engine.reconnects == 1
    assert engine.removed == [(SCOPE, ())]
    assert "reconnected; cleaning up" in out.getvalue()


def test_ctrl_c_during_the_sweep_interrupts_bench_run_and_keeps_the_partial_bundle(
    tmp_path: Path,
) -> None:
    engine = FakeEngine(exec_states=[(True, None), (False, 130)])
    shell = FakeShell(files=finished_run())
    run, placement, _ = _run(tmp_path, engine, shell, complete=False)
    engine.during_stream = run.interrupt
    with pytest.raises(Interrupted) as caught:
        run.run()
    assert "kill -INT 4242" in shell.commands  # `bench run` saves its finished cells
    assert placement.stops == 1 and placement.delivered == [f"{RUN_DIR}.tar.gz"]
    assert str(placement.local_dir) in caught.value.message
    assert "the partial bundle is in" in caught.value.message
    assert run.outcome.error is None and engine.removed == [(SCOPE, ())]


def test_ctrl_c_before_anything_ran_says_there_is_no_bundle(tmp_path: Path) -> None:
    engine, shell = FakeEngine(), FakeShell()
    run, placement, _ = _run(tmp_path, engine, shell)
    run.interrupt()
    with pytest.raises(Interrupted, match="no bundle"):
        run.run()
    assert engine.started == [] and placement.prepared == []
    assert engine.removed == [(SCOPE, ())] and engine.closed


def test_a_server_that_exits_while_starting_is_an_error_with_its_log(tmp_path: Path) -> None:
    class ExitingEngine(FakeEngine):
        def state(self, cid: str) -> tuple[str, int | None]:
            return "exited", 3

    engine = ExitingEngine()
    run, _, _ = _run(tmp_path, engine, FakeShell())
    with pytest.raises(ContainerFailed) as caught:
        run.run()
    assert "exited with 3 while starting" in caught.value.message
    assert "    last lines of server-1" in caught.value.message
    assert engine.exec_commands == [] and engine.removed == [(SCOPE, ())]


def test_readiness_gives_up_after_the_startup_timeout(tmp_path: Path) -> None:
    shell = FakeShell()
    shell.served = b'{"data": []}'  # /health answers, the model is not served yet
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    with pytest.raises(ServerError, match="not ready after 60 s"):
        wait_ready(FakeEngine(), shell, ServerContainer("server-1", 1), options(tmp_path).profile,
                   api_key=None, out=io.StringIO(), clock=lambda: now[0], sleep=sleep,
                   stopped=lambda: False)  # fmt: skip
    assert 60.0 < now[0] <= 62.0


def test_a_host_over_ssh_needs_a_remote_unless_given_a_placement(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="needs a Remote"):
        HostRun(HOST, options(tmp_path), remote=FakeShell())


@pytest.mark.subprocess
def test_a_node_keeps_its_run_directory_key_and_bundle_on_the_shared_filesystem(
    tmp_path: Path,
) -> None:
    home, directory = tmp_path / "home", tmp_path / "run" / "nodes" / "n1"
    opts = options(tmp_path)
    node = OnNode(LocalShell(local_host("n1")), opts, directory=directory, image_tar=None)
    run_dir, key = node.prepare(str(home), "r1-n1")
    assert run_dir == str(directory / "r1-n1") and Path(run_dir).is_dir()
    assert key == f"{home}/.config/vllm-bench/nodes/n1/signing_ed25519"  # its own key
    assert Path(key).is_file() and "vllm-bench@n1 " in opts.allowed_signers.read_text()
    outcome = HostOutcome(host="n1", run_id="r1")
    node.deliver(f"{run_dir}.tar.gz", outcome, Steps(outcome, io.StringIO(), lambda: 0.0))
    assert outcome.archive == directory / "r1-n1.tar.gz" and outcome.local_dir is None
    node.stop_delivery()
    assert node.delivery_stopped() is None
