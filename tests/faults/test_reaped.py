"""A test that fails before it finishes what it started leaves nothing running behind it:
tests/support/procs.reaped, around every test's body (tests/conftest.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support import procs

pytestmark = pytest.mark.subprocess

# A parent that starts a child of its own, both sleeping: a `bench run` and its twin, say.
FAMILY = "import subprocess, time; subprocess.Popen(['sleep', '300']); time.sleep(300)"


def _failing_body() -> subprocess.Popen[str]:
    with procs.reaped():
        proc = procs.track(
            subprocess.Popen(
                [sys.executable, "-c", FAMILY], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                text=True, start_new_session=True,
            )
        )  # fmt: skip
        try:
            raise AssertionError("the body fails before finish()")
        except AssertionError:
            return proc


def test_a_process_left_by_a_failing_body_is_killed_with_its_group_and_its_pipes_closed() -> None:
    proc = _failing_body()
    assert proc.returncode is not None  # ended and collected
    assert proc.stdout is not None and proc.stdout.closed
    assert proc.stderr is not None and proc.stderr.closed
    group = subprocess.run(
        ["pgrep", "-g", str(proc.pid)], capture_output=True, text=True, check=False
    )
    assert group.stdout.strip() == ""  # its child `sleep` went with it


def test_a_finished_process_is_left_as_it_was() -> None:
    with procs.reaped():
        rc, out, _ = procs.finish(procs.bench("--version", mark=procs.new_mark()), 60)
    assert rc == 0 and out.strip()
