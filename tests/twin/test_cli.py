"""Bad input to the twin itself: one line naming the problem and a named exit code."""

from __future__ import annotations

import pathlib
import socket
import subprocess
import sys

import pytest

from bench.errors import Exit

pytestmark = pytest.mark.integration


def run_twin(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", "twin", "serve", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=30,
    )


def assert_one_line_error(proc: subprocess.CompletedProcess[str], needle: str) -> None:
    assert proc.returncode == Exit.USAGE, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("bench: error:")]
    assert len(errors) == 1 and needle in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_profile() -> None:
    assert_one_line_error(
        run_twin("--profile", "nosuch", "--port", "0"), "unknown twin profile 'nosuch'"
    )


def test_malformed_profile_file(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", ')
    assert_one_line_error(run_twin("--profile", str(bad), "--port", "0"), "not valid JSON")
    bad.write_text('{"name": "x", "max_model_len": -1}')
    assert_one_line_error(run_twin("--profile", str(bad), "--port", "0"), "malformed")


def test_port_in_use() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        assert_one_line_error(run_twin("--profile", "tiny", "--port", str(port)), "already in use")
