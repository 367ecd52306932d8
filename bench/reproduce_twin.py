"""`make reproduce-twin`: the published sweep against the twin's `published` profile.

Starts the twin (a real server process on 127.0.0.1, port 0) at a speed factor, runs
`bench run` with the card's parameters (the defaults of `bench run`), and prints our
figures beside the card's for every cell (see bench.card_diff) and the wall time.
Exit status 0 when every cell agrees and the over-capacity sets are identical, else 1.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.card.parse import read_card
from bench.card_diff import render
from bench.errors import Exit
from bench.results import Results
from bench.twin.process import start_twin


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.reproduce_twin")
    p.add_argument("--speed", type=float, default=10.0)
    p.add_argument("--profile", default="published")
    p.add_argument("--card", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("run_args", nargs="*", help="extra `bench run` arguments (after --)")
    args = p.parse_args(argv)
    card = read_card(args.card)
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_API_KEY", "VLLM_API_KEY")}
    with start_twin(args.profile, speed=args.speed, timeout_s=60) as twin:
        rc = subprocess.call(
            [sys.executable, "-m", "bench", "run", "--url", twin.url, "--out", str(args.out),
             *args.run_args],
            env=env,
        )  # fmt: skip
    wall_s = time.monotonic() - t0
    if rc != 0:
        print(f"bench: error: bench run exited with {rc}", file=sys.stderr)
        return rc
    results = Results.model_validate_json((args.out / "results.json").read_text())
    text, ok = render(results, card)
    print()
    print(text)
    print(f"wall time {wall_s / 60:.1f} min at speed {args.speed:g}; results in {args.out}")
    return int(Exit.OK if ok else Exit.NOT_REPRODUCED)


if __name__ == "__main__":
    sys.exit(main())
