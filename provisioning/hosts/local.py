"""The machine this code runs on, as the host flow sees a host (provisioning.hosts.shell.Shell).

A Slurm node runs its own part of a job (provisioning.slurm.node): the same flow as over SSH
(provisioning.flow.host_run.HostRun), but its commands, files and the server's port are local.
Commands go to /bin/sh as Remote's go to the login shell over SSH; never put a secret in
one. There is no connection to lose, so reconnect() does nothing and nothing is retried.
"""

from __future__ import annotations

import dataclasses
import http.client
import os
import pwd
import subprocess
from pathlib import Path

from provisioning.hosts.inventory import ResolvedHost
from provisioning.hosts.remote import RemoteCommandFailed
from provisioning.hosts.shell import CommandResult
from provisioning.retry import RetryPolicy


class LocalShell:
    """This machine under the name HOST.name (a node's name in the job)."""

    def __init__(self, host: ResolvedHost, *, environment: dict[str, str] | None = None) -> None:
        """ENVIRONMENT: the commands' whole environment (default: this process's)."""
        self.host = host
        self.retry = RetryPolicy(attempts=1)
        self._environment = environment

    def run(
        self,
        command: str,
        *,
        check: bool = False,
        timeout_s: float | None = 120.0,
        idempotent: bool = True,
    ) -> CommandResult:
        try:
            proc = subprocess.run(
                ["/bin/sh", "-c", command],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
                stdin=subprocess.DEVNULL,
                env=self._environment,
            )
        except subprocess.TimeoutExpired:
            raise RemoteCommandFailed(
                f"{self.host.name}: `{command}` did not finish within {timeout_s:.0f} s"
            ) from None
        result = CommandResult(command, proc.returncode, proc.stdout, proc.stderr)
        if check and not result.ok:
            detail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or [""]
            raise RemoteCommandFailed(
                f"{self.host.name}: `{command}` exited with {result.exit_code}: {detail[0]}"
            )
        return result

    def write_text(self, remote_path: str, text: str, mode: int = 0o644) -> None:
        path = Path(remote_path)
        path.write_text(text)
        os.chmod(path, mode)

    def read_text(self, remote_path: str) -> str:
        return Path(remote_path).read_text()

    def http_get(
        self, port: int, path: str, *, headers: dict[str, str] | None = None, timeout_s: float = 10
    ) -> tuple[int, bytes] | None:
        """GET http://127.0.0.1:PORT/PATH; None when nothing answers (the readiness loop's
        "not yet"), as Remote.http_get."""
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout_s)
        try:
            conn.request("GET", path, headers={"Connection": "close", **(headers or {})})
            response = conn.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            return None
        finally:
            conn.close()

    def reconnect(self) -> None:
        """Nothing to reconnect: commands are local."""

    def close(self) -> None:
        """Nothing to close."""


def local_host(name: str, model_cache: str | None = None) -> ResolvedHost:
    """This machine as a ResolvedHost named NAME (no SSH: address fields are informative only)."""
    host = ResolvedHost(
        name=name, hostname="localhost", user=pwd.getpwuid(os.getuid()).pw_name, port=0
    )
    return dataclasses.replace(host, model_cache=model_cache) if model_cache else host
