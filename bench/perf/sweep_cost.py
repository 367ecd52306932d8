"""Sweep efficiency: a full `bench run` with the card's parameters against the `published` twin.

Wall time of the `bench run` process ÷ the time the methodology itself asks for: every
measurement window, every cold prefill (the scout request of a row) and every readiness
hold. The rest is broken down from the run directory the sweep wrote:

- start-up and planning: process start to the run's anchor (`created_at`): interpreter,
  server detection, capacity, plan;
- prompt sizing: per row, anchor/previous cell end to the row's scout request (/tokenize);
- first tokens: cell start (after the drain barrier) to the last first token of the C
  requests launched together: the server's time to admit them, which the gate must wait for;
- gate: from that last first token to the gate first holding (polling, server metrics);
- stop: window end to the last stream of the cell being cancelled and accounted;
- drain + writing: previous cell's end to the next cell's start (the drain barrier, the
  results file, samples and metrics rows written between cells);
- finish: the last cell's end to process exit (final save, tables).
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.perf import procs

SPEED = 5.0  # the published twin keeps up at this speed on 2 shared cores
QUICK_ARGS = ("--contexts", "8K", "--prefill-only-contexts", "--concurrencies", "1", "4")


def run(quick: bool, speed: float = SPEED) -> dict[str, Any]:
    cpus = procs.cores()
    server_cpu, client_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    twin = [procs.python(), "-m", "bench", "twin", "serve", "--profile", "published"]
    twin += ["--speed", repr(speed), "--port", "0"]
    with (
        tempfile.TemporaryDirectory(prefix="perf-sweep-") as d,
        procs.serving(twin, server_cpu) as (url, _),
    ):
        out = Path(d) / "run"
        argv = [procs.python(), "-m", "bench", "run", "--url", url, "--out", str(out)]
        if quick:
            argv += [*QUICK_ARGS, "--duration", "3"]
        started_wall = time.time()
        t0 = time.monotonic()
        subprocess.run(
            argv,
            check=True,
            stdout=subprocess.DEVNULL,
            env=procs.child_env(),
            preexec_fn=procs.pin(client_cpu),
        )
        wall_s = time.monotonic() - t0
        return breakdown(out, started_wall, wall_s) | {"profile": "published", "speed": speed}


def breakdown(rundir: Path, started_wall: float, wall_s: float) -> dict[str, Any]:
    results = json.loads((rundir / "results.json").read_text())
    s = results["settings"]
    speed = results["server"]["speed_factor"]
    window_s = s["duration_s"] / speed
    hold_s = s["readiness_hold_s"] / speed
    anchor = dt.datetime.fromisoformat(results["created_at"]).timestamp() - started_wall

    prefill: list[tuple[float, float]] = []
    cell_end: dict[tuple[str, int, int], float] = {}
    # The first request of each worker: the gate waits for all of their first tokens.
    first_wave: dict[tuple[str, int, int], dict[int, float]] = {}
    for line in (rundir / "samples.jsonl").read_text().splitlines():
        r = json.loads(line)
        if r["phase"] == "prefill":
            prefill.append((r["start_s"], r["end_s"]))
        else:
            key = (r["context"], r["concurrency"], r["trial"])
            cell_end[key] = max(cell_end.get(key, 0.0), r["end_s"] or 0.0)
            wave = first_wave.setdefault(key, {})
            if r["worker"] not in wave and r["first_token_s"] is not None:
                wave[r["worker"]] = r["first_token_s"]

    # A timeline in seconds since the anchor: (start, end, kind).
    spans: list[tuple[float, float, int]] = [(a, b, -1) for a, b in prefill]
    ramp = first_tokens = stop = windows = holds = 0.0
    cells = 0
    per_cell: list[dict[str, Any]] = []
    for c in results["cells"]:
        if c.get("started_at_s") is None or c["figures"] is None:
            continue
        cells += 1
        t0 = c["started_at_s"]
        ready = (c.get("extras") or {}).get("ready_after_s") or 0.0
        key = (c["context_label"], c["concurrency"], c["trial"])
        end = t0 + cell_end[key]
        last_first = max(first_wave.get(key, {0: 0.0}).values())
        first_tokens += min(last_first, max(0.0, ready - hold_s))
        ramp += max(0.0, ready - hold_s - last_first)
        holds += hold_s
        windows += window_s
        stop += max(0.0, end - (t0 + ready + window_s))
        spans.append((t0, end, len(per_cell)))
        per_cell.append(
            {
                "cell": f"{c['context_label']} x {c['concurrency']}",
                "first_tokens_s": round(min(last_first, max(0.0, ready - hold_s)), 3),
                "gate_s": round(max(0.0, ready - hold_s - last_first), 3),
                "stop_s": round(max(0.0, end - (t0 + ready + window_s)), 3),
            }
        )
    spans.sort()
    sizing = between = 0.0
    prev_end = 0.0
    for a, b, i in spans:
        gap = max(0.0, a - prev_end)
        if i < 0:
            sizing += gap  # sizing the row's prompt (and the drain of the previous row)
        else:
            between += gap
            per_cell[i]["drain_and_writing_before_s"] = round(gap, 3)
        prev_end = max(prev_end, b)
    prefill_s = sum(b - a for a, b in prefill)
    finish = wall_s - anchor - prev_end
    parts = {
        "measurement windows": windows,
        "readiness holds": holds,
        "cold prefills": prefill_s,
        "start-up and planning": anchor,
        "prompt sizing": sizing,
        "first tokens of the C launched together": first_tokens,
        "gate after the last first token": ramp,
        "stop (cancel streams)": stop,
        "drain + writing between cells": between,
        "finish (final save, tables)": finish,
    }
    needed = windows + holds + prefill_s
    return {
        "wall_s": wall_s,
        "cells": cells,
        "prefills": len(prefill),
        "needed_s": needed,
        "efficiency": wall_s / needed if needed else None,
        # The readiness gate cannot hold before the server has given every one of the C
        # workers its first token: that wait is the server's, not the sweep's.
        "efficiency_with_first_tokens": wall_s / (needed + first_tokens) if needed else None,
        "breakdown_s": parts,
        "unaccounted_s": wall_s - sum(parts.values()),
        "per_cell": per_cell,
    }
