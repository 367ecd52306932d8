"""`make bench` without HOST (`bench local`, the real twin flow) with a history configured:
recorded as the run finishes; with the database gone (a PostgreSQL server stopped in the
middle of the run, a SQLite file that is no database) the run ends with its own exit code,
keeps its bundle and says in one line that it could not record it, and the command that
line gives records it later."""

from __future__ import annotations

import json
import os
import pathlib
import shlex
import subprocess
import sys
from typing import Any

import pytest

from bench.history import database
from bench.history.database import Target
from tests.support import postgres

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

# One cell with a 5 s window: not the card's settings, so the verdict is NOT COMPARABLE
# (exit 10) with or without a history; that code is the run's own.
SWEEP = ("--", "--contexts", "8K", "--prefill-only-contexts", "--concurrencies", "1",
         "--duration", "5")  # fmt: skip
RUN_EXIT = 10


def _env(tmp_path: pathlib.Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "HOME": str(tmp_path / "home"), "BENCH_LOG_FORMAT": "json", **extra}
    for name in ("VLLM_API_KEY", "BENCH_API_KEY"):
        env.pop(name, None)
    return env


def _local(tmp_path: pathlib.Path, env: dict[str, str], *history: str) -> subprocess.Popen[str]:
    out = tmp_path / "results" / "run1"
    return subprocess.Popen(
        [sys.executable, "-m", "bench", "local", "--speed", "20", "--out", str(out), *history,
         *SWEEP],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def _history_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("history: ")]


def _results(tmp_path: pathlib.Path) -> dict[str, Any]:
    results: dict[str, Any] = json.loads(
        (tmp_path / "results" / "run1" / "results.json").read_text()
    )
    return results


def _run_id(tmp_path: pathlib.Path) -> str:
    return str(_results(tmp_path)["run_id"])


def _not_recorded(
    tmp_path: pathlib.Path, out: str, err: str, returncode: int, target: Target, reason: str
) -> list[str]:
    """The run ended as without a history, kept its bundle, and said so in one line; the
    command that line ends with."""
    assert returncode == RUN_EXIT, err[-3000:]
    assert "NOT COMPARABLE: " in out
    bundle = tmp_path / "results" / "run1.tar.gz"
    assert bundle.is_file() and (tmp_path / "results" / "run1" / "manifest.json").is_file()
    (line,) = _history_lines(err)
    assert line.startswith(f"history: {bundle} not recorded in {target} ({reason}")
    command = shlex.split(line.split("record it later with: ", 1)[1])
    assert command[1:4] == ["history", "ingest", str(bundle.resolve())], command
    return command


def test_a_postgresql_stopped_during_the_run_loses_nothing(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with postgres.cluster() as pg:
        url = postgres.create_database(pg, "runs")
        target = Target("postgresql", url)
        env = _env(tmp_path, PGPASSWORD=pg.password)
        proc = _local(tmp_path, env, "--history", url)
        assert proc.stderr is not None
        while '"twin_started"' not in (line := proc.stderr.readline()):
            assert line, "bench local ended before its twin started"
        postgres.stop(pg)  # the sweep runs; the database goes away
        out, err = proc.communicate(timeout=600)
        command = _not_recorded(tmp_path, out, err, proc.returncode, target, "connection failed")
        assert command[command.index("--db") + 1] == url
        assert pg.password not in out + err  # the password was in PGPASSWORD only

        postgres.start(pg)
        later = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=120, check=False)  # fmt: skip
        assert later.returncode == 0, later.stderr
        assert ": recorded, run " in later.stdout
        monkeypatch.setenv("PGPASSWORD", pg.password)
        with database.connect(target) as conn:
            runs = conn.query("SELECT run_id, trust, launch_profile FROM runs")
            cells = conn.query("SELECT status FROM cells WHERE phase = 'decode'")
        assert runs == [(_run_id(tmp_path), "signed", "twin:published")]
        # the run's one decode cell as the run measured it: valid, or (a fresh clone's make
        # test under stress-ng beside a vLLM container, 7 December) invalid with no token in
        # its 5 s window; what is recorded later is what the run has, either way
        measured = [(str(cell["status"]),) for cell in _results(tmp_path)["cells"]]
        assert len(cells) == 1 and cells == measured


def test_a_sqlite_history_that_is_no_database_loses_nothing(tmp_path: pathlib.Path) -> None:
    broken = tmp_path / "history.sqlite3"
    broken.write_bytes(b"this is not a database " * 64)
    target = Target("sqlite", str(broken))
    env = _env(tmp_path, BENCH_HISTORY__URL=str(broken))  # configured by the setting
    proc = _local(tmp_path, env)
    out, err = proc.communicate(timeout=600)
    command = _not_recorded(tmp_path, out, err, proc.returncode, target, "file is not a database")

    broken.unlink()  # the database is mended: the printed command records the kept bundle
    later = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=120, check=False)  # fmt: skip
    assert later.returncode == 0, later.stderr
    with database.connect(target) as conn:
        assert conn.query("SELECT run_id, trust FROM runs") == [(_run_id(tmp_path), "signed")]
    shown = subprocess.run(
        [sys.executable, "-m", "bench", "history", "trend", "--cell", "8K:1", "--db", str(broken)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "Series 1 of 1: cell 8K:1, total_tok_s, 1 runs" in shown.stdout


def test_a_working_history_records_the_run_as_it_finishes(tmp_path: pathlib.Path) -> None:
    db = tmp_path / "history.sqlite3"
    env = _env(tmp_path, BENCH_HISTORY__URL="postgresql://nobody@127.0.0.1:1/none")
    proc = _local(tmp_path, env, "--history", str(db))  # the option wins over the setting
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == RUN_EXIT, err[-3000:]
    assert "NOT COMPARABLE: " in out
    run_id = _run_id(tmp_path)
    assert _history_lines(err) == [f"history: run {run_id} recorded in {db}"]
    with database.connect(Target("sqlite", str(db))) as conn:
        assert conn.query("SELECT run_id, trust FROM runs") == [(run_id, "signed")]
    # Recording it again by hand is the same run, once.
    allowed = tmp_path / "home" / ".config" / "bench" / "allowed_signers"
    again = subprocess.run(
        [sys.executable, "-m", "bench", "history", "ingest", str(tmp_path / "results"),
         "--db", str(db), "--allowed-signers", str(allowed)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert "already recorded" in again.stdout and ": recorded" not in again.stdout
