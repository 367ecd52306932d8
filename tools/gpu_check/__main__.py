"""`python -m tools.gpu_check --out FILE [--url URL]` (`make gpu-check`): the first thing
to run on a real GPU machine (docs/image.md, "GPU check").

In order, each part bounded in time and reported in one line (tools/gpu_check/parts.py):

  python        the interpreter and bench's Python dependencies importable
  inventory     the GPUs, driver and CUDA through nvidia-smi (bench.host.inventory)
  telemetry     nvidia-smi sampled while torch runs matmuls on every GPU (idle without
                torch): which clock-limit and energy-counter fields this driver offers,
                energy from the counter beside the power integral, gpu_throttled or not
  selftest_gpu  docker/image_selftest.py's `gpu` part outside the image (torch + Triton)
  smoke         two cells of `bench run` against --url, or against the twin when no URL
                is given (said so: then no GPU inference server was measured)

Writes every finding to one JSON file (--out) and the run directory of the smoke beside
it (FILE's folder/smoke-run-<time>), prints a summary, and finishes within --budget-s (default
540 s: every wait is capped by what is left). Exit 0 when every part is ok, 6 (bench's
HOST_CHECK) when one failed or was skipped for want of a GPU, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from tools.gpu_check import parts as p

EXIT_OK, EXIT_USAGE, EXIT_HOST_CHECK = 0, 2, 6  # bench.errors.Exit's, without importing bench


def check(out: Path, url: str | None, load_s: float, budget_s: float) -> list[p.Part]:
    start = time.monotonic()
    ctx = p.Context(out_dir=out.parent, deadline=start + budget_s, load_s=load_s, url=url)
    found: list[p.Part] = []

    def run(name: str, body: Callable[[], p.Part]) -> p.Part:
        print(f"gpu-check: {name} ...", file=sys.stderr, flush=True)
        part = p.guarded(name, body)
        found.append(part)
        return part

    run("python", p.python_part)
    inventory = run("inventory", p.inventory_part)
    gpus = len(inventory.facts.get("gpus", [])) if inventory.status == "ok" else 0
    ctx = p.Context(ctx.out_dir, ctx.deadline, load_s, url, gpus)
    run("telemetry", lambda: p.telemetry_part(ctx))
    run("selftest_gpu", lambda: p.selftest_part(ctx))
    run("smoke", lambda: p.smoke_part(ctx))
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.gpu_check", description=__doc__)
    ap.add_argument("--out", type=Path, required=True, help="the JSON file of findings")
    ap.add_argument("--url", help="an inference server to smoke (default: the twin)")
    ap.add_argument("--load-s", type=float, default=30.0, help="seconds of matmul load")
    ap.add_argument("--budget-s", type=float, default=540.0, help="the whole check's limit")
    args = ap.parse_args(argv)
    if not (1 <= args.load_s <= 120 and 60 <= args.budget_s <= 600):
        print("gpu-check: --load-s is 1..120 and --budget-s 60..600 seconds", file=sys.stderr)
        return EXIT_USAGE
    args.out.parent.mkdir(parents=True, exist_ok=True)
    started = datetime.now(UTC)
    found = check(args.out, args.url, args.load_s, args.budget_s)
    ok = all(x.status == "ok" for x in found)
    doc = {
        "schema_version": 1,
        "tool": "tools.gpu_check",
        "started_at": started.isoformat(timespec="seconds"),
        "seconds": round((datetime.now(UTC) - started).total_seconds(), 1),
        "host": platform.node(),
        "ok": ok,
        "parts": [vars(x) for x in found],
    }
    args.out.write_text(json.dumps(doc, indent=2, sort_keys=True, default=str) + "\n")
    width = max(len(x.name) for x in found)
    for x in found:
        print(f"{x.name:<{width}}  {x.status:<7}  {x.message}")
    verdict = "GPU check passed" if ok else "GPU check FAILED"
    print(f"{verdict} in {doc['seconds']} s; every finding in {args.out}")
    return EXIT_OK if ok else EXIT_HOST_CHECK


if __name__ == "__main__":
    sys.exit(main())
