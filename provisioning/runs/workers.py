"""Runs on hosts: their ids, and the threads that run each host's flow.

Every host runs its HostRun (provisioning.flow.host_run) in its own thread; run_all starts them
and waits, passing Ctrl-C on to every one (a second Ctrl-C stops them hard).
"""

from __future__ import annotations

import datetime as dt
import re
import secrets
import threading
from collections.abc import Sequence
from typing import Protocol

from bench.errors import BenchError, Interrupted, UsageError
from provisioning.flow.host_run import HostRun
from provisioning.flow.options import HostOutcome


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


# A run id names a local folder, an archive and containers: letters, digits, '.', '_', '-',
# starting with a letter or digit (so never '.', '..', a path or an option), at most 64.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_run_id(run_id: str | None) -> str | None:
    """--run-id as given, or a one-line UsageError before anything runs (`..` as a run
    id once removed the whole local results folder)."""
    if run_id is None:
        return None
    if not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise UsageError(
            f"--run-id {run_id[:80]!r} is not a run id",
            hint="use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or "
            "digit, without '..' or '/'",
        )
    return run_id


class Worker(threading.Thread):
    def __init__(self, run: HostRun) -> None:
        super().__init__(name=f"host-{run.host.name}", daemon=True)
        self.host_run = run
        self.outcome: HostOutcome = run.outcome
        self.error: BenchError | None = None
        # Waiting uses this, not join(): a join() interrupted by Ctrl-C can leave a live
        # thread reported as stopped (CPython gh-90882).
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.outcome = self.host_run.run()
        except BenchError as exc:
            self.error = exc
        except (Exception, KeyboardInterrupt) as exc:
            # After a Ctrl-C the terminal's SIGINT also reached this process group's ssh
            # and docker children: a connection they held may end in an error of its own
            # library's while the run stops. That is the interruption, said in one line,
            # not a thread's traceback (a make test under stress-ng printed one once).
            # Before any Ctrl-C it is a bug, and stays one.
            if not self.host_run.stop.is_set():
                raise
            why = " ".join(f"{type(exc).__name__}: {exc}".split())[:200]
            self.error = Interrupted(
                f"interrupted on {self.host_run.host.name}; stopping ended in {why}"
            )
        finally:
            self.host_run.remote.close()
            self.done.set()

    def stop(self, *, hard: bool) -> None:
        self.host_run.interrupt(hard=hard)


class Stoppable(Protocol):
    """A thread `run_all` waits for: `done` when it ended, `stop` on Ctrl-C."""

    done: threading.Event

    def start(self) -> None: ...

    def stop(self, *, hard: bool) -> None: ...


def run_all(workers: Sequence[Stoppable]) -> bool:
    """Start the workers and wait; Ctrl-C interrupts every one. True when interrupted.

    A second Ctrl-C kills the sweeps outright; clean-up still runs in every worker.
    """
    for w in workers:
        w.start()
    interrupted = False
    for w in workers:
        while not w.done.is_set():
            try:
                w.done.wait(timeout=0.2)
            except KeyboardInterrupt:
                for each in workers:
                    each.stop(hard=interrupted)
                interrupted = True
    return interrupted
