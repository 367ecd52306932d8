"""What the code that drives a host needs of it, whichever way it is reached: a command's
result (CommandResult), commands for the checks (Probe), and commands, small files and
HTTP to its loopback for the host flow (Shell). provisioning.hosts.remote.Remote provides them
over SSH; provisioning.hosts.local.LocalShell on the machine the code runs on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from provisioning.hosts.inventory import ResolvedHost
from provisioning.retry import RetryPolicy


@dataclass(frozen=True)
class CommandResult:
    command: str
    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class Probe(Protocol):
    """What the checks need of a host: run a command (Remote, or a scripted fake in tests)."""

    def run(self, command: str) -> CommandResult: ...


class Shell(Protocol):
    """What the host flow (provisioning.flow.host_run) needs of a host: commands, small
    files, HTTP to its loopback. Remote does it over SSH; provisioning.hosts.local.LocalShell
    on the machine the code runs on (a Slurm node running its own part of a job)."""

    host: ResolvedHost
    retry: RetryPolicy

    def run(
        self,
        command: str,
        *,
        check: bool = False,
        timeout_s: float | None = 120.0,
        idempotent: bool = True,
    ) -> CommandResult: ...

    def write_text(self, remote_path: str, text: str, mode: int = 0o644) -> None: ...

    def read_text(self, remote_path: str) -> str: ...

    def http_get(
        self, port: int, path: str, *, headers: dict[str, str] | None = None, timeout_s: float = 10
    ) -> tuple[int, bytes] | None: ...

    def reconnect(self) -> None: ...

    def close(self) -> None: ...
