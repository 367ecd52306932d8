"""Stopping a child process: the one way bench, the orchestrator, the tools and the tests
end a process they started.

`stop` asks first (SIGTERM), waits a bounded grace, then kills (SIGKILL) and reaps, so
no stop hangs on a child that ignores SIGTERM and none leaves a zombie. With `group`, the
signals go to the child's process group (a child started with `start_new_session=True`
leads its own): a server's workers stop with it, and the grace runs until the whole group
is gone, not just its leader.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import Any

DEFAULT_GRACE_S = 5.0
_POLL_S = 0.05


def stop(
    proc: subprocess.Popen[Any], grace_s: float = DEFAULT_GRACE_S, *, group: bool = False
) -> int:
    """SIGTERM `proc` (its process group with `group`), wait up to `grace_s`, then SIGKILL
    and reap. Its exit code (negative: the signal that ended it); a process that has
    already exited is only reaped."""
    if group:
        return _stop_group(proc, grace_s)
    if proc.poll() is not None:
        return proc.returncode
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        return proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        return proc.wait()


def group_alive(pgid: int) -> bool:
    """Is any process of group `pgid` still there (a zombie leader counts until reaped)?"""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # a member we may not signal is still a member
        return True
    return True


def _stop_group(proc: subprocess.Popen[Any], grace_s: float) -> int:
    pgid = proc.pid  # start_new_session=True made the child its group's leader
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        proc.poll()  # reaps the leader, so a group of one ends here
        if not group_alive(pgid):
            return proc.wait()
        time.sleep(_POLL_S)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    return proc.wait()
