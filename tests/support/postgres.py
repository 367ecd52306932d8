"""A private PostgreSQL cluster for the history tests: Debian's server binaries (`make
postgresql` installs them), `initdb` into a temporary folder, `pg_ctl` on a free port of
127.0.0.1, stopped and removed afterwards. Stock settings, except that clients must give a
password (scram-sha-256), so the tests go through PGPASSWORD as a user's ingest would.
`stop` and `start` take a cluster down and up again in the middle of a test (a database
that goes away during a run).

As root the server runs as the `postgres` user (PostgreSQL refuses root). Missing binaries
are a failing test that says how to install them, never a skip.
"""

from __future__ import annotations

import contextlib
import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

USER = "bench"


@dataclass(frozen=True)
class Cluster:
    host: str
    port: int
    password: str
    control: tuple[str, ...] = ()  # pg_ctl -D DATA
    start_options: tuple[str, ...] = ()  # its -o and -l, as `cluster` started it

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://{USER}@{self.host}:{self.port}/{database}"


def binaries() -> Path:
    """The folder of initdb and pg_ctl (PATH first, then Debian's versioned folders)."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(folder) / "initdb").is_file() and (Path(folder) / "pg_ctl").is_file():
            return Path(folder)
    pytest.fail(
        "the history tests need PostgreSQL's initdb and pg_ctl, which this machine lacks "
        "(run `make postgresql`: apt-get install postgresql)",
        pytrace=False,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(argv: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


def _run(argv: list[str]) -> None:
    done = subprocess.run(
        _as_server_user(argv), capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        pytest.fail(f"{Path(argv[0]).name} failed: {(done.stderr or done.stdout)[-1500:]}")


@contextlib.contextmanager
def cluster() -> Iterator[Cluster]:
    bin_dir = binaries()
    root = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    password = secrets.token_hex(16)
    pwfile = root / "pwfile"
    pwfile.write_text(password + "\n")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sockets, "postgres")
        shutil.chown(pwfile, "postgres")
    port = _free_port()
    _run([str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "--pwfile", str(pwfile),
          "--auth", "scram-sha-256", "--no-sync"])  # fmt: skip
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {sockets}"
    log = root / "server.log"
    up = Cluster(
        "127.0.0.1", port, password,
        control=(str(bin_dir / "pg_ctl"), "-D", str(data)),
        start_options=("-o", options, "-l", str(log)),
    )  # fmt: skip
    start(up)
    try:
        yield up
    finally:
        if running(up):  # a test may have stopped it
            stop(up)
        shutil.rmtree(root, ignore_errors=True)


def start(c: Cluster) -> None:
    _run([*c.control, *c.start_options, "-w", "-t", "60", "start"])


def stop(c: Cluster) -> None:
    _run([*c.control, "-m", "fast", "-w", "stop"])


def running(c: Cluster) -> bool:
    """pg_ctl status: 0 while the server runs, 3 when it does not."""
    done = subprocess.run(
        _as_server_user([*c.control, "status"]), capture_output=True, timeout=60, check=False
    )
    return done.returncode == 0


def create_database(c: Cluster, name: str) -> str:
    """A new empty database in the cluster; its URL (no password: PGPASSWORD gives it)."""
    import psycopg

    with psycopg.connect(c.url(), password=c.password, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return c.url(name)
