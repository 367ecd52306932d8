"""`make fleet-calibrate`: the multipliers k of `bench fleet`'s outlier rule, by simulation.

For a fleet of n nodes that differ only by noise (each node's log value in each of C cells
an independent standard normal draw), `bench fleet` computes for one figure

    d_ij = y_ij - median of the other nodes' y_kj in cell j        (leave one out)
    s    = sqrt(pi / 2) x mean of |d_ij| over the cells and the nodes, leaving out the
           node whose median |d_ij| over the cells is largest   (pooled over the cells)
    T_cell = max over cells j and nodes i of |d_ij| / s             (one cell far off)
    T_node = max over nodes i of |median over cells j of d_ij| / s  (off everywhere)

and k_cell(n, C), k_node(n, C) are their (1 - alpha) quantiles. `bench fleet` asks for a
1 % chance that a fleet of equals has a node named anywhere in its report: two tests for
each of six figures, so alpha = 1 % / 12 per test (Bonferroni; the figures are
correlated, so the report's rate is at most 1 %). T does not depend on the noise's size,
only on n and C, so one table serves every fleet: bench/fleet/outlier_k.json, which
`bench.fleet.calibration` interpolates. Seeded: the same arguments write the same file.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import numpy.typing as npt

from bench.fleet import calibration

OUT = Path(calibration.__file__).with_name("outlier_k.json")
NODES = (3, 4, 5, 6, 8, 10, 12, 16, 24, 32)
CELLS = (1, 2, 4, 8, 16, 32, 64, 128, 256)


def leave_one_out(y: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """d[..., i] = y[..., i] - median of y[..., k] over k != i (last axis: the nodes)."""
    n = y.shape[-1]
    order = np.argsort(y, axis=-1)
    s = np.take_along_axis(y, order, axis=-1)
    rank = np.argsort(order, axis=-1)  # each node's place in the sorted cell
    m = n - 1  # the others

    # The others' sorted values are s without position rank: index j of them is s[j] below
    # rank and s[j + 1] from it on. Their median is at (m - 1) / 2 (odd m) or the mean of
    # m / 2 - 1 and m / 2 (even m).
    def other(j: int) -> npt.NDArray[np.float64]:
        below = np.broadcast_to(s[..., j : j + 1], y.shape)
        above = np.broadcast_to(s[..., j + 1 : j + 2], y.shape)
        return np.where(rank > j, below, above)

    med = other((m - 1) // 2) if m % 2 else (other(m // 2 - 1) + other(m // 2)) / 2.0
    return y - med


def spread(d: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """s of each fleet from its deviations d (fleet, cell, node)."""
    fleets, c, n = d.shape
    a = np.abs(d)
    worst = np.argmax(np.median(a, axis=1), axis=1)  # the node furthest off in most cells
    rest = a.copy()
    rest[np.arange(fleets), :, worst] = np.nan
    return np.asarray(calibration.MEAN_ABS_TO_SD * np.nanmean(rest.reshape(fleets, c * n), axis=1))


def statistics(
    rng: np.random.Generator, fleets: int, n: int, c: int
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """T_cell and T_node of `fleets` simulated fleets of equals."""
    y = rng.standard_normal((fleets, c, n))
    d = leave_one_out(y)
    s = spread(d)
    cell = np.abs(d).reshape(fleets, c * n).max(axis=1) / s
    node = np.abs(np.median(d, axis=1)).max(axis=1) / s
    return np.asarray(cell), np.asarray(node)


def quantiles(seed: int, fleets: int, n: int, c: int, level: float) -> tuple[float, float]:
    """The `level` quantiles of T_cell and T_node over `fleets` simulated fleets."""
    rng = np.random.default_rng([seed, n, c])
    chunk = max(1, min(fleets, 4_000_000 // (n * c)))
    cells, nodes = [], []
    done = 0
    while done < fleets:
        take = min(chunk, fleets - done)
        t_cell, t_node = statistics(rng, take, n, c)
        cells.append(t_cell)
        nodes.append(t_node)
        done += take
    return (
        float(np.quantile(np.concatenate(cells), level)),
        float(np.quantile(np.concatenate(nodes), level)),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.fleet_calibrate")
    p.add_argument("--fleets", type=int, default=40_000, help="simulated fleets per (n, C)")
    p.add_argument("--seed", type=int, default=20261203)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    t0 = time.monotonic()
    level = 1.0 - calibration.ALPHA_PER_TEST
    found = {(n, c): quantiles(args.seed, args.fleets, n, c, level) for n in NODES for c in CELLS}
    doc = {
        "what": "k(n nodes, C cells): the (1 - alpha) quantiles of T_cell and T_node for "
        "fleets that differ only by normal noise; see tools/fleet_calibrate.py",
        "alpha_per_test": round(1.0 - level, 8),
        "fleets_per_entry": args.fleets,
        "seed": args.seed,
        "cell": {str(n): {str(c): round(found[n, c][0], 3) for c in CELLS} for n in NODES},
        "node": {str(n): {str(c): round(found[n, c][1], 3) for c in CELLS} for n in NODES},
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    took = time.monotonic() - t0
    print(f"wrote {args.out} ({len(NODES)} x {len(CELLS)} entries) in {took:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
