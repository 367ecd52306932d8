"""`bench fleet BUNDLE...`: one sweep run on several nodes, which node stands out."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import structlog

from bench.errors import UsageError
from bench.fleet import nodes as fleet_nodes
from bench.fleet import report as fleet_mod
from bench.fleet import rule as rule_mod
from bench.fleet.page import fleet_page
from bench.fleet.tables import fleet_markdown
from bench.settings import Settings
from bench.verdict import page
from bench.verdict.cells import accepting
from bench.verdict.command import verification
from bench.verdict.run_source import add_verification_args
from bench.verdict.settings import add_accept_arg, parse_accept

_EPILOG = """\
A node stands out in a cell when its log value lies more than K sds of the spread between
nodes from the median of the other nodes (the spread pooled over the figure's cells, the
node furthest off left out of it; K calibrated so that a fleet of equals names a node 1 %
of the time) AND beyond the run-to-run noise of one node (3 standard errors of a
difference of two means of its trials; with one trial per node there is no noise estimate,
and --min-deviation stands in). A node is also named when the median of its deviations
over a figure's cells is beyond its own multiplier and --min-shift. Exit codes: 0 no node
stands out, 1 one or more nodes stand out, 2 bad input, 5 a bundle does not verify, 9
cells that could not be judged on every node (and none stands out), 10 settings differ
between the nodes (not accepted).
"""


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 1000:
        raise argparse.ArgumentTypeError(f"a number between 0 and 1000, got {text}")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "fleet",
        help="one sweep on several nodes: per cell the value on every node, who stands out",
        description="Per cell and figure, the value on every node, the median and spread, "
        "and the nodes that stand out, with how their environment differs.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "bundles",
        type=Path,
        nargs="+",
        metavar="BUNDLE",
        help="one bundle .tar.gz (or run directory, or results.json) per node; 3 or more",
    )
    p.add_argument(
        "--k",
        type=_positive,
        default=None,
        help="sds of the spread between nodes a node must lie from the others in one cell "
        "(default: calibrated for the fleet's nodes and cells so that a fleet of equals "
        "names a node 1 %% of the time)",
    )
    p.add_argument(
        "--min-deviation",
        type=_positive,
        default=rule_mod.DEFAULT_MIN_DEVIATION_PCT,
        metavar="PCT",
        help="without a noise estimate (one trial per node), the smallest |Δ %%| from the "
        f"median that stands out (default {rule_mod.DEFAULT_MIN_DEVIATION_PCT:g})",
    )
    p.add_argument(
        "--min-shift",
        type=_positive,
        default=rule_mod.DEFAULT_MIN_SHIFT_PCT,
        metavar="PCT",
        help="the smallest |Δ %%| a node must be off by across all cells of a figure (the "
        "median of its deviations) to be named for it "
        f"(default {rule_mod.DEFAULT_MIN_SHIFT_PCT:g})",
    )
    p.add_argument("--html", type=Path, metavar="OUT", help="also write an HTML page")
    add_verification_args(p)
    add_accept_arg(p, fleet_mod.NAMES, " between nodes")
    p.set_defaults(func=run_fleet)


def run_fleet(args: argparse.Namespace, settings: Settings) -> int:
    paths: list[Path] = args.bundles
    if len(paths) < rule_mod.MIN_NODES:
        raise UsageError(
            f"a fleet report needs at least {rule_mod.MIN_NODES} nodes' bundles, got {len(paths)}",
            hint="with two a median cannot tell which one stands out; bench compare A B",
        )
    accept = parse_accept(args.accept, fleet_mod.NAMES)
    rule = rule_mod.Rule(args.k, args.min_deviation, accept, args.min_shift)
    # A node's cells flagged gpu_throttled stand out of nothing unless that flag is accepted.
    nodes = [
        dataclasses.replace(n, run=accepting(n.run, accept))
        for n in fleet_nodes.load_nodes(paths, verification(args))
    ]
    report = fleet_mod.fleet(nodes, rule)
    sys.stdout.write(fleet_markdown(report))
    if args.html:
        page.write(args.html, fleet_page(report))
    structlog.get_logger("bench.verdict").info(
        "fleet_judged",
        bundles=[str(p) for p in paths],
        nodes=[n.name for n in nodes],
        standing_out=list(report.outlier_nodes),
    )
    return int(report.exit_code)
