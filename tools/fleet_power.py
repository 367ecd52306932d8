"""`make fleet-power`: does `bench fleet` name the slow node, and only it, on the twin?

Each node of a simulated fleet is one `bench run` of the published card's matrix on the
twin's engine in virtual time (`tools.verdict_power.simulate_card`), with the twin's
run-to-run noise for the node's own seed (`bench.twin.noise`: a factor per run and cell
shared by the run's trials, and one per trial). So nodes differ the way separate server
starts differ, which the trials inside one run do not show. Cases:

- equals: every node healthy; a fleet that names anybody is a false alarm;
- one node X % slower everywhere (every step cost of every cell / (1 - X/100));
- one node X % slower at 64 requests and above only (3 of the card's 33 decode cells).

For each case, the fraction of fleets that name the slow node (power) and that name a
healthy one (false alarm), with 95 % Wilson intervals, at 4 and 8 nodes.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.card.figures import context_tokens
from bench.fleet import report as fleet_mod
from bench.fleet.nodes import Node
from bench.fleet.rule import Rule
from bench.twin import noise
from bench.twin import profile as profiles
from bench.twin.profile import Profile
from bench.verdict.cells import Cell, Key
from tools.verdict_power import CARD, CARD_NAME, Base, _ci, _value, run_of, simulate_card

Slowness = Callable[[Key], float]  # the node's throughput factor in a cell (1.0: healthy)


def node(
    profile: Profile, base: Base, name: str, seed: int, *, trials: int, slow: Slowness
) -> Node:
    """One node: one run of the matrix, `trials` trials of each cell."""
    cells: dict[Key, Cell] = {}
    for key, figs in base.figures.items():
        conc = key[2] if key[0] == "decode" else 0
        ctx = context_tokens(key[1])
        factors = [
            noise.cell_factor(profile, seed, t, ctx, conc) / slow(key) for t in range(trials)
        ]
        values = {m: tuple(_value(v, m, f) for f in factors) for m, v in figs.items()}
        cells[key] = Cell(key[0], key[1], key[2], "valid", None, values)  # type: ignore[arg-type]
    return Node(name, run_of(name, cells))


def healthy(_key: Key) -> float:
    return 1.0


def everywhere(pct: float) -> Slowness:
    return lambda _key: 1.0 - pct / 100.0


def from_64(pct: float) -> Slowness:
    return lambda key: 1.0 - pct / 100.0 if key[0] == "decode" and key[2] >= 64 else 1.0


def case(
    profile: Profile,
    base: Base,
    *,
    nodes: int,
    trials: int,
    fleets: int,
    slow: Slowness,
    rule: Rule,
) -> tuple[int, int, int]:
    """Fleets naming node n0 (the slow one when there is one), naming another node, and
    naming anybody."""
    slow_named = other_named = any_named = 0
    for i in range(fleets):
        seeds = [7_000_000 + 1000 * i + j for j in range(nodes)]
        members = [
            node(profile, base, f"n{j}", seed, trials=trials, slow=slow if j == 0 else healthy)
            for j, seed in enumerate(seeds)
        ]
        named = set(fleet_mod.fleet(members, rule).outlier_nodes)
        slow_named += "n0" in named
        other_named += bool(named - {"n0"})
        any_named += bool(named)
    return slow_named, other_named, any_named


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.fleet_power")
    p.add_argument("--profile", default="published")
    p.add_argument("--card", type=Path, default=CARD / CARD_NAME)
    p.add_argument("--fleets", type=int, default=500, help="simulated fleets per case")
    p.add_argument("--nodes", type=int, nargs="+", default=[4, 8])
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--slow", type=float, nargs="+", default=[2.0, 3.0, 5.0, 10.0])
    p.add_argument("--slow-from-64", type=float, nargs="*", default=[5.0, 10.0])
    args = p.parse_args(argv)
    t0 = time.monotonic()
    profile = profiles.load(args.profile)
    base = simulate_card(profile, args.card)
    rule = Rule()
    print(
        f"twin profile {profile.name}: noise {profile.noise_run * 100:g} % per run + "
        f"{profile.noise_trial * 100:g} % per trial (per cell); {len(base.figures)} cells of "
        f"the card; {args.trials} trials per node; {args.fleets} fleets per case"
    )
    print()
    print("| nodes | case | fleets naming the slow node | fleets naming a healthy node |")
    print("|---|---|---|---|")
    cases: list[tuple[str, Slowness]] = [("all equal", healthy)]
    cases += [(f"one {x:g} % slower everywhere", everywhere(x)) for x in args.slow]
    cases += [(f"one {x:g} % slower at ≥ 64 requests only", from_64(x)) for x in args.slow_from_64]
    n = args.fleets
    for nodes in args.nodes:
        for label, slow in cases:
            hit, other, anybody = case(
                profile, base, nodes=nodes, trials=args.trials, fleets=n, slow=slow, rule=rule
            )
            if slow is healthy:  # n0 is as healthy as the rest: any name is a false alarm
                print(f"| {nodes} | {label} | — | {_ci(anybody, n)} |")
            else:
                print(f"| {nodes} | {label} | {_ci(hit, n)} | {_ci(other, n)} |")
    print(f"\nwall {time.monotonic() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
