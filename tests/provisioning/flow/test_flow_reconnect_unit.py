"""The flow after the SSH connection drops mid-sweep or mid-signing, with scripted fakes of
its seams (tests/provisioning/flow/flow_fakes.py) passed through the steps' public constructors.

The real drop (sshd's session processes killed) is tests/faults/test_orch_faults.py; these
cover what that test cannot make happen: a host that comes back only after a few tries, and
one that never does (one line, a named exit code, clean-up still attempted).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from bench.bundle.recipe import ImageServer, Recipe
from bench.errors import Exit, RunFailed
from bench.launch_profile import load_launch_profile
from provisioning.flow.reconnect import HostLost, Reconnector
from provisioning.flow.sealing import RunFacts, Sealer
from provisioning.flow.seams import ServerContainer
from provisioning.hosts.remote import SshUnreachable
from tests.provisioning.flow.flow_fakes import (
    HOST,
    IMAGE_ID,
    RUN_DIR,
    FakeEngine,
    FakeShell,
    finished_run,
    options,
    sweep_exec,
    workspace,
)

SCOPE = "r1-gpu01"


def test_host_back_after_retries_the_sweep_is_awaited_and_judged_by_its_run_dir(
    tmp_path: Path,
) -> None:
    # the engine reports 126 for an exec whose stream broke, whatever `bench run` returned
    engine = FakeEngine(down_for=2, breaks=True,
                        exec_states=[(True, 0), (True, 0), (False, 126)])  # fmt: skip
    shell = FakeShell(files=finished_run())
    server = ServerContainer("server-1", 49153)
    sweep, reconnect, slept, out = sweep_exec(engine, shell, server=server)
    failed = sweep.run(("bench", "run"), server, workspace(), options(tmp_path))
    assert failed is None  # finished on the host: results.json, no INCOMPLETE
    assert reconnect.dropped
    assert engine.reconnects == 3 and shell.reconnects == 1
    assert slept[:3] == [0.5, 1.0, 2.0]  # backoff
    assert slept[3:] == [2.0, 2.0]  # then polled every POLL_AFTER_DROP_S until it ended
    assert any("INCOMPLETE" in c for c in shell.commands)
    assert engine.followed == ["server-1"]  # the server log is followed again, from the start
    assert server.log == ["INFO server-1 log line"]
    assert (
        "cell 1 finished" in out.getvalue() and "reconnected; the sweep goes on" in out.getvalue()
    )


def test_sweep_that_did_not_finish_after_the_drop_is_a_run_failure(tmp_path: Path) -> None:
    engine = FakeEngine(down_for=0, breaks=True, exec_states=[(False, 126)])
    shell = FakeShell(files=finished_run({f"{RUN_DIR}/INCOMPLETE": ""}))
    sweep, _, _, _ = sweep_exec(engine, shell)
    failed = sweep.run(
        ("bench", "run"), ServerContainer("server-1", 1), workspace(), options(tmp_path)
    )
    assert failed is not None and failed.exit_code == Exit.RUN_FAILED
    assert "stopped before finishing after the ssh connection dropped" in failed.message


def test_without_a_drop_the_exit_code_decides(tmp_path: Path) -> None:
    for code, fails in ((0, False), (1, False), (2, True)):  # 1: a verdict of "no"
        engine = FakeEngine(exec_states=[(False, code)])
        sweep, reconnect, _, _ = sweep_exec(engine, FakeShell())
        failed = sweep.run(
            ("bench", "run"), ServerContainer("s", 1), workspace(), options(tmp_path)
        )
        assert (failed is not None) is fails and not reconnect.dropped
        if failed is not None:
            assert failed.message == f"`bench run` on gpu01 exited with {code}"


def test_host_never_back_is_one_line_with_a_named_code(tmp_path: Path) -> None:
    engine = FakeEngine(down_for=None, breaks=True)
    shell = FakeShell()
    sweep, _, _, _ = sweep_exec(engine, shell)
    with pytest.raises(HostLost) as caught:
        sweep.run(("bench", "run"), ServerContainer("s", 1), workspace(), options(tmp_path))
    lost = caught.value
    assert lost.exit_code == Exit.RUN_FAILED
    assert "\n" not in lost.one_line() and "could not reconnect" in lost.message
    assert "python -m provisioning clean gpu01" in (lost.hint or "")
    assert engine.reconnects == shell.retry.attempts  # bounded


def test_ssh_itself_unreachable_gives_up_without_touching_the_engine(tmp_path: Path) -> None:
    engine = FakeEngine(down_for=None, breaks=True)
    sweep, _, _, _ = sweep_exec(engine, FakeShell(reachable=False))
    with pytest.raises(HostLost, match="timed out"):
        sweep.run(("bench", "run"), ServerContainer("s", 1), workspace(), options(tmp_path))
    assert engine.reconnects == 0


def test_a_reconnect_outside_the_sweep_says_what_goes_on_and_leaves_the_log_alone() -> None:
    engine, shell, out = FakeEngine(down_for=0), FakeShell(), io.StringIO()
    reconnect = Reconnector(HOST.name, shell, engine, out=out, sleep=lambda s: None)
    reconnect.server = ServerContainer("server-1", 1, ["kept"])
    reconnect(SshUnreachable("dropped"), sweeping=False, then="signing again")
    assert not reconnect.dropped and engine.followed == []
    assert reconnect.server.log == ["kept"]
    assert "reconnected; signing again" in out.getvalue()


def _sealer(engine: FakeEngine, shell: FakeShell, tmp_path: Path) -> tuple[Sealer, io.StringIO]:
    out = io.StringIO()
    reconnect = Reconnector(HOST.name, shell, engine, out=out, sleep=lambda s: None)
    sealer = Sealer(engine, shell, reconnect, options(tmp_path),
                    scope=SCOPE, image=IMAGE_ID, where=workspace(), out=out)  # fmt: skip
    return sealer, out


def test_signing_dropped_twice_is_redone_whole_and_signed_with_one_command(
    tmp_path: Path,
) -> None:
    engine, shell = FakeEngine(helper_drops=2), FakeShell(files=finished_run())
    sealer, out = _sealer(engine, shell, tmp_path)
    sealer.seal(RunFacts(server_log=["INFO ready"]))
    # manifest (dropped), manifest (dropped), then manifest, signature, attestation, archive
    assert [s.role for s in engine.started] == ["manifest"] * 3 + ["attest", "pack"]
    assert engine.removed == [(SCOPE, ("server",))] * 2  # the dropped helpers went first
    assert engine.reconnects == 2 and shell.reconnects == 2
    (sign,) = [c for c in shell.commands if "ssh-keygen -Y sign" in c]
    assert sign.startswith("rm -f ") and " && ssh-keygen -Y sign" in sign  # safe to rerun
    assert out.getvalue().count("reconnected; signing again") == 2
    assert shell.files[f"{RUN_DIR}/server.log"] == "INFO ready\n"
    assert sealer.archive == f"{RUN_DIR}.tar.gz"


def test_a_report_dropped_once_is_made_again_and_one_that_keeps_dropping_is_skipped(
    tmp_path: Path,
) -> None:
    engine, shell = FakeEngine(helper_drops=1), FakeShell(files=finished_run())
    sealer, out = _sealer(engine, shell, tmp_path)
    assert sealer.report(RunFacts()) is None
    assert [s.role for s in engine.started] == ["report", "report"]
    assert engine.removed == [(SCOPE, ("server",))]  # the dropped helper went first
    assert "reconnected; writing the report again" in out.getvalue()

    attempts = shell.retry.attempts
    engine, shell = FakeEngine(helper_drops=attempts), FakeShell(files=finished_run())
    sealer, out = _sealer(engine, shell, tmp_path)
    skipped = sealer.report(RunFacts())
    assert skipped is not None and f"failed {attempts} times" in skipped.message
    assert [s.role for s in engine.started] == ["report"] * attempts  # bounded
    assert out.getvalue().count("no report.html: ") == 1
    sealer.seal(RunFacts())  # the connection is back: sealing goes on as always
    assert [s.role for s in engine.started][attempts:] == ["manifest", "attest", "pack"]


def test_a_host_lost_while_reporting_is_not_a_missing_report(tmp_path: Path) -> None:
    engine = FakeEngine(down_for=None)
    sealer, out = _sealer(engine, FakeShell(files=finished_run()), tmp_path)
    engine.down = True
    with pytest.raises(HostLost):
        sealer.report(RunFacts())
    assert "no report.html" not in out.getvalue()


def test_the_manifest_is_bench_manifest_and_the_pack_sees_the_folder_of_runs(
    tmp_path: Path,
) -> None:
    engine = FakeEngine()
    sealer, _ = _sealer(engine, FakeShell(files=finished_run()), tmp_path)
    sealer.seal(RunFacts())
    manifest, attest, pack = engine.started
    assert manifest.command == ("bench", "manifest", "/results/run")
    assert [(m.source, m.target) for m in manifest.mounts] == [(RUN_DIR, "/results/run")]
    # The host's key file, read-only in the helper, by path: never its contents.
    key_in = "/run/secrets/signing_ed25519"
    assert attest.command == ("bench", "attest", "/results/run", "--key", key_in)
    assert [(m.source, m.target, m.read_only) for m in attest.mounts] == [
        (RUN_DIR, "/results/run", False), (workspace().signing_key, key_in, True)
    ]  # fmt: skip
    assert (attest.image, attest.user, attest.environment) == (
        IMAGE_ID, "1000:1000", {"HOME": "/tmp"}
    )  # fmt: skip
    assert pack.command == ("bench", "pack", f"/bundles/{SCOPE}", "--out",
                            f"/bundles/{SCOPE}.tar.gz")  # fmt: skip
    assert [m.source for m in pack.mounts] == [RUN_DIR.rsplit("/", 1)[0]]
    assert {manifest.image, pack.image} == {IMAGE_ID} and manifest.user == "1000:1000"


def test_the_recipe_is_written_into_the_run_directory_before_the_manifest(
    tmp_path: Path,
) -> None:
    engine, shell = FakeEngine(), FakeShell(files=finished_run())
    sealer, _ = _sealer(engine, shell, tmp_path)
    sealer.seal(RunFacts(image_id=None))  # (no environment.json to edit here)
    recipe = Recipe.model_validate_json(shell.files[f"{RUN_DIR}/recipe.json"])
    assert isinstance(recipe.server, ImageServer)
    assert (recipe.server.launch_profile, recipe.server.image_ref) == ("twin", "bench:test")
    assert recipe.server.launch_argv == load_launch_profile("twin").argv
    assert recipe.bench.commit == "81a476982"
    assert recipe.host_requirements["gpus"] == "0"
    assert recipe.commands[0].startswith("git checkout 81a476982")
    assert "make bench-image" in recipe.commands
    last = recipe.commands[-1]
    assert last.startswith(
        "python -m provisioning bench gpu01 --profile twin --image bench:test -- "
    )
    assert "--contexts 8K" in last
    assert engine.started[0].role == "manifest"  # hashed after it was written


def test_the_image_weights_and_start_time_go_into_environment_json(tmp_path: Path) -> None:
    env_path = f"{RUN_DIR}/environment.json"
    engine = FakeEngine()
    shell = FakeShell(files=finished_run({env_path: '{"image": {"in_container": true}}'}))
    sealer, _ = _sealer(engine, shell, tmp_path)
    facts = RunFacts(image_id=IMAGE_ID, weights={"note": "none"}, jit_cache_was_empty=True,
                     timings_s={"server start": 1.5, "readiness": 2.25})  # fmt: skip
    sealer.seal(facts)
    doc = json.loads(shell.files[env_path])
    assert doc["image"] == {"in_container": True, "digest": IMAGE_ID,
                            "labels": {"bench.version": "0.2.0"}}  # fmt: skip
    assert doc["weights"] == {"note": "none"}
    assert doc["server_start"] == {"ready_after_s": 3.75, "jit_cache_was_empty": True}


def test_signing_that_keeps_dropping_gives_up_in_one_line_after_bounded_attempts(
    tmp_path: Path,
) -> None:
    engine, shell = FakeEngine(helper_drops=99), FakeShell(files=finished_run())
    sealer, _ = _sealer(engine, shell, tmp_path)
    with pytest.raises(RunFailed) as caught:
        sealer.seal(RunFacts())
    failed = caught.value
    assert failed.exit_code == Exit.RUN_FAILED and "\n" not in failed.one_line()
    assert f"failed {shell.retry.attempts} times" in failed.message
    assert "bench sign" in (failed.hint or "")
    assert [s.role for s in engine.started] == ["manifest"] * shell.retry.attempts  # bounded


def test_the_sweep_gets_the_server_log_for_its_kv_capacity_line(tmp_path: Path) -> None:
    engine, shell = FakeEngine(), FakeShell()
    sweep, _, _, _ = sweep_exec(engine, shell)
    log = ["INFO start", "INFO [kv_cache_utils.py] GPU KV cache size: 1,835,008 tokens"]
    server = ServerContainer("server-1", 49153, log)
    command = sweep.command(options(tmp_path), server, workspace())
    assert sweep.run(command, server, workspace(), options(tmp_path, api_key="k" * 16)) is None
    (sent,) = engine.exec_commands
    i = sent.index("--server-log")
    assert sent[i + 1] == "/results/run/server.log"
    assert sent[:6] == ("bench", "run", "--url", "http://127.0.0.1:8000", "--out", "/results/run")
    assert "GPU KV cache size: 1,835,008 tokens" in shell.files[f"{RUN_DIR}/server.log"]
    assert engine.exec_env == [{"HOME": "/tmp", "BENCH_API_KEY": "k" * 16}]  # not on argv
    assert not any("k" * 16 in word for word in sent)


def test_a_drop_while_writing_the_server_log_only_leaves_the_flag_out(tmp_path: Path) -> None:
    class DroppingShell(FakeShell):
        def write_text(self, remote_path: str, text: str, mode: int = 0o644) -> None:
            raise SshUnreachable("ssh to gpu01 dropped")

    sweep, _, _, _ = sweep_exec(FakeEngine(), DroppingShell())
    command = sweep.command(
        options(tmp_path), ServerContainer("s", 1, ["GPU KV cache size: 8"]), workspace()
    )
    assert "--server-log" not in command and command[:2] == ("bench", "run")
