"""A process ahead of everything the test suite runs beside it.

A test that times a server and its client (the twin's timeline, a fleet of twins judged on
their figures) claims something about the server and the client, not about this machine's
load: on a benchmark host the server and its client do not share their CPUs with a test suite.
Here they do: `make test` runs two pytest-xdist workers side by side on 2 cores, with whatever
else the machine runs. So these tests run the processes they time at a niceness of
PRIORITY_NICE, ahead of the other worker, its servers and any build, standing in for that
property of the real target; the tests that measure behaviour under load (tests/hostile,
issue 28) do not. Linux's niceness is per thread: every thread of a running process is set,
and the threads it starts later inherit it. Needs root, as the suite's other services do."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

PRIORITY_NICE = -15


def prioritize(pid: int) -> None:
    """Every thread of PID at PRIORITY_NICE."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.setpriority(os.PRIO_PROCESS, int(task.name), PRIORITY_NICE)
        except PermissionError as e:
            raise PermissionError(
                f"setting niceness {PRIORITY_NICE} on pid {pid} needs root: run the tests as "
                "root, as tests/setup/*.sh need"
            ) from e
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


def prioritized(argv: Sequence[str]) -> list[str]:
    """ARGV started at PRIORITY_NICE (coreutils' nice)."""
    return ["nice", "-n", str(PRIORITY_NICE), *argv]
