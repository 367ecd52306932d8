"""The retries of provisioning.hosts.remote and provisioning.hosts.transfer, on scripted
connections: what is rerun, how often, with which waits, and the one-line errors when
retrying stops.

The real drops (sshd killed and restarted mid-copy) are tests/provisioning/hosts/test_remote.py's.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import paramiko
import pytest
from invoke.exceptions import CommandTimedOut
from structlog.testing import capture_logs

from provisioning.hosts import transfer
from provisioning.hosts.inventory import ResolvedHost
from provisioning.hosts.remote import Remote, RemoteCommandFailed, SshUnreachable, TransferFailed

HOST = ResolvedHost(name="gpu01", hostname="gpu01.example", user="bench", port=22)


class ScriptedConnection:
    """A fabric connection whose run() raises what SCRIPT says, then answers `ok`."""

    def __init__(self, script: list[BaseException]) -> None:
        self.script = script
        self.is_connected = True
        self.commands: list[str] = []

    def run(self, command: str, **_: Any) -> SimpleNamespace:
        self.commands.append(command)
        if self.script:
            raise self.script.pop(0)
        return SimpleNamespace(exited=0, stdout="ok\n", stderr="")

    def close(self) -> None:
        self.is_connected = False


def _remote(monkeypatch: pytest.MonkeyPatch, script: list[BaseException]) -> Remote:
    """A Remote whose every (re)connection is the same scripted connection; sleeps recorded."""
    slept: list[float] = []
    remote = Remote(HOST, sleep=slept.append)
    conn = ScriptedConnection(script)

    def reopen() -> ScriptedConnection:
        conn.is_connected = True
        return conn

    monkeypatch.setattr(remote, "_open_once", reopen)
    remote.slept = slept  # type: ignore[attr-defined]
    remote.conn = conn  # type: ignore[attr-defined]
    return remote


def test_an_idempotent_command_is_rerun_after_drops_on_a_fresh_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    remote = _remote(monkeypatch, [EOFError(), OSError("Socket is closed")])
    with capture_logs() as logs:
        res = remote.run("uptime")
    assert res.ok and res.stdout == "ok\n"
    assert remote.conn.commands == ["uptime"] * 3  # type: ignore[attr-defined]
    assert remote.slept == [0.5, 1.0]  # type: ignore[attr-defined]
    assert remote.reconnects == 2
    retries = [e for e in logs if e["event"] == "ssh_command_retry"]
    assert [(e["attempt"], e["host"]) for e in retries] == [(1, "gpu01"), (2, "gpu01")]


def test_a_command_that_keeps_dropping_is_one_line_after_the_policys_attempts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    remote = _remote(monkeypatch, [EOFError("gone")] * 10)
    with pytest.raises(SshUnreachable) as err:
        remote.run("uptime")
    assert err.value.one_line().startswith("ssh to gpu01 dropped during `uptime`: gone")
    assert len(remote.conn.commands) == remote.retry.attempts  # type: ignore[attr-defined]
    assert remote.slept == [0.5, 1.0, 2.0, 4.0]  # type: ignore[attr-defined]


def test_a_command_that_is_not_idempotent_is_never_rerun(monkeypatch: pytest.MonkeyPatch) -> None:
    remote = _remote(monkeypatch, [EOFError("gone")])
    with pytest.raises(SshUnreachable, match="dropped during `rm -rf x`"):
        remote.run("rm -rf x", idempotent=False)
    assert remote.conn.commands == ["rm -rf x"]  # type: ignore[attr-defined]
    assert remote.slept == [] and remote.reconnects == 0  # type: ignore[attr-defined]


def test_a_refused_key_mid_command_is_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    remote = _remote(monkeypatch, [paramiko.AuthenticationException("no")])
    with pytest.raises(SshUnreachable, match="dropped during `true`: no"):
        remote.run("true")
    assert remote.slept == [] and remote.reconnects == 0  # type: ignore[attr-defined]


def test_a_command_past_its_timeout_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    timed_out = CommandTimedOut(SimpleNamespace(command="sleep 9"), 5)  # type: ignore[arg-type]
    remote = _remote(monkeypatch, [timed_out])
    with pytest.raises(RemoteCommandFailed, match="did not finish within 5 s"):
        remote.run("sleep 9", timeout_s=5)
    assert remote.slept == []  # type: ignore[attr-defined]


class ScriptedSftp:
    """put() writes into `files`; open() for writing raises what FAIL_OPEN says first."""

    def __init__(self, fail_open: list[BaseException]) -> None:
        self.fail_open = fail_open
        self.files: dict[str, bytearray] = {}

    def stat(self, path: str) -> SimpleNamespace:
        if path not in self.files:
            raise FileNotFoundError(path)
        return SimpleNamespace(st_size=len(self.files[path]))

    def open(self, path: str, mode: str) -> Any:
        if self.fail_open:
            raise self.fail_open.pop(0)
        if "r" in mode:
            raise FileNotFoundError(path)
        if "w" in mode:
            self.files[path] = bytearray()
        target = self.files[path]

        class Handle:
            def __enter__(self) -> Handle:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

            def set_pipelined(self, on: bool) -> None:
                return None

            def write(self, data: bytes) -> None:
                target.extend(data)

        return Handle()


class ScriptedRemote:
    def __init__(self, sftp: ScriptedSftp) -> None:
        self.host = HOST
        self.retry = Remote(HOST).retry
        self.slept: list[float] = []
        self.reconnects = 0
        self._sftp = sftp

    def sftp(self) -> ScriptedSftp:
        return self._sftp

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)

    def reconnect(self) -> None:
        self.reconnects += 1

    def remote_sha256(self, path: str) -> str:
        import hashlib

        return hashlib.sha256(bytes(self._sftp.files[path])).hexdigest()


def test_put_resumes_after_drops_and_checks_the_copy(tmp_path: Path) -> None:
    local = tmp_path / "bundle.tar.gz"
    local.write_bytes(b"x" * 1000)
    remote = ScriptedRemote(ScriptedSftp([EOFError(), OSError("reset")]))
    with capture_logs() as logs:
        size = transfer.put(remote, local, "/run/bundle.tar.gz")  # type: ignore[arg-type]
    assert size == 1000 and remote._sftp.files["/run/bundle.tar.gz"] == b"x" * 1000
    assert remote.slept == [0.5, 1.0] and remote.reconnects == 2
    assert [e["event"] for e in logs] == ["transfer_resumed", "transfer_resumed"]
    assert logs[0]["log_level"] == "warning" and logs[0]["path"] == "/run/bundle.tar.gz"


def test_put_refused_for_permission_fails_at_once(tmp_path: Path) -> None:
    local = tmp_path / "f"
    local.write_bytes(b"data")
    remote = ScriptedRemote(ScriptedSftp([PermissionError("Permission denied")]))
    with pytest.raises(TransferFailed, match="to gpu01:/etc/f failed: Permission denied"):
        transfer.put(remote, local, "/etc/f")  # type: ignore[arg-type]
    assert remote.slept == [] and remote.reconnects == 0


def test_get_of_a_missing_file_fails_at_once_and_one_that_keeps_dropping_says_how_often(
    tmp_path: Path,
) -> None:
    remote = ScriptedRemote(ScriptedSftp([]))
    with pytest.raises(TransferFailed, match=r"^gpu01:/run/x does not exist$"):
        transfer.get(remote, "/run/x", tmp_path / "x")  # type: ignore[arg-type]
    assert remote.slept == []

    remote._sftp.files["/run/y"] = bytearray(b"y" * 10)
    remote._sftp.fail_open = [EOFError("gone")] * 10
    with pytest.raises(TransferFailed) as err:
        transfer.get(remote, "/run/y", tmp_path / "y")  # type: ignore[arg-type]
    assert err.value.one_line() == "copying gpu01:/run/y failed after 5 attempts: gone"
    assert remote.slept == [0.5, 1.0, 2.0, 4.0] and remote.reconnects == 4
