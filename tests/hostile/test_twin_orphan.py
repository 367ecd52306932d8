"""`bench local` killed with SIGKILL leaves no twin behind (issue 15): its twin dies with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]
HOLDER = """
import sys, time
from bench.twin.process import start_twin
with start_twin("tiny", die_with_parent=sys.argv[1] == "1") as twin:
    print(twin.proc.pid, flush=True)
    time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_twin_started_for_bench_local_dies_when_its_parent_is_killed_9() -> None:
    assert sys.platform == "linux", "the guard is PR_SET_PDEATHSIG, Linux's (as is the product)"
    for die_with_parent in (True, False):
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, "1" if die_with_parent else "0"],
            stdout=subprocess.PIPE, text=True, cwd=ROOT,
        )  # fmt: skip
        assert holder.stdout is not None
        twin_pid = int(holder.stdout.readline())
        holder.stdout.close()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait()
        deadline = time.monotonic() + (10 if die_with_parent else 1)
        while _alive(twin_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if die_with_parent:
            assert not _alive(twin_pid)
        else:  # the control: without it the twin outlives its parent (what bench local did)
            assert _alive(twin_pid)
            os.kill(twin_pid, signal.SIGKILL)
