"""Small typed fakes of the host flow's seams (provisioning.flow.seams): an engine, a host's
shell and a placement, scripted to drop the connection and come back (or not)."""

from __future__ import annotations

import io
import shlex
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TextIO

from pydantic import SecretStr

from bench.errors import Interrupted
from bench.launch_profile import load_launch_profile
from provisioning.containers.docker_sdk import EngineUnreachable
from provisioning.containers.engine import ContainerSpec
from provisioning.containers.engine_side import EngineSide
from provisioning.flow.options import HostOutcome, Options, Secrets
from provisioning.flow.reconnect import Reconnector
from provisioning.flow.seams import ServerContainer, Steps, Workspace
from provisioning.flow.sweep_exec import SweepExec
from provisioning.hosts.inventory import ResolvedHost
from provisioning.hosts.remote import SshUnreachable
from provisioning.hosts.shell import CommandResult
from provisioning.preflight.requirements import load_requirements
from provisioning.retry import RetryPolicy
from tests.support.runs import small_results

HOST = ResolvedHost(name="gpu01", hostname="gpu01.example", user="bench", port=22)
HOME = "/home/bench"
RUN_DIR = f"{HOME}/.cache/vllm-bench/runs/r1-gpu01"
IMAGE_ID = "sha256:" + "1" * 64


def lost(action: str) -> EngineUnreachable:
    return EngineUnreachable(f"{action}: lost the Docker engine over ssh: SSH session not active")


def options(tmp_path: Path, *, keep: bool = False, api_key: str | None = None) -> Options:
    profile = load_launch_profile("twin")
    return Options(
        profile=profile,
        requirements=load_requirements(profile.name, profile.gpus, image_ref="bench:test"),
        image_ref="bench:test",
        run_id="r1",
        results_dir=tmp_path / "results",
        allowed_signers=tmp_path / "allowed_signers",
        keep=keep,
        secrets=Secrets(api_key=SecretStr(api_key) if api_key else None),
    )


def workspace(run_dir: str = RUN_DIR) -> Workspace:
    return Workspace(
        home=HOME,
        uid_gid="1000:1000",
        run_dir=run_dir,
        model_cache=f"{HOME}/.cache/huggingface",
        signing_key=f"{HOME}/.config/vllm-bench/signing_ed25519",
    )


class FakeEngine:
    """An engine whose connection is `down` until `down_for` reconnects went by (never when
    None); an exec's stream breaks after `stream` when `breaks`, and its state is read from
    `exec_states` ((running, exit code) each time it is asked). A helper container ends with
    0 unless `helper_exits` gives its role (exit code, log); each start is also written into
    `journal` when given (a shell's commands: one timeline of both)."""

    def __init__(
        self,
        *,
        down_for: int | None = 0,
        exec_states: Iterable[tuple[bool, int | None]] = ((False, 0),),
        stream: Iterable[bytes] = (b"cell 1 finished\n",),
        breaks: bool = False,
        helper_drops: int = 0,
        helper_exits: Mapping[str, tuple[int, str]] | None = None,
        journal: list[str] | None = None,
    ) -> None:
        self.down = False
        self.down_for = down_for
        self.reconnects = 0
        self.exec_states = list(exec_states)
        self.stream, self.breaks = list(stream), breaks
        self.helper_drops = helper_drops
        self.helper_exits = dict(helper_exits or {})
        self.journal = journal
        self.started: list[ContainerSpec] = []
        self.exec_commands: list[tuple[str, ...]] = []
        self.exec_env: list[dict[str, str]] = []
        self.removed: list[tuple[str, tuple[str, ...]]] = []
        self.followed: list[str] = []
        self.closed = False
        self.during_stream: Callable[[], None] | None = None

    def _up(self, action: str) -> None:
        if self.down:
            raise lost(action)

    def start(self, spec: ContainerSpec) -> str:
        self._up("starting a container")
        self.started.append(spec)
        if self.journal is not None:
            self.journal.append(f"container {spec.role}")
        return f"{spec.role}-{len(self.started)}"

    def state(self, cid: str) -> tuple[str, int | None]:
        self._up("reading container state")
        return "running", None

    def host_port(self, cid: str, container_port: int) -> int:
        return 49153

    def log_tail(self, cid: str, lines: int = 30) -> str:
        scripted = self.helper_exits.get(cid.rsplit("-", 1)[0])
        return scripted[1] if scripted else f"last lines of {cid}\n"

    def follow_logs(self, cid: str, on_line: Callable[[str], None]) -> object:
        self.followed.append(cid)
        on_line(f"INFO {cid} log line")
        return None

    def exec_stream(
        self,
        cid: str,
        command: Iterable[str],
        *,
        environment: Mapping[str, str] | None = None,
        user: str | None = None,
        workdir: str | None = None,
    ) -> tuple[str, Iterator[bytes]]:
        self._up("starting a command in the container")
        self.exec_commands.append(tuple(command))
        self.exec_env.append(dict(environment or {}))

        def chunks() -> Iterator[bytes]:
            yield from self.stream
            if self.during_stream is not None:
                self.during_stream()
            if self.breaks:
                self.down = True
                raise lost("following a command's output")

        return "exec-1", chunks()

    def exec_result(self, exec_id: str) -> tuple[bool, int | None, int]:
        self._up("reading a command's state")
        running, code = self.exec_states.pop(0) if self.exec_states else (False, 0)
        return running, code, 4242

    def wait(self, cid: str, timeout_s: float) -> int:
        if self.helper_drops:
            self.helper_drops -= 1
            raise lost("waiting for a container")
        return self.helper_exits.get(cid.rsplit("-", 1)[0], (0, ""))[0]

    def image_labels(self, ref: str) -> dict[str, str]:
        return {"bench.version": "0.2.0"}

    def remove_run(self, run_id: str, *, keep_roles: Iterable[str] = ()) -> list[str]:
        self._up("listing containers")
        self.removed.append((run_id, tuple(keep_roles)))
        return ["server"]

    def reconnect(self) -> None:
        self.reconnects += 1
        if self.down_for is None or self.reconnects <= self.down_for:
            raise lost("connecting to Docker on gpu01")
        self.down = False

    def close(self) -> None:
        self.closed = True


class FakeShell:
    """The host's commands over a dict of files: `test -f P` and `test ! -e P` are answered
    from it, the account query too; every other command succeeds (and is recorded)."""

    def __init__(self, *, reachable: bool = True, files: dict[str, str] | None = None) -> None:
        self.host = HOST
        self.retry = RetryPolicy(attempts=3, first_backoff_s=0.5, max_backoff_s=8.0)
        self.reachable = reachable
        self.files = files if files is not None else {}
        self.reconnects = 0
        self.commands: list[str] = []
        self.served = b'{"data": [{"id": "qwen"}]}'

    def run(
        self,
        command: str,
        *,
        check: bool = False,
        timeout_s: float | None = 120.0,
        idempotent: bool = True,
    ) -> CommandResult:
        self.commands.append(command)
        if command.startswith("printf "):
            return CommandResult(command, 0, f"{HOME} 1000:1000", "")
        ok = True
        for part in command.split(" && "):
            words = shlex.split(part)
            if words[:2] == ["test", "-f"]:
                ok = ok and words[2] in self.files
            elif words[:3] == ["test", "!", "-e"]:
                ok = ok and words[3] not in self.files
        return CommandResult(command, 0 if ok else 1, "", "")

    def write_text(self, remote_path: str, text: str, mode: int = 0o644) -> None:
        self.files[remote_path] = text

    def read_text(self, remote_path: str) -> str:
        if remote_path not in self.files:
            raise FileNotFoundError(remote_path)
        return self.files[remote_path]

    def http_get(
        self, port: int, path: str, *, headers: dict[str, str] | None = None, timeout_s: float = 10
    ) -> tuple[int, bytes] | None:
        return (200, self.served if path == "/v1/models" else b"ok")

    def reconnect(self) -> None:
        self.reconnects += 1
        if not self.reachable:
            raise SshUnreachable("cannot reach bench@gpu01.example:22 over ssh: timed out")

    def close(self) -> None:
        pass


def finished_run(files: dict[str, str] | None = None) -> dict[str, str]:
    """The files of a run directory `bench run` finished (results.json, no INCOMPLETE)."""
    return {f"{RUN_DIR}/results.json": small_results().model_dump_json(), **(files or {})}


class FakePlacement:
    """A placement that records what the flow asked of it; the bundle is 'delivered' into
    LOCAL_DIR (complete unless told otherwise)."""

    directories_step = "host directories"

    def __init__(self, engine: FakeEngine, local_dir: Path, *, complete: bool = True) -> None:
        self.engine, self.local_dir, self.complete = engine, local_dir, complete
        self.prepared: list[tuple[str, str]] = []
        self.delivered: list[str] = []
        self.stops = 0
        self.after_delivery: Callable[[], None] | None = None

    def open_engine(self) -> EngineSide:
        return self.engine

    def prepare(self, home: str, scope: str) -> tuple[str, str]:
        self.prepared.append((home, scope))
        return f"{home}/.cache/vllm-bench/runs/{scope}", f"{home}/.config/vllm-bench/key"

    def ensure_image(self, out: TextIO) -> str:
        return IMAGE_ID

    def deliver(self, archive: str, outcome: HostOutcome, steps: Steps) -> None:
        self.delivered.append(archive)
        outcome.archive = self.local_dir.with_suffix(".tar.gz")
        outcome.local_dir, outcome.complete = self.local_dir, self.complete
        if self.after_delivery is not None:
            self.after_delivery()

    def stop_delivery(self) -> None:
        self.stops += 1

    def delivery_stopped(self) -> Interrupted | None:
        return None


def sweep_exec(
    engine: FakeEngine, shell: FakeShell, *, server: ServerContainer | None = None
) -> tuple[SweepExec, Reconnector, list[float], io.StringIO]:
    """A SweepExec over the fakes, with its reconnector (following SERVER's log), what it
    slept and what it printed."""
    slept: list[float] = []
    out = io.StringIO()
    reconnect = Reconnector(HOST.name, shell, engine, out=out, sleep=slept.append)
    reconnect.server = server
    sweep = SweepExec(
        engine, shell, reconnect,
        out=out, clock=lambda: 0.0, sleep=slept.append, stop=threading.Event(),
    )  # fmt: skip
    return sweep, reconnect, slept, out
