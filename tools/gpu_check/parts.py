"""The parts of the GPU check, each bounded in time and ending in one line.

A part returns a `Part`: ok, failed (what is missing, in one line) or skipped (why), with
the facts it found. bench is imported inside each part, so a machine without bench's
Python dependencies gets "missing Python module X" per part instead of a traceback.
"""

from __future__ import annotations

import json
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parents[2]
SELFTEST = ROOT / "docker" / "image_selftest.py"
# Makefile's SMOKE_RUN_ARGS: two cells, 1K context, 10 s windows.
SMOKE_ARGS = ("--contexts", "1024", "--concurrencies", "1", "2", "--duration", "10",
              "--max-tokens", "256")  # fmt: skip
WHEELS_HINT = "install them: bash tools/gpu_check_wheels.sh (docs/image.md, GPU check)"

Status = Literal["ok", "failed", "skipped"]


@dataclass
class Part:
    name: str
    status: Status
    message: str
    facts: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class Context:
    out_dir: Path  # where the smoke's run directory goes, beside the JSON
    deadline: float  # time.monotonic() by which every part has finished
    load_s: float
    url: str | None
    gpus: int = 0  # GPUs the inventory found (0: none, or no inventory)

    def left(self, cap: float) -> float:
        """Seconds a wait may take: CAP, or what is left before the deadline (>= 1)."""
        return max(1.0, min(cap, self.deadline - time.monotonic()))


def _line(text: str) -> str:
    """One line of at most 300 characters from outside text."""
    flat = " ".join(text.split())
    return flat if len(flat) <= 300 else flat[:297] + "..."


def guarded(name: str, body: Callable[[], Part]) -> Part:
    """BODY's part; an exception inside it is that part's one-line failure, not a traceback:
    a harness on a machine nobody has seen reports what broke and goes on to the next part."""
    start = time.monotonic()
    try:
        part = body()
    except ModuleNotFoundError as exc:
        part = Part(name, "failed", f"missing Python module {exc.name}: {WHEELS_HINT}")
    except Exception as exc:  # noqa: BLE001 - see the docstring
        part = Part(name, "failed", _line(f"{type(exc).__name__}: {exc}"))
    part.seconds = round(time.monotonic() - start, 3)
    return part


def python_part() -> Part:
    """The interpreter and the modules the check's code paths import."""
    import importlib
    import importlib.metadata as md
    import platform

    found: dict[str, str | None] = {}
    missing = []
    for module, dist in (("pydantic", "pydantic"), ("pydantic_settings", "pydantic-settings"),
                         ("structlog", "structlog"), ("httpx", "httpx"), ("torch", "torch"),
                         ("triton", "triton")):  # fmt: skip
        try:
            importlib.import_module(module)
            found[dist] = md.version(dist)
        except ImportError:
            found[dist] = None
            if module not in ("torch", "triton"):  # the check runs without them
                missing.append(dist)
        except md.PackageNotFoundError:
            found[dist] = "?"
    facts = {"python": platform.python_version(), "executable": sys.executable, "modules": found}
    if missing:
        return Part("python", "failed", f"missing {', '.join(missing)}: {WHEELS_HINT}", facts)
    importlib.import_module("bench.cli")  # every module `bench run` needs, imported once
    have = ", ".join(f"{k} {v}" for k, v in found.items() if v)
    return Part("python", "ok", f"Python {platform.python_version()}; {have}", facts)


def inventory_part() -> Part:
    from bench.host import inventory

    inv = inventory.inventory()
    facts = inv.model_dump(mode="json")
    if not inv.available:
        return Part("inventory", "failed", f"no GPU: {inv.reason}", facts)
    # Which energy fields this nvidia-smi lists: what bench.host.telemetry probes for
    # (total_energy_consumption) is named by other tools, not in NVIDIA's docs we could read.
    rc, listing, _ = inventory.run_command(["nvidia-smi", "--help-query-gpu"])
    fields = re.findall(r'^"([^"]{1,100})"', listing, flags=re.MULTILINE) if rc == 0 else []
    facts["query_gpu_energy_fields"] = [f for f in fields if "energy" in f.lower()][:20]
    names = sorted({g.name for g in inv.gpus})
    return Part(
        "inventory",
        "ok",
        f"{len(inv.gpus)} x {', '.join(names)} (driver {inv.driver_version}, "
        f"CUDA {inv.cuda_version})",
        facts,
    )


def _last_json(text: str) -> dict[str, Any] | None:
    for line in reversed(text.splitlines()):
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    return None


def telemetry_part(ctx: Context) -> Part:
    """nvidia-smi sampled while the GPUs run matmuls (torch), summarised as a window."""
    if ctx.gpus == 0:
        return Part("telemetry", "skipped", "no GPU")
    from bench.host import telemetry
    from bench.run import gpu_validity

    sampler = telemetry.GpuSampler(interval_s=0.25)
    throttle_field, energy_field = sampler.fields
    sampler.start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "tools.gpu_check.load", str(ctx.load_s)],
            capture_output=True, text=True, check=False, cwd=ROOT,
            timeout=ctx.left(ctx.load_s + 120),
        )  # fmt: skip
        load = _last_json(done.stdout) or {"ran": False, "why": _line(done.stderr[-300:])}
    except subprocess.TimeoutExpired:
        load = {"ran": False, "why": "the matmul load did not finish in time"}
    finally:
        samples = sampler.stop()
    window = telemetry.summarize(samples, output_tokens=None)
    integral = telemetry.summarize(
        [s.model_copy(update={"energy_mj": None}) for s in samples], output_tokens=None
    )
    gpu = gpu_validity.cell_gpu(window)
    facts = {
        "load": load,
        "fields": {"clock_limits": throttle_field, "energy_counter": energy_field},
        "samples": len(samples),
        "window": window.model_dump(mode="json"),
        # Both energies over the same span: the counter's unit (mJ) checked against power.
        "energy_j": {"reported": window.energy_j, "power_integral": integral.energy_j},
        "energy_source": window.energy_source,
        "gpu_throttled": gpu_validity.throttled(gpu, {}),
    }
    if not samples:
        return Part("telemetry", "failed", "nvidia-smi gave no samples in the window", facts)
    loaded = "under matmul load" if load.get("ran") else f"idle ({load.get('why')})"
    ratio = ""
    if window.energy_source == "energy_counter" and window.energy_j and integral.energy_j:
        ratio = f" (counter / power integral = {window.energy_j / integral.energy_j:.3f})"
    energy = f"{window.energy_j:,.0f} J" if window.energy_j is not None else "no energy"
    return Part(
        "telemetry",
        "ok",
        f"{len(samples)} samples {loaded}; energy {energy} from "
        f"{window.energy_source or 'nowhere'}{ratio}; clock limits via {throttle_field}; "
        f"gpu_throttled: {facts['gpu_throttled'] or 'no'}",
        facts,
    )


def selftest_part(ctx: Context) -> Part:
    """docker/image_selftest.py's `gpu` part, outside the image: torch sees the GPUs and a
    Triton kernel compiles and runs on each."""
    if ctx.gpus == 0:
        return Part("selftest_gpu", "skipped", "no GPU")
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "selftest.json"
        try:
            done = subprocess.run(
                [sys.executable, str(SELFTEST), "--parts", "gpu", "--out", str(out)],
                capture_output=True, text=True, check=False, timeout=ctx.left(240),
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            return Part("selftest_gpu", "failed", "the self-test did not finish in time")
        facts = json.loads(out.read_text()) if out.is_file() else {}
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Part("selftest_gpu", "failed", _line(why), facts)
    gpus = facts.get("gpu", [])
    return Part("selftest_gpu", "ok", f"a Triton kernel ran on {len(gpus)} GPU(s)", facts)


def _start_twin(ctx: Context) -> tuple[subprocess.Popen[str], str]:
    twin = subprocess.Popen(
        [sys.executable, "-m", "bench", "twin", "serve", "--profile", "published", "--speed", "10",
         "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
        text=True, cwd=ROOT,
    )  # fmt: skip
    lines: queue.Queue[str] = queue.Queue()
    stream = twin.stdout
    assert stream is not None

    def drain() -> None:  # the banner, then whatever else, so a full pipe never blocks it
        lines.put(stream.readline())
        for _ in stream:
            pass

    threading.Thread(target=drain, daemon=True).start()
    try:
        banner = lines.get(timeout=ctx.left(60))
    except queue.Empty:
        banner = ""
    found = re.search(r"http://127\.0\.0\.1:(\d+)", banner)
    if found is None:
        from bench.host import procs

        procs.stop(twin)
        raise RuntimeError(f"the twin did not report its port: {_line(banner) or 'nothing'}")
    return twin, f"http://127.0.0.1:{found.group(1)}"


def smoke_part(ctx: Context) -> Part:
    """Two cells of `bench run` against --url, or against the twin when none is given."""
    from bench import run_files
    from bench.host import procs

    twin = None
    url = ctx.url
    if url is None:
        twin, url = _start_twin(ctx)
    # A new directory each time: `bench run --out` refuses one that exists, and an old
    # run's results.json must never be read as this one's.
    run_dir = ctx.out_dir / f"smoke-run-{time.strftime('%Y%m%dT%H%M%S')}"
    try:
        done = subprocess.run(
            [sys.executable, "-m", "bench", "run", "--url", url, *SMOKE_ARGS,
             "--out", str(run_dir)],
            capture_output=True, text=True, check=False, cwd=ROOT, timeout=ctx.left(420),
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        return Part("smoke", "failed", f"bench run did not finish in time ({run_dir})")
    finally:
        if twin is not None:
            procs.stop(twin)
    against = "the twin (no GPU inference server was measured)" if ctx.url is None else url
    if not (run_dir / run_files.RESULTS).is_file():
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return Part("smoke", "failed", _line(f"bench run against {against}: {why}"))
    results = run_files.load_results(run_dir)
    speed = results.speed_factor
    cells = [
        {
            "cell": f"{c.context_label}x{c.concurrency}",
            "status": c.status,
            "flags": c.flags,
            "total_tok_s": c.figures.at_server_speed(speed).total_tok_s if c.figures else None,
            "energy_per_output_token_j": c.gpu.energy_per_output_token_j if c.gpu else None,
            "energy_source": c.gpu.energy_source if c.gpu else None,
        }
        for c in results.cells
    ]
    facts = {"against": against, "url": url, "run_dir": str(run_dir), "exit": done.returncode,
             "state": results.state, "cells": cells,
             "energy_from": results.measurement.energy_from}  # fmt: skip
    shown = "; ".join(
        f"{c['cell']} {c['status']}"
        + (f" {c['total_tok_s']:,.1f} tok/s" if c["total_tok_s"] is not None else "")
        + (" GPU throttled" if c["flags"] else "")
        for c in cells
    )
    ok = done.returncode == 0 and results.state == "complete" and len(cells) == 2
    head = f"against {against}: run {results.state}, exit {done.returncode}"
    return Part("smoke", "ok" if ok else "failed", f"{head}; {shown}", facts)
