"""Host resolution on scripted `ssh -G` output and inventories: no ssh, no sockets."""

from __future__ import annotations

import os
import pwd
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest

from bench.errors import UsageError
from provisioning.hosts import inventory

SSH_G = """\
hostname 10.1.2.3
user bench
port 2222
identityfile ~/.ssh/gpu01_ed25519
identityfile ~/.ssh/id_rsa
userknownhostsfile {pw_home}/.ssh/known_hosts {pw_home}/.ssh/known_hosts2
globalknownhostsfile /etc/ssh/ssh_known_hosts
proxyjump bastion
connecttimeout 7
"""


class FakeSsh:
    def __init__(self, stdout: str, returncode: int = 0, stderr: str = "") -> None:
        self.stdout, self.returncode, self.stderr = stdout, returncode, stderr
        self.argv: list[str] = []

    def __call__(self, argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        self.argv = list(argv)
        return subprocess.CompletedProcess(argv, self.returncode, self.stdout, self.stderr)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "gpu01_ed25519").write_text("key")
    return tmp_path


def test_resolution_follows_ssh_and_rebases_home(home: Path) -> None:
    pw_home = pwd.getpwuid(os.getuid()).pw_dir
    fake = FakeSsh(SSH_G.format(pw_home=pw_home))
    h = inventory.resolve("gpu01", run=fake)
    assert fake.argv[-2:] == ["--", "gpu01"]
    assert (h.hostname, h.user, h.port) == ("10.1.2.3", "bench", 2222)
    # only keys that exist are offered; ~ is HOME, not the password database's home
    assert h.identity_files == (home / ".ssh" / "gpu01_ed25519",)
    assert h.known_hosts_files[:2] == (home / ".ssh/known_hosts", home / ".ssh/known_hosts2")
    assert h.known_hosts_files[2] == Path("/etc/ssh/ssh_known_hosts")
    assert h.proxy_command == "ssh -W [10.1.2.3]:2222 bastion"
    assert h.connect_timeout_s == 7.0
    assert h.known_hosts_name == "[10.1.2.3]:2222"


def test_inventory_wins_over_ssh_config(home: Path) -> None:
    inv = home / "hosts.toml"
    inv.write_text(
        '[hosts.gpu01]\nuser = "root"\nport = 22\nkey = "~/k"\nprofile = "twin"\n'
        'model_cache = "/data/hf"\nhostname = "gpu01.lab"\n'
    )
    fake = FakeSsh("hostname gpu01.lab\nuser bench\nport 2222\n")
    h = inventory.resolve("gpu01", inventory=inventory.load_inventory(inv), run=fake)
    assert fake.argv[-1] == "gpu01.lab"
    assert (h.user, h.port, h.identity_files) == ("root", 22, (home / "k",))
    assert (h.profile, h.model_cache, h.known_hosts_name) == ("twin", "/data/hf", "gpu01.lab")


def test_bad_inventory_is_one_line_naming_the_field(home: Path) -> None:
    inv = home / "hosts.toml"
    inv.write_text("[hosts.gpu01]\nprot = 22\n")
    with pytest.raises(UsageError) as info:
        inventory.load_inventory(inv)
    assert "hosts.gpu01.prot" in info.value.one_line()
    inv.write_text("[hosts.gpu01\n")
    with pytest.raises(UsageError, match="not valid TOML"):
        inventory.load_inventory(inv)
    assert inventory.load_inventory(home / "absent.toml").hosts == {}


def test_ssh_refusing_the_name_is_a_usage_error(home: Path) -> None:
    fake = FakeSsh("", returncode=255, stderr="/x/config line 3: Bad configuration option: Foo")
    with pytest.raises(UsageError, match="Bad configuration option"):
        inventory.resolve("gpu01", run=fake)
    with pytest.raises(UsageError, match="not valid"):
        inventory.resolve("-oProxyCommand=evil", run=fake)


def test_host_lists() -> None:
    assert inventory.parse_host_list("gpu01, gpu02") == ["gpu01", "gpu02"]
    with pytest.raises(UsageError, match="listed twice: gpu01"):
        inventory.parse_host_list("gpu01,gpu01")
    with pytest.raises(UsageError):
        inventory.parse_host_list(" , ")


@pytest.mark.parametrize("name", ["a..b", ".a", "a-.b", "x" * 64, "a b.c"[:1] + "..", "é..x"])
def test_a_host_name_the_resolver_cannot_take_is_one_line_usage(home: Path, name: str) -> None:
    # `a..b` made getaddrinfo raise UnicodeError: a traceback with exit 1 (issue 15).
    fake = FakeSsh(f"hostname {name}\nuser u\nport 22\n")
    with pytest.raises(UsageError) as err:
        inventory.resolve(name, run=fake)
    assert err.value.one_line().startswith(f"host {name!r} is not a valid host name")
    assert inventory.valid_hostname("gpu-01.example.com.") and inventory.valid_hostname("::1")


def test_a_name_that_does_not_resolve_is_one_line_at_once_not_after_backoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import socket

    from provisioning.hosts.remote import Remote, SshUnreachable

    slept: list[float] = []
    host = inventory.ResolvedHost(
        name="gpu-nowhere", hostname="gpu-nowhere.invalid", user="u", port=22
    )
    remote = Remote(host, sleep=slept.append)

    def nxdomain() -> None:
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(remote, "_open_once", nxdomain)
    with pytest.raises(SshUnreachable) as err:
        remote.connect()
    assert slept == []  # it retried for 16 s before
    assert err.value.one_line().startswith("gpu-nowhere.invalid does not resolve: ")

    def again() -> None:  # a temporary resolver failure is still retried
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(remote, "_open_once", again)
    with pytest.raises(SshUnreachable, match="cannot reach"):
        remote.connect()
    # backoff between the attempts (none after the last: it only delayed the error)
    assert slept == [remote.retry.backoff_s(i) for i in range(remote.retry.attempts - 1)]
    assert slept == [0.5, 1.0, 2.0, 4.0]
