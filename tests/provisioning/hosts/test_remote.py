"""The SSH side against a real OpenSSH sshd: host keys, commands, transfers that survive drops."""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
from pathlib import Path

import pytest

from provisioning.hosts import inventory, transfer
from provisioning.hosts.host_keys import HostKeyChanged, UnknownHostKey
from provisioning.hosts.remote import Remote, TransferFailed
from provisioning.retry import RetryPolicy
from tests.provisioning.conftest import SshTestHost, start_sshd, stop_sshd

pytestmark = [pytest.mark.integration, pytest.mark.ssh]

FAST = RetryPolicy(attempts=5, first_backoff_s=0.05, max_backoff_s=0.5)


def _host(ssh_host: SshTestHost) -> inventory.ResolvedHost:
    return inventory.resolve(ssh_host.alias)


def _on_host(ssh_host: SshTestHost, name: str) -> Path:
    """A file on the "GPU host" where its (non-root) account may read and write: its HOME."""
    return (ssh_host.dir / "remote-home").resolve() / name


def test_alias_resolves_from_ssh_config_in_home(ssh_host: SshTestHost) -> None:
    h = _host(ssh_host)
    assert (h.hostname, h.port, h.user) == ("127.0.0.1", ssh_host.port, ssh_host.user)
    assert h.identity_files == (ssh_host.dir / "client_ed25519",)
    assert ssh_host.known_hosts in h.known_hosts_files
    assert h.known_hosts_name == f"[127.0.0.1]:{ssh_host.port}"


def test_known_host_connects_and_runs_commands(ssh_host: SshTestHost) -> None:
    with Remote(_host(ssh_host), retry=FAST) as r:
        res = r.run("echo hello; echo oops >&2; exit 3")
        assert (res.exit_code, res.stdout, res.stderr) == (3, "hello\n", "oops\n")
        assert r.host_key_fingerprint == ssh_host.host_fingerprint()


def test_unknown_host_key_is_refused_with_fingerprint_and_trust_command(
    ssh_host: SshTestHost,
) -> None:
    ssh_host.known_hosts.unlink()
    with pytest.raises(UnknownHostKey) as info:
        Remote(_host(ssh_host), retry=FAST).connect()
    line = info.value.one_line()
    assert ssh_host.host_fingerprint() in line
    assert "--trust-new-host" in line
    assert ssh_host.host_public_key() in line  # the exact known_hosts line to append
    assert not ssh_host.known_hosts.exists()  # nothing was written


def test_the_printed_trust_command_makes_the_host_known(ssh_host: SshTestHost) -> None:
    ssh_host.known_hosts.unlink()
    with pytest.raises(UnknownHostKey) as info:
        Remote(_host(ssh_host), retry=FAST).connect()
    command = info.value.hint.split("trust it with: ", 1)[1].split(" (or rerun")[0]  # type: ignore[union-attr]
    subprocess.run(["sh", "-c", command], check=True, env=os.environ)
    # stock OpenSSH now accepts the host with strict checking, and so do we
    ok = subprocess.run(
        ["ssh", "-F", str(ssh_host.ssh_config), "-o", "StrictHostKeyChecking=yes",
         "-o", f"UserKnownHostsFile={ssh_host.known_hosts}", "-o", "BatchMode=yes",
         ssh_host.alias, "true"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    with Remote(_host(ssh_host), retry=FAST) as r:
        assert r.run("true").ok


def test_trust_new_host_records_the_key(ssh_host: SshTestHost) -> None:
    ssh_host.known_hosts.unlink()
    with Remote(_host(ssh_host), trust_new_host=True, retry=FAST) as r:
        assert r.run("true").ok
    assert ssh_host.host_public_key() in ssh_host.known_hosts.read_text()
    with Remote(_host(ssh_host), retry=FAST) as r:  # known from now on
        assert r.run("true").ok


def test_changed_host_key_always_stops(ssh_host: SshTestHost, tmp_path: Path) -> None:
    other = tmp_path / "other_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    forged = other.with_suffix(".pub").read_text().split()
    ssh_host.known_hosts.write_text(f"[127.0.0.1]:{ssh_host.port} {forged[0]} {forged[1]}\n")
    for trust in (False, True):
        with pytest.raises(HostKeyChanged) as info:
            Remote(_host(ssh_host), trust_new_host=trust, retry=FAST).connect()
        assert "CHANGED" in info.value.one_line()
        assert ssh_host.host_fingerprint() in info.value.one_line()
    assert ssh_host.host_public_key() not in ssh_host.known_hosts.read_text()


def test_hashed_known_hosts_entries_are_honoured(ssh_host: SshTestHost) -> None:
    subprocess.run(["ssh-keygen", "-H", "-f", str(ssh_host.known_hosts)], check=True,
                   capture_output=True)  # fmt: skip
    assert "[127.0.0.1]" not in ssh_host.known_hosts.read_text()
    with Remote(_host(ssh_host), retry=FAST) as r:
        assert r.run("true").ok


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pull_back_survives_the_connection_being_killed_mid_transfer(
    ssh_host: SshTestHost, tmp_path: Path
) -> None:
    src = _on_host(ssh_host, "bundle.bin")
    src.write_bytes(os.urandom(48 << 20))
    dropped: list[int] = []

    def progress(done: int, total: int) -> None:
        if not dropped and done >= total // 3:
            dropped.append(done)
            assert ssh_host.drop_connections() >= 1

    with Remote(_host(ssh_host), retry=FAST) as r:
        size = transfer.get(r, str(src), tmp_path / "pulled" / "bundle.bin", progress=progress)
        assert r.reconnects >= 1
    assert dropped, "the transfer never reached the point where the connection is cut"
    assert size == src.stat().st_size
    assert _sha256(tmp_path / "pulled" / "bundle.bin") == _sha256(src)
    assert not (tmp_path / "pulled" / "bundle.bin.part").exists()


def test_pull_back_survives_sshd_restarting(ssh_host: SshTestHost, tmp_path: Path) -> None:
    src = _on_host(ssh_host, "results.json")
    src.write_bytes(os.urandom(24 << 20))
    want = _sha256(src)  # the host's files go with its account when the server stops
    restarted: list[SshTestHost] = []

    def progress(done: int, total: int) -> None:
        if not restarted and done >= total // 2:
            stop_sshd(ssh_host, forget=False)
            restarted.append(start_sshd(ssh_host.dir, ssh_host.port))

    try:
        with Remote(_host(ssh_host), retry=FAST) as r:
            transfer.get(r, str(src), tmp_path / "back.json", progress=progress)
            assert r.reconnects >= 1
    finally:
        for h in restarted:
            stop_sshd(h)
    assert restarted
    assert _sha256(tmp_path / "back.json") == want


def test_a_pull_back_stopped_on_purpose_leaves_only_a_part_file(
    ssh_host: SshTestHost, tmp_path: Path
) -> None:
    src = _on_host(ssh_host, "bundle.tar.gz")
    src.write_bytes(os.urandom(48 << 20))
    stop = threading.Event()
    local = tmp_path / "pulled" / "bundle.tar.gz"

    def progress(done: int, total: int) -> None:
        if done >= total // 4:
            stop.set()  # Ctrl-C: the flow sets this from the main thread

    with Remote(_host(ssh_host), retry=FAST) as r:
        with pytest.raises(transfer.TransferStopped) as caught:
            transfer.get(r, str(src), local, progress=progress, stop=stop)
        stopped = caught.value
        assert not local.exists()  # nothing under the bundle's name
        part = local.with_name("bundle.tar.gz.part")
        assert stopped.part == part and part.stat().st_size == stopped.done
        assert src.stat().st_size // 4 <= stopped.done < stopped.size == src.stat().st_size
        assert part.read_bytes() == src.read_bytes()[: stopped.done]  # a true prefix
        r.close()  # what the flow does at the end; then a new copy starts over and completes
        assert transfer.get(r, str(src), local) == src.stat().st_size
    assert _sha256(local) == _sha256(src) and not part.exists()


def test_put_then_get_round_trip_and_missing_file_is_one_line(
    ssh_host: SshTestHost, tmp_path: Path
) -> None:
    src = tmp_path / "a.txt"
    src.write_text("x" * 1000)
    with Remote(_host(ssh_host), retry=FAST) as r:
        transfer.put(r, src, str(_on_host(ssh_host, "remote-copy.txt")))
        assert _on_host(ssh_host, "remote-copy.txt").read_text() == "x" * 1000
        with pytest.raises(TransferFailed, match="does not exist"):
            transfer.get(r, str(_on_host(ssh_host, "nope")), tmp_path / "nope-local")


def test_reconnect_after_the_link_died_under_an_open_sftp_channel(
    ssh_host: SshTestHost, tmp_path: Path
) -> None:
    """Closing a connection whose socket is gone must not raise (CI saw paramiko's
    "Socket is closed" escape from `reconnect` as a traceback mid-sweep)."""
    src = tmp_path / "a.txt"
    src.write_text("x")
    with Remote(_host(ssh_host), retry=FAST) as r:
        transfer.put(r, src, str(_on_host(ssh_host, "before-drop.txt")))  # SFTP channel open
        assert r._conn is not None
        r._conn.transport.sock.close()  # the link dies under the transport, as in a drop
        r.reconnect()
        assert r.run("echo back", check=True).stdout.strip() == "back"
        assert r.reconnects == 1
