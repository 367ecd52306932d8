"""`make reproduce-twin`: the published sweep against the twin's `published` profile.

Starts the twin (a real server process on 127.0.0.1, port 0) at a speed factor, runs
`bench run` with the card's parameters (the defaults of `bench run`), and judges the run
against the card with the one reproduce implementation (`bench.verdict.reproduce`, as
`bench reproduce` does): every cell, ours beside the card's, the wall time. The run
directory is no bundle, so the verdict calls it unsigned. Exit status: that of
`bench reproduce` (0 reproduced, 1 not, 9 partial, 10 settings differ, 11 inconclusive).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.errors import exit_through_make
from bench.twin.process import start_twin
from bench.verdict.command import load_reference
from bench.verdict.reproduce import Tolerances, reproduce
from bench.verdict.run_source import load_run
from bench.verdict.settings import parse_accept
from bench.verdict.tables import reproduce_markdown


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.reproduce_twin")
    p.add_argument("--speed", type=float, default=10.0)
    p.add_argument("--profile", default="published")
    p.add_argument("--card", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--trials", type=int, default=1, help="trials per cell (bench run --trials)")
    p.add_argument("--accept", action="append", default=[], help="as bench reproduce --accept")
    p.add_argument("run_args", nargs="*", help="extra `bench run` arguments (after --)")
    args = p.parse_args(argv)
    card = load_reference(args.card)
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_API_KEY", "VLLM_API_KEY")}
    with start_twin(args.profile, speed=args.speed, timeout_s=60) as twin:
        rc = subprocess.call(
            [sys.executable, "-m", "bench", "run", "--url", twin.url, "--out", str(args.out),
             "--trials", str(args.trials), *args.run_args],
            env=env,
        )  # fmt: skip
    wall_s = time.monotonic() - t0
    if rc != 0:
        print(f"bench: error: bench run exited with {rc}", file=sys.stderr)
        return rc
    result = reproduce(load_run(args.out), card, Tolerances(), parse_accept(args.accept))
    print()
    print(reproduce_markdown(result))
    print(f"wall time {wall_s / 60:.1f} min at speed {args.speed:g}; results in {args.out}")
    return int(result.exit_code)


if __name__ == "__main__":
    sys.exit(exit_through_make("tools.reproduce_twin", main))
