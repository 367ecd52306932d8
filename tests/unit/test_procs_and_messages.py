"""The one process stopper (bench.host.procs) and the one validation-message helper
(bench.errors.validation_message)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from pydantic import BaseModel, ValidationError, field_validator

from bench.errors import validation_message
from bench.host import procs

# A child that ignores SIGTERM, says so, then sleeps: only SIGKILL ends it.
_STUBBORN = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)
# The same, leading a group with a grandchild that ignores SIGTERM as well.
_STUBBORN_GROUP = (
    "import signal, subprocess, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    f"child = subprocess.Popen([sys.executable, '-c', {_STUBBORN!r}], stdout=subprocess.PIPE)\n"
    "child.stdout.readline()\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(60)\n"
)


def _started(code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()  # it has set its SIGTERM handling
    return proc


@pytest.mark.subprocess
def test_a_child_that_ignores_sigterm_is_killed_within_the_grace() -> None:
    proc = _started(_STUBBORN)
    began = time.monotonic()
    rc = procs.stop(proc, grace_s=0.5)
    took = time.monotonic() - began
    assert rc == -signal.SIGKILL and proc.returncode == -signal.SIGKILL
    assert 0.5 <= took < 5.0
    assert proc.stdout is not None
    proc.stdout.close()


@pytest.mark.subprocess
def test_a_child_that_obeys_sigterm_ends_by_it_and_a_reaped_one_is_left_alone() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    assert procs.stop(proc, grace_s=10) == -signal.SIGTERM
    assert procs.stop(proc, grace_s=10) == -signal.SIGTERM  # already reaped: nothing sent


@pytest.mark.subprocess
def test_a_group_is_stopped_whole_grandchildren_included() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _STUBBORN_GROUP],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    grandchild = int(proc.stdout.readline())
    began = time.monotonic()
    assert procs.stop(proc, grace_s=0.5, group=True) == -signal.SIGKILL
    assert time.monotonic() - began < 5.0
    deadline = time.monotonic() + 5
    while procs.group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # the grandchild's parent is gone: init reaps it
    assert not procs.group_alive(proc.pid), f"grandchild {grandchild} outlived its group"
    proc.stdout.close()


class _Inner(BaseModel):
    port: int

    @field_validator("port")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v <= 0:
            raise ValueError("must be positive")
        return v


class _Doc(BaseModel):
    name: str
    hosts: list[_Inner]


def _error(data: object) -> ValidationError:
    try:
        _Doc.model_validate(data)
    except ValidationError as exc:
        return exc
    raise AssertionError("it validated")


def test_validation_message_is_where_then_what_of_the_first_problem() -> None:
    exc = _error({"name": "a", "hosts": [{"port": 1}, {"port": -3}]})
    assert validation_message(exc) == "hosts.1.port: must be positive"


def test_validation_message_counts_the_rest_and_names_the_whole() -> None:
    exc = _error({"hosts": [{"port": "x\ny"}]})
    line = validation_message(exc)
    assert line.startswith("name: Field required") and line.endswith("(and 1 more)")
    assert "\n" not in line
    whole = _error([1])
    assert validation_message(whole, "document").startswith("document: Input should be")
    assert not validation_message(whole).startswith(":")
