"""Build (tests/setup/llamacpp.sh) and run llama.cpp's own HTTP server for tests.

    binary, model = set_up()
    with start_llama_server(binary, model, log_path) as server:
        server.url, server.client(), server.log_text()

The server runs on 127.0.0.1 at a free port in its own process group, with llama-server's
stock defaults except SERVER_FLAGS (each says what it stands in for); readiness is a bounded
/health poll that also watches the process, and on exit the group gets SIGTERM, then SIGKILL.
A set-up or start that fails is pytest.fail with the reason, never a skip.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.procs import free_port
from tests.support.require import require
from tests.support.served import pytest_failure, serving

REPO = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO / "tests" / "setup" / "llamacpp.sh"
MODEL_ALIAS = "tiny-llama"
SLOTS = 4
CONTEXT = 32_768
# What differs from `llama-server -m MODEL`, each standing in for a benchmark target:
#   --metrics        /metrics is off by default; a benchmark scrapes it before and after.
#   -np 4            four slots, i.e. concurrency 4 (the default is "auto").
#   -c 32768         the KV cache: 32,768 tokens in all, 8,192 per slot (the model's own
#                    maximum is 32,768; without -c the server takes that).
#   --alias          the name clients send as "model" (vLLM's --served-model-name).
#   -t 1             one CPU thread instead of one per core. This machine's 2 cores are shared
#                    with other test runs, and ggml's threads meet at every operation: at load
#                    average 11 a 200-token completion took 20-70 ms a token with the default 2
#                    threads and 0.4-1 ms with 1 (measured here). A GPU target does not care.
# --host/--port put it on 127.0.0.1 at a free port.
SERVER_FLAGS = (
    *("--metrics", "-np", str(SLOTS), "-c", str(CONTEXT)),
    *("--alias", MODEL_ALIAS, "-t", "1"),
)
# The tiny model loads in well under a second; the bound covers a machine busy compiling.
HEALTH_DEADLINE_S = 120.0
STOP_GRACE_S = 20.0


@dataclass(frozen=True)
class LlamaServer:
    url: str  # the base URL, http://127.0.0.1:PORT
    binary: Path
    model: Path
    log_path: Path
    pid: int
    started_in_s: float  # launch to the first 200 from /health

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def client(self, timeout_s: float = 120.0) -> httpx.Client:
        # A new connection for every request: llama-server closes the connection after a
        # streamed response although it answered "Keep-Alive: timeout=5, max=100", and a
        # pooled client that reuses it fails now and then with "Server disconnected without
        # sending a response" (test_llamacpp_server.py checks the close).
        return httpx.Client(
            base_url=self.url,
            timeout=timeout_s,
            limits=httpx.Limits(max_keepalive_connections=0),
        )


def set_up() -> tuple[Path, Path]:
    """The server binary and the model, building them first if needed (idempotent)."""
    require("bash", "flock", "sha256sum", "tar", "cmake", "c++")
    done = subprocess.run(["bash", str(SETUP_SCRIPT)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.fail(
            f"{SETUP_SCRIPT.relative_to(REPO)} failed ({done.returncode}); "
            f"run it by hand to see why:\n{done.stderr[-3000:]}",
            pytrace=False,
        )
    binary = Path(done.stdout.strip().splitlines()[-1])
    model = binary.parents[1] / "models" / "tiny-llama.gguf"
    for path in (binary, model):
        if not path.is_file():
            pytest.fail(f"{SETUP_SCRIPT.name} succeeded but {path} is missing", pytrace=False)
    return binary, model


def serve_command(binary: Path, model: Path, port: int) -> list[str]:
    return [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *SERVER_FLAGS,
    ]


def server_env() -> dict[str, str]:
    # LLAMA_ARG_* set any flag and LLAMA_API_KEY guards the API: the defaults must be stock.
    return {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "BENCH_"))}


@contextlib.contextmanager
def start_llama_server(binary: Path, model: Path, log_path: Path) -> Iterator[LlamaServer]:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with serving(
        serve_command(binary, model, port),
        server_env(),
        log_path,
        url=url,
        name="llama-server",
        health_deadline_s=HEALTH_DEADLINE_S,
        stop_grace_s=STOP_GRACE_S,
        fail=pytest_failure,
    ) as (proc, started_in_s):
        yield LlamaServer(
            url=url,
            binary=binary,
            model=model,
            log_path=log_path,
            pid=proc.pid,
            started_in_s=started_in_s,
        )
