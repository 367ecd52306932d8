"""Sweep efficiency: a full `bench run` with the card's parameters against the `published` twin.

Wall time of the `bench run` process ÷ the time the methodology itself asks for: every
measurement window, every cold prefill (the scout request of a row) and every readiness
hold. The rest is broken down by `tools.perf.sweep_timeline` from the run directory and
the run's JSON log: start-up and planning, prompt sizing, the drain barrier, the server's
first tokens, the gate beyond the hold, stopping a cell, writing results, the final save.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import run_files
from tools.perf import procs, sweep_timeline

SPEED = 5.0  # the published twin keeps up at this speed on 2 shared cores
QUICK_ARGS = ("--contexts", "8K", "--prefill-only-contexts", "--concurrencies", "1", "4")


def run(
    quick: bool, speed: float = SPEED, run_args: Sequence[str] = (), keep: Path | None = None
) -> dict[str, Any]:
    """`run_args` go to `bench run` (e.g. fewer contexts while iterating); none: the card.
    `keep`: where to copy the run directory and its log (they are deleted otherwise)."""
    cpus = procs.cores()
    server_cpu, client_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    twin = [procs.python(), "-m", "bench", "twin", "serve", "--profile", "published"]
    twin += ["--speed", repr(speed), "--port", "0"]
    with (
        tempfile.TemporaryDirectory(prefix="perf-sweep-") as d,
        procs.serving(twin, server_cpu) as (url, _),
    ):
        out = Path(d) / "run"
        log = Path(d) / "run.log"
        argv = [procs.python(), "-m", "bench", "run", "--url", url, "--out", str(out)]
        if quick:
            argv += [*QUICK_ARGS, "--duration", "3"]
        argv += run_args
        started_wall = time.time()
        t0 = time.monotonic()
        with log.open("w") as err:
            subprocess.run(
                argv,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=err,
                env=procs.child_env(),
                preexec_fn=procs.pin(client_cpu),
            )
        wall_s = time.monotonic() - t0
        got = breakdown(out, log, started_wall, wall_s)
        if keep is not None:
            shutil.copytree(out, keep, dirs_exist_ok=True)
            shutil.copy(log, keep / "run.log")
        return got | {"profile": "published", "speed": speed, "run_args": list(run_args)}


def breakdown(rundir: Path, log: Path, started_wall: float, wall_s: float) -> dict[str, Any]:
    results = json.loads((rundir / "results.json").read_text())
    samples = [json.loads(x) for x in (rundir / run_files.SAMPLES).read_text().splitlines()]
    events = sweep_timeline.log_events(log.read_text().splitlines(), started_wall)
    return sweep_timeline.breakdown(results, samples, events, started_wall, wall_s)
