"""A real OpenSSH sshd on 127.0.0.1 standing for the GPU host, and a temporary HOME.

`ssh_host` starts tests/setup/sshd.sh (which installs openssh-server when missing) on a
free port with throwaway keys under tmp_path, Debian's stock sshd_config and a non-root
account in the docker group (the script's header says what else differs and why), points
HOME at tmp_path/home (so nothing reads or writes the real ~/.ssh) and stops the server
afterwards. A server that does not
come up is a failing test with sshd's own output, never a skip.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench.host import procs
from tests.support.procs import free_port

ROOT = Path(__file__).resolve().parents[2]
SSHD_SH = ROOT / "tests" / "setup" / "sshd.sh"
ALIAS = "bench-test-host"


def _children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


@dataclass
class SshTestHost:
    """DIR/remote-home is the account's HOME on the "GPU host", DIR/bin first on its PATH."""

    dir: Path
    port: int
    alias: str
    home: Path
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def bin(self) -> Path:
        return self.dir / "bin"

    @property
    def user(self) -> str:
        return (self.dir / "user").read_text().strip()

    @property
    def known_hosts(self) -> Path:
        return self.home / ".ssh" / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.home / ".ssh" / "config"

    def host_public_key(self) -> str:
        return (self.dir / "host_ed25519.pub").read_text().split()[1]

    def host_fingerprint(self) -> str:
        out = subprocess.run(
            ["ssh-keygen", "-lf", str(self.dir / "host_ed25519.pub")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.split()[1]

    def drop_connections(self) -> int:
        """Kill the sshd processes serving current connections (not the listener): each
        connection's monitor and, below it, the unprivileged process of a non-root login,
        which holds the socket too."""
        victims, frontier = [], _children(self.proc.pid)
        while frontier:
            victims += frontier
            frontier = [c for pid in frontier for c in _children(pid)]
        killed = 0
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass  # it ended between the listing and the kill (a session closing)
        return killed

    def stand_in(self, name: str, script: str) -> Path:
        path = self.bin / name
        path.write_text("#!/bin/sh\n" + script)
        path.chmod(0o755)
        return path


def _wait_listening(host: SshTestHost, timeout_s: float = 600.0) -> None:
    # The first start may install openssh-server with apt-get, hence the long deadline.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if host.proc.poll() is not None:
            pytest.fail(f"sshd exited with {host.proc.returncode}: {host.log.read_text()[-2000:]}")
        if "Server listening" in host.log.read_text(errors="replace"):
            return
        time.sleep(0.05)
    pytest.fail(
        f"sshd did not start listening in {timeout_s:.0f} s: {host.log.read_text()[-2000:]}"
    )


def start_sshd(
    base: Path, port: int | None = None, variant: dict[str, str] | None = None
) -> SshTestHost:
    """VARIANT: tests/setup/sshd.sh's SSHD_* settings (another user, options, no SFTP)."""
    base.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    log = base / "sshd.log"
    with log.open("ab") as fh:
        proc = subprocess.Popen(
            [str(SSHD_SH), str(base), str(port)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env={**os.environ, "SSHD_ALIAS": ALIAS, **(variant or {})},
        )
    host = SshTestHost(dir=base, port=port, alias=ALIAS, home=base / "home", proc=proc, log=log)
    _wait_listening(host)
    return host


def stop_sshd(host: SshTestHost, *, forget: bool = True) -> None:
    """Stop the server; FORGET (default) also removes its account and that account's home
    (a restart on the same DIR and port keeps them with forget=False)."""
    leftovers = _children(host.proc.pid)
    procs.stop(host.proc, grace_s=10)
    for pid in leftovers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    if not forget:
        return
    # The throwaway account and its home (tests/setup/sshd.sh made them for this port).
    user = (host.dir / "user").read_text().strip() if (host.dir / "user").is_file() else ""
    if user.startswith("bench-"):
        # userdel refuses an account that still runs a process (a session's shell, a
        # `docker system dial-stdio` the server has not reaped yet): end them first, and
        # give the kernel a moment to reap them.
        subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True, check=False)
        deadline = time.monotonic() + 5.0
        while subprocess.run(["userdel", user], capture_output=True, check=False).returncode:
            if (
                time.monotonic() > deadline
                or subprocess.run(["id", user], capture_output=True, check=False).returncode
            ):
                break
            time.sleep(0.1)
    subprocess.run(
        ["rm", "-rf", "--one-file-system", f"/var/tmp/bench-ssh/{host.port}"], check=False
    )


@pytest.fixture
def ssh_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SshTestHost]:
    host = start_sshd(tmp_path / "sshd")
    monkeypatch.setenv("HOME", str(host.home))
    try:
        yield host
    finally:
        stop_sshd(host)


# One tag per checkout: the engine is shared, and another tree's build must not replace ours.
BENCH_IMAGE = "vllm-bench-orch-test:" + hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]


@pytest.fixture(scope="session")
def bench_image() -> str:
    """The Dockerfile's `bench` target built from this tree (cached layers make reruns fast)."""
    for argv in (
        [str(ROOT / "tests" / "setup" / "docker.sh")],
        [str(ROOT / "docker" / "build.sh"), "bench", BENCH_IMAGE],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
        if proc.returncode != 0:
            pytest.fail(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return BENCH_IMAGE


@pytest.fixture(scope="session")
def python_base() -> str:
    """The offline Python base of the `bench` stage (no registry here): its local tag."""
    for argv in (
        [str(ROOT / "tests" / "setup" / "docker.sh")],
        [str(ROOT / "tests" / "setup" / "base_image.sh")],
    ):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=1800)
        if proc.returncode != 0:
            pytest.fail(f"{argv[0]} failed ({proc.returncode}): {proc.stderr[-3000:]}")
    return proc.stdout.strip()
