"""The flow after the SSH connection drops mid-sweep, with a scripted engine and host.

The real drop (sshd's session processes killed) is tests/faults/test_orch_faults.py; these
cover what that test cannot make happen: a host that comes back only after a few tries, and
one that never does (one line, a named exit code, clean-up still attempted).
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from bench.bundle.recipe import ImageServer, Recipe
from bench.errors import Exit, RunFailed
from bench.launch_profile import load_launch_profile
from provisioning.containers import EngineUnreachable
from provisioning.flow import HostLost, HostRun
from provisioning.hosts import Host
from provisioning.remote import CommandResult, Remote, RetryPolicy, SshUnreachable
from provisioning.requirements import load_requirements
from provisioning.run_options import Options
from tests.support.runs import small_results

HOST = Host(name="gpu01", hostname="gpu01.example", user="bench", port=22)


def _lost(action: str) -> EngineUnreachable:
    return EngineUnreachable(f"{action}: lost the Docker engine over ssh: SSH session not active")


class ScriptedEngine:
    """The engine comes back after `down_for` reconnect attempts (never when None)."""

    def __init__(self, down_for: int | None, exec_states: list[tuple[bool, int]]) -> None:
        self.down = True
        self.down_for = down_for
        self.reconnects = 0
        self.exec_states = exec_states
        self.removed: list[str] = []
        self.followed: list[str] = []

    def exec_stream(self, cid: str, command: Any, **_: Any) -> tuple[str, Iterator[bytes]]:
        def stream() -> Iterator[bytes]:
            yield b"cell 1 finished\n"
            raise _lost("following a command's output")

        return "exec-1", stream()

    def exec_result(self, exec_id: str) -> tuple[bool, int | None, int]:
        if self.down:
            raise _lost("reading a command's state")
        running, code = self.exec_states.pop(0)
        return running, code, 4242

    def reconnect(self) -> None:
        self.reconnects += 1
        if self.down_for is None or self.reconnects <= self.down_for:
            raise _lost("connecting to Docker on gpu01")
        self.down = False

    def remove_run(self, run_id: str, *, keep_roles: Any = ()) -> list[str]:
        if self.down:
            raise _lost("listing containers")
        self.removed.append(run_id)
        return ["server"]

    def follow_logs(self, cid: str, on_line: Any) -> None:
        self.followed.append(cid)

    def close(self) -> None:
        pass


class ScriptedRemote:
    def __init__(self, reachable: bool, finished: bool = True) -> None:
        self.retry = RetryPolicy(attempts=3, first_backoff_s=0.5, max_backoff_s=8.0)
        self.reachable = reachable
        self.finished = finished
        self.reconnects = 0
        self.commands: list[str] = []
        self.written: dict[str, str] = {}

    def reconnect(self) -> None:
        self.reconnects += 1
        if not self.reachable:
            raise SshUnreachable("cannot reach bench@gpu01.example:22 over ssh: timed out")

    def run(self, command: str, **_: Any) -> CommandResult:
        self.commands.append(command)
        return CommandResult(command, 0 if self.finished else 1, "", "")

    def read_text(self, remote_path: str) -> str:
        if remote_path.endswith("/results.json"):
            return small_results().model_dump_json()
        raise FileNotFoundError(remote_path)

    def write_text(self, remote_path: str, text: str) -> None:
        self.written[remote_path] = text


def _host_run(engine: ScriptedEngine, remote: ScriptedRemote, tmp_path: Path) -> HostRun:
    profile = load_launch_profile("twin")
    opts = Options(
        profile=profile,
        requirements=load_requirements(profile.name, profile.gpus, image_ref="bench:test"),
        image_ref="bench:test",
        run_id="r1",
        results_dir=tmp_path / "results",
        allowed_signers=tmp_path / "allowed_signers",
    )
    slept: list[float] = []
    run = HostRun(
        HOST,
        opts,
        remote=cast(Remote, remote),
        out=io.StringIO(),
        sleep=slept.append,
        clock=lambda: 0.0,
    )
    run.engine = cast(Any, engine)
    run.server_id, run.home = "server-1", "/home/bench"
    run.slept = slept  # type: ignore[attr-defined]
    return run


def test_host_back_after_retries_the_sweep_is_awaited_and_judged_by_its_run_dir(
    tmp_path: Path,
) -> None:
    # the engine reports 126 for an exec whose stream broke, whatever `bench run` returned
    engine = ScriptedEngine(down_for=2, exec_states=[(True, 0), (True, 0), (False, 126)])
    remote = ScriptedRemote(reachable=True, finished=True)
    run = _host_run(engine, remote, tmp_path)
    run._sweep()
    assert run.outcome.error is None  # finished on the host: results.json, no INCOMPLETE
    assert engine.reconnects == 3 and remote.reconnects == 1
    assert run.slept[:3] == [0.5, 1.0, 2.0]  # type: ignore[attr-defined]  # backoff
    assert any("INCOMPLETE" in c for c in remote.commands)
    assert engine.followed == ["server-1"]  # the server log is followed again
    err = cast(io.StringIO, run.out).getvalue()
    assert "cell 1 finished" in err and "reconnected; the sweep goes on" in err


def test_sweep_that_did_not_finish_after_the_drop_is_a_run_failure(tmp_path: Path) -> None:
    engine = ScriptedEngine(down_for=0, exec_states=[(False, 126)])
    run = _host_run(engine, ScriptedRemote(reachable=True, finished=False), tmp_path)
    run._sweep()
    assert run.outcome.error is not None
    assert run.outcome.error.exit_code == Exit.RUN_FAILED
    assert "stopped before finishing after the ssh connection dropped" in str(run.outcome.error)


def test_host_never_back_is_one_line_with_a_named_code_and_clean_up_is_still_tried(
    tmp_path: Path,
) -> None:
    engine = ScriptedEngine(down_for=None, exec_states=[])
    remote = ScriptedRemote(reachable=True)
    run = _host_run(engine, remote, tmp_path)
    with pytest.raises(HostLost) as caught:
        run._sweep()
    lost = caught.value
    assert lost.exit_code == Exit.RUN_FAILED
    assert "\n" not in lost.one_line() and "could not reconnect" in lost.message
    assert "python -m provisioning clean gpu01" in (lost.hint or "")
    assert engine.reconnects == remote.retry.attempts  # bounded
    run.outcome.error = lost
    before = engine.reconnects
    run._clean_up()  # over a fresh connection: tried again, fails, the first error stays
    assert engine.reconnects > before and engine.removed == []
    assert run.outcome.error is lost


def test_clean_up_reconnects_when_the_connection_is_gone(tmp_path: Path) -> None:
    engine = ScriptedEngine(down_for=0, exec_states=[])
    remote = ScriptedRemote(reachable=True)
    run = _host_run(engine, remote, tmp_path)
    run._clean_up()
    assert engine.removed == [run.scope] and run.outcome.error is None


def test_ssh_itself_unreachable_gives_up_without_touching_the_engine(tmp_path: Path) -> None:
    engine = ScriptedEngine(down_for=None, exec_states=[])
    run = _host_run(engine, ScriptedRemote(reachable=False), tmp_path)
    with pytest.raises(HostLost, match="timed out"):
        run._sweep()
    assert engine.reconnects == 0


class SealEngine:
    """The engine drops the connection while the first `drops` helper containers run."""

    def __init__(self, drops: int) -> None:
        self.drops = drops
        self.started: list[str] = []
        self.removed: list[tuple[str, ...]] = []
        self.reconnects = 0

    def start(self, spec: Any) -> str:
        self.started.append(spec.role)
        return f"{spec.role}-{len(self.started)}"

    def wait(self, cid: str, timeout_s: float) -> int:
        if self.drops:
            self.drops -= 1
            raise _lost("waiting for a container")
        return 0

    def remove_run(self, run_id: str, *, keep_roles: Any = ()) -> list[str]:
        self.removed.append(tuple(keep_roles))
        return []

    def reconnect(self) -> None:
        self.reconnects += 1

    def close(self) -> None:
        pass


def _sealing(drops: int, tmp_path: Path) -> tuple[HostRun, SealEngine, ScriptedRemote]:
    engine, remote = SealEngine(drops), ScriptedRemote(reachable=True)
    run = _host_run(cast(Any, engine), remote, tmp_path)
    run.signing_key = "/home/bench/.config/vllm-bench/signing_ed25519"
    return run, engine, remote


def test_signing_dropped_twice_is_redone_whole_and_signed_with_one_command(
    tmp_path: Path,
) -> None:
    run, engine, remote = _sealing(2, tmp_path)
    run._seal()
    # manifest (dropped), manifest (dropped), then manifest, signature and archive
    assert engine.started == ["manifest", "manifest", "manifest", "pack"]
    assert engine.removed == [("server",), ("server",)]  # the dropped helpers went first
    assert engine.reconnects == 2 and remote.reconnects == 2
    (sign,) = [c for c in remote.commands if "ssh-keygen -Y sign" in c]
    assert sign.startswith("rm -f ") and " && ssh-keygen -Y sign" in sign  # safe to rerun
    assert cast(io.StringIO, run.out).getvalue().count("reconnected; signing again") == 2


def test_the_recipe_is_written_into_the_run_directory_before_the_manifest(
    tmp_path: Path,
) -> None:
    run, engine, remote = _sealing(0, tmp_path)
    run.outcome.image_id = None  # (no environment.json to edit here)
    run._seal()
    written = remote.written["/home/bench/.cache/vllm-bench/runs/r1-gpu01/recipe.json"]
    recipe = Recipe.model_validate_json(written)
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
    assert engine.started[0] == "manifest"  # hashed after it was written


def test_signing_that_keeps_dropping_gives_up_in_one_line_after_bounded_attempts(
    tmp_path: Path,
) -> None:
    run, engine, remote = _sealing(99, tmp_path)
    with pytest.raises(RunFailed) as caught:
        run._seal()
    failed = caught.value
    assert failed.exit_code == Exit.RUN_FAILED and "\n" not in failed.one_line()
    assert f"failed {remote.retry.attempts} times" in failed.message
    assert "bench sign" in (failed.hint or "")
    assert engine.started == ["manifest"] * remote.retry.attempts  # bounded


class RecordingEngine(ScriptedEngine):
    """An engine that stays up and records the command of the sweep's exec."""

    def __init__(self) -> None:
        super().__init__(down_for=0, exec_states=[(False, 0)])
        self.down = False
        self.command: tuple[str, ...] = ()

    def exec_stream(self, cid: str, command: Any, **_: Any) -> tuple[str, Iterator[bytes]]:
        self.command = tuple(command)
        return "exec-1", iter([b"done\n"])


class WritingRemote(ScriptedRemote):
    def __init__(self) -> None:
        super().__init__(reachable=True)
        self.written: dict[str, str] = {}

    def write_text(self, remote_path: str, text: str, mode: int = 0o644) -> None:
        self.written[remote_path] = text


def test_the_sweep_gets_the_server_log_for_its_kv_capacity_line(tmp_path: Path) -> None:
    engine, remote = RecordingEngine(), WritingRemote()
    run = _host_run(engine, cast(ScriptedRemote, remote), tmp_path)
    run.server_log = ["INFO start", "INFO [kv_cache_utils.py] GPU KV cache size: 1,835,008 tokens"]
    run._sweep()
    assert run.outcome.error is None
    i = engine.command.index("--server-log")
    assert engine.command[i + 1] == "/results/run/server.log"
    (path, text) = next(iter(remote.written.items()))
    assert path.endswith("/server.log") and "GPU KV cache size: 1,835,008 tokens" in text


def test_a_drop_while_writing_the_server_log_only_leaves_the_flag_out(tmp_path: Path) -> None:
    class DroppingRemote(WritingRemote):
        def write_text(self, remote_path: str, text: str, mode: int = 0o644) -> None:
            raise SshUnreachable("ssh to gpu01 dropped")

    engine = RecordingEngine()
    run = _host_run(engine, cast(ScriptedRemote, DroppingRemote()), tmp_path)
    run.server_log = ["GPU KV cache size: 1,835,008 tokens"]
    run._sweep()
    assert run.outcome.error is None and "--server-log" not in engine.command
