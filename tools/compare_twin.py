"""`make compare-twin`: does `bench compare` flag the real changes, and only those?

Runs the card's sweep (selected contexts, every concurrency, N trials per cell) against
fresh twin processes: `runs` baselines of the `published` profile, each with its own seed
(its own MTP acceptance draws and slow requests, as two server starts differ), and one run
of a variant whose decode steps are `slower_pct` % slower at `slower_from` concurrent
requests and above. Then `bench compare` (the library call behind it) on every pair of
baselines, which must flag no cell, and on the variant against each baseline, which must
flag exactly the valid decode cells at `slower_from` and above. Exit 0 when all hold.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from bench.twin import profile as profiles
from bench.twin.process import start_twin
from bench.verdict.cells import Key
from bench.verdict.compare import Policy, compare
from bench.verdict.run_source import load_run


def slower_variant(
    name: str,
    pct: float,
    from_batch: int,
    dest: Path,
    *,
    prefill_factor: float = 1.0,
    new_name: str | None = None,
) -> Path:
    """A copy of profile `name` whose decode steps take `pct` % longer at `from_batch`+ and
    whose prefill takes `prefill_factor` times as long, named `new_name` (`NAME-slower`)."""
    data = profiles.load(name).model_dump()
    factor = 1 + pct / 100
    data["name"] = new_name or f"{name}-slower"
    data["prefill_s_per_token"] = [s * prefill_factor for s in data["prefill_s_per_token"]]
    data["decode_step_s"] = [
        [s * factor if b >= from_batch else s for s, b in zip(row, data["batches"], strict=True)]
        for row in data["decode_step_s"]
    ]
    dest.write_text(json.dumps(data, indent=1) + "\n")
    return dest


def _sweep(profile: str, seed: int, speed: float, out: Path, run_args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("BENCH_API_KEY", "VLLM_API_KEY")}
    with start_twin(profile, speed=speed, timeout_s=60, extra_args=["--seed", str(seed)]) as tw:
        argv = [sys.executable, "-m", "bench", "run", "--url", tw.url, "--out", str(out)]
        with (out.parent / f"{out.name}.log").open("w") as log:
            rc = subprocess.call([*argv, *run_args], env=env, stdout=log, stderr=log)
    if rc != 0:
        raise SystemExit(
            f"bench: error: bench run against {profile} exited with {rc} (see {out}.log)"
        )


def _label(key: Key) -> str:
    return f"{key[1]} x{key[2]}" if key[0] == "decode" else f"{key[1]} prefill"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.compare_twin")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--speed", type=float, default=10.0)
    p.add_argument("--runs", type=int, default=4, help="baseline runs (pairs: all of them)")
    p.add_argument("--contexts", nargs="+", default=["8K", "16K"])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--slower-pct", type=float, default=8.0)
    p.add_argument("--slower-from", type=int, default=64)
    args = p.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    run_args = [
        "--contexts", *args.contexts, "--prefill-only-contexts",
        "--trials", str(args.trials), "--duration", f"{args.duration:g}",
    ]  # fmt: skip
    t0 = time.monotonic()
    bases = []
    for i in range(args.runs):
        bases.append(args.out / f"base-{i + 1}")
        _sweep("published", i + 1, args.speed, bases[-1], run_args)
        print(f"baseline {i + 1}: {(time.monotonic() - t0) / 60:.1f} min", flush=True)
    variant_profile = slower_variant(
        "published", args.slower_pct, args.slower_from, args.out / "slower.json"
    )
    variant = args.out / "slower"
    _sweep(str(variant_profile), 100, args.speed, variant, run_args)
    wall_min = (time.monotonic() - t0) / 60

    runs = {d: load_run(d) for d in [*bases, variant]}
    expected = {
        c.key
        for c in runs[variant].cells.values()
        if c.key[0] == "decode" and c.key[2] >= args.slower_from and c.status == "valid"
    }
    ok = True
    print(f"\n{'pair':<26} {'flagged cells':<40} expected")
    pairs = [(a, b, set[Key]()) for a, b in itertools.combinations(bases, 2)]
    pairs += [(a, variant, expected) for a in bases]
    for a, b, want in pairs:
        got = {c.key for c in compare(runs[a], runs[b], Policy()).flagged}
        ok &= got == want
        shown = ", ".join(_label(k) for k in sorted(got)) or "none"
        print(f"{a.name + ' vs ' + b.name:<26} {shown:<40} {'yes' if got == want else 'NO'}")
    print(
        f"\n{len(pairs)} pairs, {args.trials} trials per cell, contexts {' '.join(args.contexts)},"
        f" speed {args.speed:g}, {args.slower_pct:g} % slower at >= {args.slower_from}:"
        f" {'as expected' if ok else 'NOT as expected'}; wall {wall_min:.1f} min"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
