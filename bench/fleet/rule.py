"""The outlier rule of a fleet report: which node stands out, per figure.

Over the cells of the figure valid on at least `MIN_NODES` nodes (with fewer a median
cannot tell which node is the odd one), with n the fleet's nodes and C those cells:

  y_ij = ln(value of node i in cell j)     (the mean of its trials, at server speed)
  d_ij = y_ij - median over the other nodes k != i of y_kj       (leave one out)
  s    = sqrt(pi / 2) x mean of |d_ij| over the cells and the nodes, leaving out the node
         whose median |d_ij| is largest: the spread between nodes in sd units, pooled over
         the figure's cells (a node slow everywhere does not widen it)

  one cell:   node i stands out in cell j when |d_ij| > k_cell(n, C) x s and > floor_ij
  everywhere: node i is off across the figure when |D_i| > k_node(n, C) x s and beyond
              max(--min-shift, its cells' median floor), D_i = median over j of d_ij

  k_cell and k_node are chosen so that a fleet whose nodes differ only by noise has some
  node named anywhere in its report 1 % of the time (`calibration`, simulated by
  tools/fleet_calibrate.py). Pooling s over the cells is what makes that possible: the
  spread of four values in one cell is itself too noisy to scale a threshold by.

  floor, when the run-to-run noise is known (nodes ran 2 or more trials):
      3 x sd x sqrt(2 / n_i), sd the relative run-to-run sd of one trial of the figure,
      n_i node i's trials. sd is the noise `bench compare` uses
      (`bench.verdict.reproduce.pooled_noise`: pooled over the valid cells of all nodes
      when alike by its F-test), else this cell's own, pooled over the nodes. It keeps a
      cell whose trials scatter more than the others' (a TTFT of a few ms) from being
      judged by the figure's pooled spread alone. Trials of one run share its start, so
      they do not measure how much healthy nodes differ: that is s's job.
  floor, with one trial per node (no noise estimate): the stated minimum relative
      deviation, 5 % by default; the report says that it could not measure the noise.

Everything works on logs, so a deviation is relative: Δ % = (exp(d) - 1) x 100, the node
against the median of the others; "slower" reads the same for tok/s and latencies.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bench import stats
from bench.fleet import calibration
from bench.fleet.calibration import MEAN_ABS_TO_SD
from bench.fleet.nodes import Node
from bench.verdict.cells import Key, MetricSpec, Status

MIN_NODES = 3
DEFAULT_MIN_DEVIATION_PCT = 5.0
DEFAULT_MIN_SHIFT_PCT = 2.0
NOISE_SE = 3.0  # standard errors of a difference of two means the floor asks for
# A relative sd below this is float rounding of identical repeats, not a noise estimate.
NO_NOISE = 1e-9


@dataclass(frozen=True)
class Rule:
    k: float | None = None  # k_cell given by the user; None: calibrated
    min_deviation_pct: float = DEFAULT_MIN_DEVIATION_PCT
    accept: frozenset[str] = frozenset()
    min_shift_pct: float = DEFAULT_MIN_SHIFT_PCT


@dataclass(frozen=True)
class NodeValue:
    node: str
    status: Status | None  # None: the node did not measure the cell
    value: float | None
    trials: int
    deviation_pct: float | None = None  # against the median of the other nodes
    outlier: bool = False


@dataclass(frozen=True)
class Spread:
    """One cell's figure across the fleet."""

    key: Key
    metric: MetricSpec
    values: tuple[NodeValue, ...]
    median: float | None = None
    range_pct: float | None = None  # (max - min) / median
    threshold_pct: float | None = None  # the |Δ %| a node had to exceed here
    floor: Literal["noise", "minimum", "none"] = "none"

    @property
    def judged(self) -> bool:
        return self.threshold_pct is not None

    @property
    def outliers(self) -> tuple[NodeValue, ...]:
        return tuple(v for v in self.values if v.outlier)


@dataclass(frozen=True)
class Scale:
    """A figure's spread between the nodes, and the multipliers the rule used with it."""

    sd: float  # the spread between nodes, pooled over the cells (log units, sd-like)
    cells: int  # judged cells it pools
    k: calibration.Multipliers


@dataclass(frozen=True)
class Shift:
    """A node off in one direction across a figure's cells (the median of its deviations)."""

    node: str
    metric: MetricSpec
    deviation_pct: float
    cells: int  # the judged cells it is the median over
    threshold_pct: float

    @property
    def slower(self) -> bool:
        return (self.deviation_pct < 0) == self.metric.higher_is_better


@dataclass(frozen=True)
class Judged:
    spreads: tuple[Spread, ...]
    scales: dict[str, Scale]  # per figure judged in some cell
    shifts: tuple[Shift, ...]


def leave_one_out(logs: Sequence[float]) -> list[float]:
    """Each node's log value less the median of the other nodes' (a node does not pull the
    centre it is measured against)."""
    return [y - stats.median([*logs[:i], *logs[i + 1 :]]) for i, y in enumerate(logs)]


@dataclass(frozen=True)
class _FleetCell:
    """One cell's figure before the rule: every node's value, and the valid ones'."""

    key: Key
    raw: tuple[NodeValue, ...]
    good: tuple[int, ...]  # indices into raw (and the fleet's nodes) of the valid nodes
    logs: tuple[float, ...]
    groups: tuple[tuple[float, ...], ...]  # the valid nodes' trials
    # Per valid node, its floor in log units; None where the noise is unknown (then the
    # stated minimum deviation stands in) or the cell is not judged.
    floors: tuple[float, ...] | None = None

    @property
    def judged(self) -> bool:
        return len(self.good) >= MIN_NODES

    @property
    def deviations(self) -> list[float]:
        return leave_one_out(self.logs) if len(self.logs) >= 2 else [0.0] * len(self.logs)


def _gather(key: Key, metric: MetricSpec, nodes: Sequence[Node]) -> _FleetCell:
    raw: list[NodeValue] = []
    good: list[int] = []
    logs: list[float] = []
    groups: list[tuple[float, ...]] = []
    for i, n in enumerate(nodes):
        cell = n.run.cell(key)
        if cell is None:
            raw.append(NodeValue(n.name, None, None, 0))
            continue
        trials = cell.trials.get(metric.name, ())
        value = cell.value(metric.name)
        raw.append(NodeValue(n.name, cell.status, value, len(trials)))
        if cell.status == "valid" and value is not None and value > 0:
            good.append(i)
            logs.append(math.log(value))
            groups.append(trials)
    return _FleetCell(key, tuple(raw), tuple(good), tuple(logs), tuple(groups))


def _cell_noise(
    values: Sequence[tuple[float, ...]], pooled: stats.PooledNoise | None
) -> float | None:
    """The relative run-to-run sd of one trial for this cell, or None when unknown (one
    trial per node, or repeats so alike that their sd is 0: no estimate of the noise)."""
    if pooled is not None and pooled.sound and pooled.df > 0 and pooled.sd_log > NO_NOISE:
        return pooled.sd_log
    own = stats.pooled_sd_log(values)
    return own[0] if own is not None and own[0] > NO_NOISE else None


def _with_floors(c: _FleetCell, pooled: stats.PooledNoise | None) -> _FleetCell:
    sd = _cell_noise(c.groups, pooled) if c.judged else None
    if sd is None:
        return c
    floors = tuple(NOISE_SE * sd * math.sqrt(2.0 / max(len(g), 1)) for g in c.groups)
    return dataclasses.replace(c, floors=floors)


def _scale(cells: Sequence[_FleetCell], nodes: int, rule: Rule) -> Scale | None:
    judged = [c for c in cells if c.judged]
    if not judged:
        return None
    by_node: dict[int, list[float]] = {}
    for c in judged:
        for i, d in zip(c.good, c.deviations, strict=True):
            by_node.setdefault(i, []).append(abs(d))
    worst = max(by_node, key=lambda i: stats.median(by_node[i]))
    devs = [d for i, ds in by_node.items() if i != worst for d in ds]
    sd = MEAN_ABS_TO_SD * math.fsum(devs) / len(devs) if devs else 0.0
    k = calibration.multipliers(nodes, len(judged))
    if rule.k is not None:
        k = calibration.Multipliers(rule.k, k.node)
    return Scale(sd, len(judged), k)


def _spread(c: _FleetCell, metric: MetricSpec, rule: Rule, scale: Scale | None) -> Spread:
    """The one-cell test in cell c."""
    out = list(c.raw)
    if not c.good:
        return Spread(c.key, metric, tuple(out))
    values = [math.exp(y) for y in c.logs]
    med = stats.median(values)
    range_pct = (max(values) - min(values)) / med * 100.0
    devs = c.deviations
    for i, d in zip(c.good, devs, strict=True):
        v = out[i]
        out[i] = NodeValue(v.node, v.status, v.value, v.trials, stats.pct_of_log(d))
    if not c.judged or scale is None:
        return Spread(c.key, metric, tuple(out), med, range_pct)
    minimum = math.log1p(rule.min_deviation_pct / 100.0)
    floors = c.floors or (minimum,) * len(c.good)
    limits = [max(scale.k.cell * scale.sd, f) for f in floors]
    for i, d, limit in zip(c.good, devs, limits, strict=True):
        if abs(d) > limit:
            v = out[i]
            out[i] = NodeValue(v.node, v.status, v.value, v.trials, v.deviation_pct, True)
    floor: Literal["noise", "minimum"] = "minimum" if c.floors is None else "noise"
    return Spread(c.key, metric, tuple(out), med, range_pct, stats.pct_of_log(min(limits)), floor)


def _shifts(
    cells: Sequence[_FleetCell],
    metric: MetricSpec,
    nodes: Sequence[Node],
    rule: Rule,
    scale: Scale,
) -> list[Shift]:
    """The everywhere test: each node's median deviation over the figure's judged cells."""
    devs: dict[int, list[float]] = {}
    noise: dict[int, list[float]] = {}
    for c in (x for x in cells if x.judged):
        for j, (i, d) in enumerate(zip(c.good, c.deviations, strict=True)):
            devs.setdefault(i, []).append(d)
            if c.floors is not None:
                noise.setdefault(i, []).append(c.floors[j])
    out = []
    for i, ds in devs.items():
        shift = stats.median(ds)
        trials = stats.median(noise[i]) if noise.get(i) else 0.0
        floor = max(math.log1p(rule.min_shift_pct / 100.0), trials)
        limit = max(scale.k.node * scale.sd, floor)
        if abs(shift) > limit:
            pct, limit_pct = stats.pct_of_log(shift), stats.pct_of_log(limit)
            out.append(Shift(nodes[i].name, metric, pct, len(ds), limit_pct))
    return out


def judge(
    nodes: Sequence[Node],
    keys: Sequence[Key],
    metrics: Sequence[MetricSpec],
    rule: Rule,
    noise: dict[str, stats.PooledNoise],
) -> Judged:
    """Both tests, for every figure in `metrics` over the cells `keys` of its phase."""
    spreads: list[Spread] = []
    scales: dict[str, Scale] = {}
    shifts: list[Shift] = []
    for metric in metrics:
        pooled = noise.get(metric.name)
        cells = [
            _with_floors(_gather(key, metric, nodes), pooled)
            for key in keys
            if key[0] == metric.phase
        ]
        scale = _scale(cells, len(nodes), rule)
        spreads += [_spread(c, metric, rule, scale) for c in cells]
        if scale is not None:
            scales[metric.name] = scale
            shifts += _shifts(cells, metric, nodes, rule, scale)
    return Judged(tuple(spreads), scales, tuple(shifts))
