"""Start the twin as a real process for tests: `with start_twin("tiny") as twin: twin.url`.

The twin runs as `python -m bench twin serve --port 0 ...`; this waits for the line in
which it prints its bound port, and stops the process (SIGTERM, then SIGKILL) on exit.
The API key goes through the environment (VLLM_API_KEY), never the command line.
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

_LISTENING = re.compile(r"listening on http://([0-9.]+):(\d+)")


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
        sys.executable,
        "-m",
        "bench",
        "twin",
        "serve",
        "--profile",
        profile,
        "--speed",
        repr(float(speed)),
        "--port",
        "0",
        *extra_args,
    ]


@contextlib.contextmanager
def start_twin(
    profile: str = "tiny",
    *,
    speed: float = 1.0,
    extra_args: Sequence[str] = (),
    api_key: str | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 30.0,
) -> Iterator[TwinProcess]:
    child_env = {k: v for k, v in os.environ.items() if k not in ("VLLM_API_KEY", "BENCH_API_KEY")}
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
    )
    try:
        host, port = _wait_for_port(proc, err.name, timeout_s)
        yield TwinProcess(f"http://{host}:{port}", port, proc, err.name)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
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
                raise RuntimeError(
                    f"twin exited with {proc.returncode} before listening: {f.read()}"
                )
        match = _LISTENING.search(line)
        if match:
            return match.group(1), int(match.group(2))
    raise RuntimeError(f"twin did not print its port within {timeout_s} s")
