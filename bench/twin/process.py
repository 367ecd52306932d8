"""The twin as a child process: started on 127.0.0.1 port 0, its bound port read back.

Used by `bench local`, `make reproduce-twin` and the tests. The API key reaches the twin
through its environment (VLLM_API_KEY), never its command line.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from bench.errors import ServerError
from bench.host import procs

_LISTENING = re.compile(r"listening on http://([0-9.]+):(\d+)")
_SECRET_VARS = ("VLLM_API_KEY", "BENCH_API_KEY")


@dataclass
class TwinProcess:
    url: str
    port: int
    proc: subprocess.Popen[str]
    stderr_path: str

    def stderr(self) -> str:
        with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
            return f.read()


def twin_command(profile: str, speed: float, extra_args: Sequence[str]) -> list[str]:
    return [
        *(sys.executable, "-m", "bench", "twin", "serve"),
        *("--profile", profile, "--speed", repr(float(speed)), "--port", "0"),
        *extra_args,
    ]


def _die_with_parent() -> None:
    import ctypes
    import signal

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, int(signal.SIGTERM), 0, 0, 0)


@contextlib.contextmanager
def start_twin(
    profile: str = "tiny",
    *,
    speed: float = 1.0,
    extra_args: Sequence[str] = (),
    api_key: str | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 30.0,
    die_with_parent: bool = False,
) -> Iterator[TwinProcess]:
    """Run the twin for the duration of the block; stop it (SIGTERM, then SIGKILL) after.

    die_with_parent: the kernel sends the twin SIGTERM when the thread that started it
    ends, even by SIGKILL (Linux PR_SET_PDEATHSIG): `bench local` killed -9 leaves no twin.
    Only for a twin started from the main thread of a process, which is what it tracks.
    """
    child_env = {k: v for k, v in os.environ.items() if k not in _SECRET_VARS}
    child_env.setdefault("BENCH_LOG_FORMAT", "json")
    if api_key is not None:
        child_env["VLLM_API_KEY"] = api_key
    child_env.update(env or {})
    err = tempfile.NamedTemporaryFile(prefix="twin-", suffix=".stderr", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        twin_command(profile, speed, extra_args),
        stdout=subprocess.PIPE,
        stderr=err,
        text=True,
        env=child_env,
        preexec_fn=_die_with_parent if die_with_parent and sys.platform == "linux" else None,  # noqa: PLW1509
    )
    try:
        host, port = _wait_for_port(proc, err.name, timeout_s)
        yield TwinProcess(f"http://{host}:{port}", port, proc, err.name)
    finally:
        procs.stop(proc)
        if proc.stdout is not None:
            proc.stdout.close()
        err.close()
        os.unlink(err.name)


def _wait_for_port(proc: subprocess.Popen[str], err_path: str, timeout_s: float) -> tuple[str, int]:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            proc.wait(timeout=5)
            with open(err_path, encoding="utf-8", errors="replace") as f:
                last = f.read().strip().splitlines()[-1:] or ["(no output)"]
            raise ServerError(f"the twin exited with {proc.returncode} before listening: {last[0]}")
        match = _LISTENING.search(line)
        if match:
            return match.group(1), int(match.group(2))
    raise ServerError(f"the twin did not print its port within {timeout_s:g} s")
