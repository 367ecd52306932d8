"""`make reproduce-twin`: the published sweep against the twin's `published` profile.

Starts the twin (a real server process on 127.0.0.1, port 0) at a speed factor, runs
`bench run` with the card's parameters (the defaults of `bench run`), and prints our
figures beside the card's for every cell (see bench.card_diff) and the wall time.
Exit status 0 when every cell agrees and the over-capacity sets are identical, else 1.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from bench.card.parse import read_card
from bench.card_diff import render
from bench.errors import Exit
from bench.results import Results

_LISTENING = re.compile(r"listening on (http://[0-9.]+:\d+)")


def _start_twin(speed: float, profile: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench", "twin", "serve", "--profile", profile,
         "--speed", repr(speed), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        m = _LISTENING.search(line)
        if m:
            return proc, m.group(1)
    proc.kill()
    raise SystemExit("bench: error: the twin did not start (no 'listening on' line)")


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
    twin, url = _start_twin(args.speed, args.profile)
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("BENCH_API_KEY", "VLLM_API_KEY")}
        rc = subprocess.call(
            [sys.executable, "-m", "bench", "run", "--url", url, "--out", str(args.out),
             *args.run_args],
            env=env,
        )  # fmt: skip
    finally:
        twin.terminate()
        twin.wait(timeout=10)
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
