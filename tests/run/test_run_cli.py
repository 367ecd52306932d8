"""`bench run` on bad input and unreachable servers: one line, a named exit code."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.errors import Exit
from bench.results import CellResult
from bench.run.cell import CellRun
from bench.run.progress import SweepProgress
from bench.stream.records import RequestRecord
from tests.support.procs import free_port


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bench", "run", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.integration
def test_a_bad_context_is_a_usage_error_in_one_line() -> None:
    got = _run("--contexts", "eight")
    assert got.returncode == Exit.USAGE
    assert got.stderr.strip() == (
        "bench: error: 'eight' is not a context size (write e.g. 8K or 8192)"
    )


@pytest.mark.integration
def test_an_unreachable_server_is_a_server_error_and_the_key_is_never_echoed(
    tmp_path: Path,
) -> None:
    secret = "sk-never-shown-1234"
    got = _run(
        "--url",
        f"http://127.0.0.1:{free_port()}",
        "--out",
        str(tmp_path / "r"),
        env={"BENCH_API_KEY": secret},
    )
    assert got.returncode == Exit.SERVER
    assert got.stderr.startswith("bench: error: cannot reach http://127.0.0.1:")
    assert "Traceback" not in got.stderr
    assert secret not in got.stderr + got.stdout


@pytest.mark.integration
def test_resume_of_a_directory_without_a_run_is_a_usage_error(tmp_path: Path) -> None:
    got = _run("--resume", str(tmp_path))
    assert got.returncode == Exit.USAGE
    assert "has no results.json to resume" in got.stderr
    got = _run("--resume", str(tmp_path), "--duration", "5", "--contexts", "8K")
    assert got.returncode == Exit.USAGE
    assert "--contexts, --duration cannot change them" in got.stderr


def test_progress_on_a_terminal_shows_warm_up_then_live_tokens_per_second() -> None:
    now = [0.0]
    out = io.StringIO()
    progress = SweepProgress(lambda: now[0], total_cells=2, estimated_s=100, stream=out, tty=True)
    progress.cell_started("8K x 1")
    run = CellRun(concurrency=1, t0_s=0.0)
    record = RequestRecord(worker=0, start_s=0.0, first_token_s=1.0)
    run.records.append(record)
    now[0] = 2.0
    progress.update(run)
    assert "warming up: 1 requests with a token" in out.getvalue()
    run.w0_s = 2.0
    record.add_usage(2.5, 10)
    now[0] = 3.0
    progress.update(run)
    record.add_usage(3.5, 60)
    now[0] = 4.0
    progress.update(run)
    assert out.getvalue().endswith("50 tok/s")
    progress.cell_finished(
        "8K x 1",
        CellResult(context_label="8K", prompt_tokens=8192, concurrency=1, status="valid"),
        50.0,
    )
    assert out.getvalue().endswith("8K x 1: valid 50.0 tok/s\n")


def test_live_tokens_per_second_are_shown_at_server_speed() -> None:
    # A twin at speed 5: 250 tokens per wall-clock second are 50 per server second, the
    # figure every table reports (it showed 250 before).
    now = [0.0]
    out = io.StringIO()
    progress = SweepProgress(
        lambda: now[0], total_cells=1, estimated_s=10, stream=out, tty=True, speed_factor=5.0
    )
    progress.cell_started("8K x 1")
    run = CellRun(concurrency=1, t0_s=0.0, w0_s=0.0)
    record = RequestRecord(worker=0, start_s=0.0, first_token_s=0.1)
    run.records.append(record)
    record.add_usage(0.5, 10)
    now[0] = 1.0
    progress.update(run)
    record.add_usage(1.5, 260)
    now[0] = 2.0
    progress.update(run)
    assert out.getvalue().endswith("50 tok/s")
