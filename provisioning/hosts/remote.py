"""Commands and file transfers on a GPU host over one verified SSH connection.

The module that opens SSH connections with fabric and paramiko (the Docker SDK opens its
own: provisioning.containers.docker_sdk); their exceptions become ours here:

    HostCheckFailed (bench.errors)
    ├── UnknownHostKey       the host's key is in no known_hosts file (fingerprint + command)
    ├── HostKeyChanged       the key differs from the known one: always stops
    ├── SshAuthFailed        no accepted key
    └── SshUnreachable       could not connect after the retries
    RunFailed (bench.errors)
    ├── RemoteCommandFailed  a command that had to succeed did not
    └── TransferFailed       a copy did not complete (or its checksum differs)

Host keys are checked against the known_hosts files `ssh -G` names for the host (hashed
entries and [host]:port names included) by provisioning.hosts.host_keys: an unknown key is
refused with its fingerprint and the exact line that would trust it, unless the caller
passed trust_new_host; a changed key is never accepted. What travels over channels of the
open connection (sshd's limits, HTTP to the host's loopback) is provisioning.hosts.ssh_channels'.

A connection that drops (sshd restarted, a NAT timeout, a killed session) is reopened
with backoff (provisioning.retry); idempotent commands are rerun. File copies
(provisioning.hosts.transfer) resume over this connection's SFTP session.
"""

from __future__ import annotations

import logging
import shlex
import socket
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import fabric
import paramiko
import structlog
from invoke.exceptions import CommandTimedOut

from bench.errors import HostCheckFailed, RunFailed
from provisioning.hosts import ssh_channels
from provisioning.hosts.host_keys import (
    HostKeyDecision,
    UnknownHostKey,
    fingerprint,
    key_changed,
)
from provisioning.hosts.inventory import ResolvedHost
from provisioning.hosts.shell import CommandResult
from provisioning.retry import RetryPolicy, retry_call

log = structlog.get_logger("provisioning.remote")

TransferProgress = Callable[[int, int], None]
_QUIET_LOGGER = "provisioning.remote.paramiko"


class SshAuthFailed(HostCheckFailed):
    pass


class SshUnreachable(HostCheckFailed):
    pass


class RemoteCommandFailed(RunFailed):
    pass


class TransferFailed(RunFailed):
    pass


# What a dropped or refused connection raises; callers catch these and ask is_transient.
TRANSIENT: tuple[type[BaseException], ...] = (OSError, EOFError, paramiko.SSHException)


def is_transient(exc: BaseException) -> bool:
    """A failure worth a reconnect and retry (not a refused key or a wrong host key)."""
    if isinstance(exc, paramiko.BadHostKeyException | paramiko.AuthenticationException):
        return False
    return isinstance(exc, TRANSIENT)


def _no_such_name(exc: BaseException) -> bool:
    """The resolver says the name does not exist (not a temporary failure: EAI_AGAIN)."""
    return isinstance(exc, socket.gaierror) and exc.errno in (socket.EAI_NONAME, socket.EAI_FAIL)


class Remote:
    """One GPU host over SSH. Use as a context manager; connects lazily."""

    def __init__(
        self,
        host: ResolvedHost,
        *,
        trust_new_host: bool = False,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.host = host
        self._trust = trust_new_host
        self.retry = retry or RetryPolicy()
        self.sleep = sleep
        self._conn: fabric.Connection | None = None
        self.host_key_fingerprint: str | None = None
        self.reconnects = 0

    def __enter__(self) -> Remote:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- connection -------------------------------------------------------------------------

    def _new_connection(self) -> fabric.Connection:
        h = self.host
        connect_kwargs: dict[str, Any] = {
            "allow_agent": True,
            "look_for_keys": not h.identity_files,
            "banner_timeout": h.connect_timeout_s,
            "auth_timeout": h.connect_timeout_s,
        }
        if h.identity_files:
            connect_kwargs["key_filename"] = [str(p) for p in h.identity_files]
        if h.proxy_command:
            connect_kwargs["sock"] = paramiko.ProxyCommand(h.proxy_command)
        # An empty SSHConfig: the host is already resolved by `ssh -G`; fabric must not
        # reinterpret ~/.ssh/config on top of it.
        config = fabric.Config(ssh_config=paramiko.SSHConfig())
        conn = fabric.Connection(
            h.hostname,
            user=h.user,
            port=h.port,
            config=config,
            connect_timeout=max(1, round(h.connect_timeout_s)),
            connect_kwargs=connect_kwargs,
        )
        client: paramiko.SSHClient = conn.client
        for path in h.known_hosts_files:
            if path.is_file():
                client.load_system_host_keys(str(path))
        policy = HostKeyDecision(h, self._trust)
        client.set_missing_host_key_policy(policy)
        return conn

    def _open_once(self) -> fabric.Connection:
        conn = self._new_connection()
        try:
            conn.open()
        except paramiko.BadHostKeyException as exc:
            conn.close()
            raise key_changed(self.host, exc) from None
        except paramiko.AuthenticationException as exc:
            conn.close()
            keys = ", ".join(str(p) for p in self.host.identity_files) or "default keys and agent"
            raise SshAuthFailed(
                f"ssh to {self.host.address} refused our keys ({keys}): {exc}",
                hint=f"check that `ssh {self.host.name} true` works",
            ) from None
        except UnknownHostKey:
            conn.close()
            raise
        transport = conn.client.get_transport()
        if transport is not None:
            # paramiko logs every refused forward at ERROR; the readiness loop expects
            # refusals until the server listens, and failures reach the user as our errors.
            transport.set_log_channel(_QUIET_LOGGER)
            logging.getLogger(_QUIET_LOGGER).setLevel(logging.CRITICAL)
            transport.set_keepalive(15)
            self.host_key_fingerprint = fingerprint(transport.get_remote_server_key())
        return conn

    def connect(self) -> None:
        """Open the connection, retrying transient failures with backoff."""
        if self._conn is not None and self._conn.is_connected:
            return
        self._conn = retry_call(
            self._connect_once,
            self.retry,
            transient=is_transient,
            event="ssh_connect_retry",
            give_up=self._unreachable,
            log_fields=lambda: {"host": self.host.name},
            sleep=self.sleep,
        )

    def _connect_once(self, attempt: int) -> fabric.Connection:
        try:
            conn = self._open_once()
        except socket.gaierror as exc:
            if _no_such_name(exc) and self.reconnects == 0:
                # A name that does not resolve will not after a backoff (16 s before).
                raise SshUnreachable(
                    f"{self.host.hostname} does not resolve: {exc}",
                    hint=f"check the host name (`ssh -G {self.host.name}` shows its HostName)",
                ) from None
            raise
        log.debug("ssh_connected", host=self.host.name, attempt=attempt + 1)
        return conn

    def _unreachable(self, last: Exception, attempts: int) -> SshUnreachable | None:
        """What connect raises once retrying stops on LAST (None: LAST itself)."""
        if not is_transient(last):
            return None
        return SshUnreachable(
            f"cannot reach {self.host.address} over ssh: {last}",
            hint=f"check that `ssh {self.host.name} true` works from this machine",
        )

    def reconnect(self) -> None:
        self.close()
        self.reconnects += 1
        self.connect()

    def close(self) -> None:
        """Close the connection; one that already died closes without a word.

        Closing a connection whose transport is gone still tries to send the SFTP
        channel's close message and raises (seen after a dropped link, mid-reconnect).
        """
        conn, self._conn = self._conn, None
        if conn is None:
            return
        try:
            conn.close()
        except (OSError, EOFError, paramiko.SSHException) as exc:
            log.debug("ssh_close_on_dead_link", host=self.host.name, error=str(exc) or repr(exc))

    @property
    def _c(self) -> fabric.Connection:
        self.connect()
        assert self._conn is not None
        return self._conn

    # -- commands ---------------------------------------------------------------------------

    def run(
        self,
        command: str,
        *,
        check: bool = False,
        timeout_s: float | None = 120.0,
        idempotent: bool = True,
    ) -> CommandResult:
        """Run COMMAND on the host (a POSIX shell line); never pass secrets in it.

        An idempotent command is rerun on a fresh connection when the connection drops.
        """
        policy = self.retry if idempotent else replace(self.retry, attempts=1)

        def once(_: int) -> Any:
            try:
                return self._c.run(
                    command, hide=True, warn=True, in_stream=False, timeout=timeout_s
                )
            except CommandTimedOut:
                raise RemoteCommandFailed(
                    f"{self.host.name}: `{command}` did not finish within {timeout_s:.0f} s"
                ) from None

        def dropped(exc: Exception, _: int) -> SshUnreachable | None:
            if not isinstance(exc, TRANSIENT):
                return None
            return SshUnreachable(f"ssh to {self.host.name} dropped during `{command}`: {exc}")

        res = retry_call(
            once,
            policy,
            transient=is_transient,
            event="ssh_command_retry",
            give_up=dropped,
            between=lambda _: self.reconnect(),
            log_fields=lambda: {"host": self.host.name},
            sleep=self.sleep,
        )
        result = CommandResult(command, int(res.exited), str(res.stdout), str(res.stderr))
        if check and not result.ok:
            detail = (result.stderr.strip() or result.stdout.strip()).splitlines()[-1:] or [""]
            raise RemoteCommandFailed(
                f"{self.host.name}: `{command}` exited with {result.exit_code}: {detail[0]}"
            )
        return result

    # -- files ------------------------------------------------------------------------------

    def sftp(self) -> paramiko.SFTPClient:
        """The connection's SFTP session (provisioning.hosts.transfer copies files over it)."""
        client: paramiko.SFTPClient = self._c.sftp()
        return client

    def remote_sha256(self, path: str) -> str:
        out = self.run(f"sha256sum -- {shlex.quote(path)}", check=True).stdout
        return out.split()[0]

    # -- what the host's sshd allows (preflight) --------------------------------------------

    def _transport(self) -> paramiko.Transport:
        transport: paramiko.Transport | None = self._c.client.get_transport()
        if transport is None:
            raise SshUnreachable(f"ssh to {self.host.name} is not connected")
        return transport

    def session_capacity(self, wanted: int) -> int:
        """How many sessions this connection may hold at once (sshd's MaxSessions), counted
        up to WANTED by opening them together."""
        return ssh_channels.session_capacity(self._transport(), wanted)

    def sftp_problem(self) -> str | None:
        """None when the host serves SFTP; else what went wrong opening it."""
        return ssh_channels.sftp_problem(self._c.client)

    def forwarding_problem(self) -> str | None:
        """None when sshd forwards TCP to the host's loopback (how the server's port is
        reached); a closed port answers "connect failed", a refusal "prohibited"."""
        return ssh_channels.forwarding_problem(self._transport())

    # -- HTTP to a port on the host's loopback (the server under test) --------------------

    def http_get(
        self, port: int, path: str, *, headers: dict[str, str] | None = None, timeout_s: float = 10
    ) -> tuple[int, bytes] | None:
        """GET http://127.0.0.1:PORT/PATH on the host through the SSH connection.

        Returns (status, body), or None when nothing answers (refused, reset, closed): the
        readiness loop's "not yet". Headers (an API key) travel inside the SSH channel.
        """
        transport = self._c.client.get_transport()
        if transport is None:
            raise SshUnreachable(f"ssh to {self.host.name} is not connected")
        try:
            channel = transport.open_channel(
                "direct-tcpip", ("127.0.0.1", port), ("127.0.0.1", 0), timeout=timeout_s
            )
        except paramiko.ChannelException as exc:
            if exc.code != paramiko.common.OPEN_FAILED_CONNECT_FAILED:
                raise HostCheckFailed(
                    f"{self.host.name}'s sshd refuses port forwarding to 127.0.0.1:{port}: "
                    f"{exc.text}",
                    hint="allow it for this account: AllowTcpForwarding local (sshd_config)",
                ) from None
            return None  # connection refused on the host
        except (OSError, EOFError, paramiko.SSHException):
            self.reconnect()
            return None
        try:
            channel.settimeout(timeout_s)
            return ssh_channels.http_over(channel, path, headers or {})
        except (OSError, EOFError):
            return None
        finally:
            channel.close()

    # -- small helpers over SFTP ------------------------------------------------------------

    def write_text(self, remote_path: str, text: str, mode: int = 0o644) -> None:
        with self.sftp().open(remote_path, "w") as fh:
            fh.write(text)
        self.sftp().chmod(remote_path, mode)

    def read_text(self, remote_path: str) -> str:
        with self.sftp().open(remote_path, "r") as fh:
            data: bytes = fh.read()
        return data.decode()
