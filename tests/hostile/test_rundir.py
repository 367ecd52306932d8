"""A run directory belongs to one run: made exclusively, locked while written, never
mixed with unrelated files (issue 15). No sockets."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.errors import Exit, UsageError
from bench.run.rundir import RunDir
from bench.run_files import INCOMPLETE, SERVER_LOG


def test_out_into_a_non_empty_directory_that_is_not_a_run_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "id_ed25519").write_text("PRIVATE KEY\n")
    (out / "samples.jsonl").write_text('{"foreign": 1}\n')
    with pytest.raises(UsageError) as err:
        RunDir(out).create()
    assert err.value.one_line() == (
        f"{out} is not empty and holds no run (id_ed25519, samples.jsonl) (bench run writes "
        "only into a new or empty directory; choose another --out)"
    )
    assert sorted(p.name for p in out.iterdir()) == ["id_ed25519", "samples.jsonl"]


def test_a_new_or_empty_directory_is_taken(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "empty", tmp_path / "new" / "deeper"):
        rundir = RunDir(out)
        rundir.create()
        assert (out / INCOMPLETE).exists()
        rundir.unlock()


def test_a_directory_holding_only_the_servers_log_is_taken(tmp_path: Path) -> None:
    """The orchestrator writes server.log (a KV capacity source, a bundle member) first."""
    out = tmp_path / "run"
    out.mkdir()
    (out / SERVER_LOG).write_text("INFO GPU KV cache size: 1,835,008 tokens\n")
    rundir = RunDir(out)
    rundir.create()
    assert (out / INCOMPLETE).exists() and (out / SERVER_LOG).exists()
    rundir.unlock()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / SERVER_LOG).write_text("x\n")
    (tmp_path / "other" / "stray.txt").write_text("x\n")
    with pytest.raises(UsageError, match=r"not empty and holds no run \(stray.txt\)"):
        RunDir(tmp_path / "other").create()


def test_a_second_writer_is_refused_in_one_line_while_the_first_holds_it(tmp_path: Path) -> None:
    out = tmp_path / "r"
    first = RunDir(out)
    first.create()
    for second in (RunDir(out).create, RunDir(out).lock):
        with pytest.raises(UsageError) as err:
            second()
        assert err.value.one_line().startswith(f"another bench run is writing {out} (")
    first.unlock()
    RunDir(out).lock()  # free again once the first lets go


@pytest.mark.subprocess
def test_resume_of_a_directory_another_process_writes_exits_usage_in_one_line(
    tmp_path: Path,
) -> None:
    out = tmp_path / "r"
    holder = RunDir(out)
    holder.create()  # this test process is "the first run, still measuring"
    got = subprocess.run(
        [sys.executable, "-m", "bench", "run", "--resume", str(out)],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "BENCH_LOG_FORMAT": "json"},
    )  # fmt: skip
    assert got.returncode == Exit.USAGE
    assert got.stderr.strip() == (
        f"bench: error: another bench run is writing {out} (wait until it ends (then "
        "--resume it if it stopped), or choose another --out)"
    )
    assert sorted(p.name for p in out.iterdir()) == [INCOMPLETE]
    holder.unlock()
