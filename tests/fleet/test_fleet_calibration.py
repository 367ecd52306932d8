"""The multipliers of `bench fleet`'s rule: the simulation that made them computes what the
product computes, and the shipped table is what the simulation gives."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.fleet import calibration
from bench.fleet.nodes import Node
from bench.fleet.report import fleet
from bench.fleet.rule import Rule, leave_one_out
from bench.verdict.cells import Cell, RunFigures
from tools import fleet_calibrate


def _nodes(y: np.ndarray) -> list[Node]:
    """One node per column of y (cells x nodes of log values): total tok/s exp(y)."""
    c, n = y.shape
    levels = tuple(2**j for j in range(c))
    out = []
    for i in range(n):
        cells = {
            ("decode", "8K", lvl): Cell(
                "decode", "8K", lvl, "valid", None, {"total_tok_s": (math.exp(y[j, i]),)}
            )
            for j, lvl in enumerate(levels)
        }
        run = RunFigures(f"n{i}", "run", 1.0, {}, cells, ("8K",), levels)
        out.append(Node(f"n{i}", run))
    return out


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_the_simulation_deviates_as_the_product_does(n: int) -> None:
    rng = np.random.default_rng(n)
    y = rng.standard_normal((50, 6, n))
    fast = fleet_calibrate.leave_one_out(y)
    for f in range(50):
        for j in range(6):
            assert fast[f, j] == pytest.approx(leave_one_out(list(y[f, j])), abs=1e-12)


@pytest.mark.parametrize(("n", "c"), [(3, 4), (4, 8), (6, 5)])
def test_the_simulation_scales_as_the_product_does(n: int, c: int) -> None:
    rng = np.random.default_rng(100 + n)
    y = rng.standard_normal((5, c, n)) * 0.02
    s = fleet_calibrate.spread(fleet_calibrate.leave_one_out(y))
    for f in range(5):
        report = fleet(_nodes(y[f]), Rule())
        scale = report.scales["total_tok_s"]
        assert scale.cells == c
        assert scale.sd == pytest.approx(float(s[f]), rel=1e-9)
        k = calibration.multipliers(n, c)
        assert (scale.k.cell, scale.k.node) == (k.cell, k.node)


def test_the_table_is_what_the_simulation_gives() -> None:
    """A fresh simulation (other seed, fewer fleets) lands near the shipped k at 4 nodes
    and 8 cells: the table is the simulation's, not a number typed in."""
    k_cell, k_node = fleet_calibrate.quantiles(7, 20_000, 4, 8, 1 - calibration.ALPHA_PER_TEST)
    shipped = calibration.multipliers(4, 8)
    assert k_cell == pytest.approx(shipped.cell, rel=0.15)
    assert k_node == pytest.approx(shipped.node, rel=0.15)


def test_multipliers_between_and_beyond_the_simulated_points() -> None:
    at8, at16 = calibration.multipliers(4, 8), calibration.multipliers(4, 16)
    mid = calibration.multipliers(4, 11)
    assert at16.cell < mid.cell < at8.cell and at16.node < mid.node < at8.node
    assert calibration.multipliers(5, 16).cell < calibration.multipliers(4, 16).cell
    # Beyond the table: the nearest simulated point.
    assert calibration.multipliers(64, 1000) == calibration.multipliers(32, 256)
    assert calibration.multipliers(2, 8) == calibration.multipliers(3, 8)
    # More cells: a smaller multiplier (the spread is better known, the max over cells grows
    # slowly), for the card's 33 decode cells at 4 nodes about 6.
    assert 4 < calibration.multipliers(4, 33).cell < 8
