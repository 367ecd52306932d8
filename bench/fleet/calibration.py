"""The multipliers of `bench fleet`'s outlier rule: how many sds of the spread between
nodes a node must lie from the others, in one cell (k_cell) or as the median over
all its cells (k_node), so that a fleet whose nodes differ only by noise has some node
named anywhere in its report 1 % of the time.

Both depend on the number of nodes n and of judged cells C of a figure. They were found by
simulation (`tools/fleet_calibrate.py`, `make fleet-calibrate`) and are read here from
outlier_k.json: linear in n and in log C between the simulated points, the nearest
simulated point beyond them.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path

# A normal's sd over its mean absolute deviation: the spread between nodes in sd units.
MEAN_ABS_TO_SD = math.sqrt(math.pi / 2.0)
FALSE_ALARM = 0.01  # over a report's figures and tests together
FIGURES = 6  # the figures a report judges: four of decode, two of prefill
TESTS = 2  # per figure: one cell far off, a node off everywhere
ALPHA_PER_TEST = FALSE_ALARM / (FIGURES * TESTS)
_TABLE = Path(__file__).with_name("outlier_k.json")

_Grid = dict[tuple[int, int], float]


@dataclass(frozen=True)
class Multipliers:
    cell: float  # one cell: |d_ij| > cell x s
    node: float  # a node's median deviation over its cells: |D_i| > node x s


@functools.cache
def _tables() -> tuple[tuple[int, ...], tuple[int, ...], _Grid, _Grid]:
    doc = json.loads(_TABLE.read_text())

    def grid(name: str) -> _Grid:
        rows = doc[name].items()
        return {(int(n), int(c)): float(v) for n, row in rows for c, v in row.items()}

    cell, node = grid("cell"), grid("node")
    return tuple(sorted({n for n, _ in cell})), tuple(sorted({c for _, c in cell})), cell, node


def _between(points: tuple[int, ...], x: float) -> tuple[int, int]:
    """The two simulated points around x (the same one twice beyond the ends)."""
    if x <= points[0]:
        return points[0], points[0]
    if x >= points[-1]:
        return points[-1], points[-1]
    i = bisect.bisect_right(points, x)
    return points[i - 1], points[i]


def _at(grid: _Grid, nodes: int, cells: int) -> float:
    ns, cs, _, _ = _tables()
    n0, n1 = _between(ns, nodes)
    c0, c1 = _between(cs, cells)
    wn = 0.0 if n0 == n1 else (nodes - n0) / (n1 - n0)
    wc = 0.0 if c0 == c1 else (math.log(cells) - math.log(c0)) / (math.log(c1) - math.log(c0))

    def row(n: int) -> float:
        return grid[n, c0] * (1 - wc) + grid[n, c1] * wc

    return row(n0) * (1 - wn) + row(n1) * wn


def multipliers(nodes: int, cells: int) -> Multipliers:
    """k_cell and k_node for a figure judged in `cells` cells over `nodes` nodes."""
    _, _, cell, node = _tables()
    return Multipliers(_at(cell, nodes, cells), _at(node, nodes, cells))
