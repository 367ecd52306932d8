"""The sweep's execution: `bench run` inside the server container, its output on the local
terminal, through a dropped SSH connection and a Ctrl-C.

After a drop the sweep goes on inside the container without us: the connections are
reopened (provisioning.flow.reconnect) and the exec awaited however long the sweep takes; the
engine then reports the exec as failed whatever `bench run` returned, so the run directory
on the host says whether it finished. A Ctrl-C sends `bench run` SIGINT (it saves every
finished cell and exits), a second one SIGKILL.
"""

from __future__ import annotations

import shlex
import threading
from collections.abc import Callable
from typing import TextIO

import structlog

from bench import run_files
from bench.errors import BenchError, RunFailed
from provisioning.containers.docker_sdk import EngineUnreachable
from provisioning.containers.engine_side import EngineSide
from provisioning.flow.options import Options
from provisioning.flow.reconnect import Reconnector
from provisioning.flow.seams import RUN_IN_CONTAINER, ServerContainer, Workspace
from provisioning.hosts.remote import TRANSIENT, SshUnreachable
from provisioning.hosts.shell import Shell
from provisioning.image.ensure import CONTAINER_HOME

log = structlog.get_logger("provisioning.flow")

INTERRUPT_GRACE_S = 120.0
POLL_AFTER_DROP_S = 2.0  # how often a sweep that lost its output stream is checked on
_LOG_WRITE_ERRORS: tuple[type[BaseException], ...] = (*TRANSIENT, SshUnreachable)


class SweepExec:
    """`bench run` in the server container of one host; run() once, signal() on Ctrl-C."""

    def __init__(
        self,
        engine: EngineSide,
        shell: Shell,
        reconnect: Reconnector,
        *,
        out: TextIO,
        clock: Callable[[], float],
        sleep: Callable[[float], None],
        stop: threading.Event,
    ) -> None:
        self.engine, self.shell, self.reconnect = engine, shell, reconnect
        self.out, self.clock, self.sleep, self.stop = out, clock, sleep, stop
        self.exec_id: str | None = None

    @property
    def host(self) -> str:
        return self.shell.host.name

    def command(self, opts: Options, server: ServerContainer, where: Workspace) -> tuple[str, ...]:
        """`bench run`'s command line; with the start-up log so far when it could be written
        into the run directory (its "KV cache size: N tokens" line is a capacity source after
        /metrics' label; sealing rewrites the file with the whole log). Not worth failing
        the run over: without it the capacity has other sources."""
        command: tuple[str, ...] = (
            "bench", "run", "--url", f"http://127.0.0.1:{opts.profile.port}",
            "--out", RUN_IN_CONTAINER, *opts.bench_args,
        )  # fmt: skip
        if opts.workload is not None:
            command += opts.workload.run_args()
        if opts.live is not None:
            command += opts.live.run_args()
        if opts.traces is not None:
            command += opts.traces.run_args()
        if server.log:
            try:
                self.shell.write_text(f"{where.run_dir}/server.log", "\n".join(server.log) + "\n")
                command += ("--server-log", f"{RUN_IN_CONTAINER}/server.log")
            except _LOG_WRITE_ERRORS as exc:
                log.warning("server_log_not_passed", host=self.host, error=str(exc))
        return command

    def run(
        self, command: tuple[str, ...], server: ServerContainer, where: Workspace, opts: Options
    ) -> RunFailed | None:
        """Run COMMAND in the server container until it ends; the failure, if any (an exit
        of 1 is a verdict of "no": the bundle is still good). None too when stopped."""
        env = {"HOME": CONTAINER_HOME}
        if opts.secrets.api_key is not None:
            env["BENCH_API_KEY"] = opts.secrets.api_key.get_secret_value()
        if opts.live is not None and opts.live.otel_url is not None:
            env.update(opts.secrets.otlp_environment())  # the collector's credentials
        exec_id, stream = self.engine.exec_stream(
            server.cid, command, environment=env, user=where.uid_gid
        )
        self.exec_id = exec_id
        try:
            for chunk in stream:
                self.out.write(chunk.decode(errors="replace"))
                self.out.flush()
        except EngineUnreachable as exc:
            self.reconnect(exc)
        code = self._await_exec(exec_id)
        self.exec_id = None
        if self.stop.is_set():
            return None
        if self.reconnect.dropped:
            # The engine marks an exec whose output stream broke as failed (exit 126) whatever
            # `bench run` returned; the run directory on the host says whether it finished.
            if self._run_finished_on_host(where.run_dir):
                return None
            return RunFailed(
                f"`bench run` on {self.host} stopped before finishing after the ssh "
                f"connection dropped (its run directory is marked {run_files.INCOMPLETE})"
            )
        if code not in (0, 1):  # 1 = a verdict of "no"; the bundle is still good
            return RunFailed(f"`bench run` on {self.host} exited with {code}")
        return None

    def signal(self, *, hard: bool) -> bool:
        """SIGINT (SIGKILL when HARD) to `bench run` if it runs; False when no exec was
        started (nothing to signal, nothing to escalate later)."""
        exec_id = self.exec_id
        if exec_id is None:
            return False
        try:
            running, _, pid = self.engine.exec_result(exec_id)
            if running and pid:
                self.shell.run(f"kill -{'KILL' if hard else 'INT'} {pid}", idempotent=False)
        except BenchError as exc:
            log.warning("interrupt_failed", host=self.host, error=exc.one_line())
        return True

    def _run_finished_on_host(self, run_dir: str) -> bool:
        q = shlex.quote(run_dir)
        done = f"test -f {q}/{run_files.RESULTS} && test ! -e {q}/{run_files.INCOMPLETE}"
        return self.shell.run(done).ok

    def _await_exec(self, exec_id: str) -> int | None:
        """The exit code of `bench run` once it has finished.

        After its output stream ended it should end too (within INTERRUPT_GRACE_S). After a
        dropped connection it goes on inside the container without us: wait for it however
        long the sweep takes (unless stopped: then the grace applies again).
        """
        deadline = self.clock() + INTERRUPT_GRACE_S
        while True:
            running, code, _ = self._exec_state(exec_id)
            if not running:
                return code
            if self.reconnect.dropped and not self.stop.is_set():
                deadline = self.clock() + INTERRUPT_GRACE_S
            elif self.clock() > deadline:
                return code
            self.sleep(POLL_AFTER_DROP_S if self.reconnect.dropped else 0.2)

    def _exec_state(self, exec_id: str) -> tuple[bool, int | None, int]:
        try:
            return self.engine.exec_result(exec_id)
        except EngineUnreachable as exc:
            self.reconnect(exc)
            return self.engine.exec_result(exec_id)
