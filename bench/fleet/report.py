"""A fleet report: one sweep run on several nodes with the same settings; per cell and
figure the value on every node, the median and spread, and the nodes that stand out.

The outlier rule, per cell and figure, over the nodes where the cell is valid (at least
`MIN_NODES`; with fewer a median cannot tell which node is the odd one):

  y_i = ln(value of node i)     (a node's value: the mean of its trials, at server speed)
  m   = median over nodes of y_i
  s   = 1.4826 × median over nodes of |y_i − m|     (the MAD, scaled to a normal sd)
  node i stands out when |y_i − m| > k × s          (k = 3.5 by default)
                     and |y_i − m| > floor

  floor, when the run-to-run noise is known (nodes ran 2 or more trials):
      3 × sd × sqrt(2 / n_i), sd the relative run-to-run sd of one trial of the figure,
      n_i node i's trials: three standard errors of the difference between two n_i-trial
      means. sd is the noise `bench compare` uses (`bench.verdict.reproduce.pooled_noise`:
      pooled over the valid cells of all nodes when the cells' noise is alike by its
      F-test), else this cell's own, pooled over the nodes (`bench.stats.pooled_sd_log`).
  floor, with one trial per node (no noise estimate): the stated minimum relative
      deviation, 5 % by default; the report says that it could not measure the noise.

Both conditions work on log values, so a node's deviation is relative (Δ % against the
fleet's median, (exp(y_i − m) − 1) × 100) and "slower" reads the same for tok/s and for
latencies. The MAD condition asks "is it far from the others given how much the others
spread"; the floor asks "is that beyond what one node does from run to run" (a MAD of
nodes that agree to 0.1 % would otherwise name a node 0.5 % off).

Settings that differ between nodes (window, max tokens, API, model, engine, launch flags,
GPU count and model, image id) make the report NOT COMPARABLE unless accepted by name.
Environment facts (driver, CUDA, GPU model and count, GPU max SM clock and power limit,
image id, vLLM version, kernel) are read from each bundle's environment.json, the GPUs'
mean SM clock over the measured windows from its gpu_telemetry.jsonl; for a node that
stands out, the facts it does not share with the others are named beside it (the clock
when it differs from the others' median by more than CLOCK_TOLERANCE_PCT).

This module owns the rule and FleetReport; `nodes` loads the nodes and their facts,
`words` says the findings in sentences, `view` renders the report.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bench import stats
from bench.errors import Exit
from bench.fleet.nodes import Node
from bench.verdict import settings as settings_mod
from bench.verdict.cells import BY_NAME, METRICS, Key, MetricSpec, Status
from bench.verdict.reproduce import pooled_noise

# load_nodes is the nodes module's: callers of the report (the orchestrator) reach it here.

MIN_NODES = 3
MAD_TO_SD = 1.4826
DEFAULT_K = 3.5
DEFAULT_MIN_DEVIATION_PCT = 5.0
NOISE_SE = 3.0  # standard errors of a difference of two means the floor asks for
# A relative sd below this is float rounding of identical repeats, not a noise estimate.
NO_NOISE = 1e-9
# What a fleet's nodes must share: the verdict's settings, and the server image.
NAMES: tuple[str, ...] = (*settings_mod.NAMES, "image")


@dataclass(frozen=True)
class Rule:
    k: float = DEFAULT_K
    min_deviation_pct: float = DEFAULT_MIN_DEVIATION_PCT
    accept: frozenset[str] = frozenset()


@dataclass(frozen=True)
class NodeValue:
    node: str
    status: Status | None  # None: the node did not measure the cell
    value: float | None
    trials: int
    deviation_pct: float | None = None  # against the fleet's median
    outlier: bool = False


@dataclass(frozen=True)
class Spread:
    """One cell's figure across the fleet."""

    key: Key
    metric: MetricSpec
    values: tuple[NodeValue, ...]
    median: float | None = None
    robust_sd_pct: float | None = None  # 1.4826 x MAD of the log values, as %
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
class Finding:
    """One node standing out on one figure, in one direction, over one or more cells."""

    node: str
    metric: MetricSpec
    slower: bool  # worse: lower tok/s or a longer latency
    cells: tuple[tuple[Key, float], ...]  # (cell, Δ %)


@dataclass(frozen=True)
class SettingDifference:
    node: str
    name: str
    common: str  # what most nodes record
    theirs: str
    accepted: bool


@dataclass(frozen=True)
class FleetReport:
    nodes: tuple[Node, ...]
    rule: Rule
    spreads: tuple[Spread, ...]
    noise: dict[str, stats.PooledNoise]
    settings: tuple[SettingDifference, ...]
    unchecked: tuple[str, ...]
    levels: tuple[int, ...]  # every concurrency level of the fleet
    contexts: tuple[str, ...]

    @property
    def blocking(self) -> tuple[SettingDifference, ...]:
        return tuple(d for d in self.settings if not d.accepted)

    @property
    def findings(self) -> tuple[Finding, ...]:
        found: dict[tuple[str, str, bool], list[tuple[Key, float]]] = {}
        for s in self.spreads:
            for v in s.outliers:
                assert v.deviation_pct is not None
                slower = (v.deviation_pct < 0) == s.metric.higher_is_better
                found.setdefault((v.node, s.metric.name, slower), []).append(
                    (s.key, v.deviation_pct)
                )
        order = {n.name: i for i, n in enumerate(self.nodes)}
        metric_order = {m.name: i for i, m in enumerate(METRICS)}
        keys = sorted(found, key=lambda t: (order[t[0]], metric_order[t[1]], not t[2]))
        return tuple(Finding(k[0], BY_NAME[k[1]], k[2], tuple(found[k])) for k in keys)

    @property
    def outlier_nodes(self) -> tuple[str, ...]:
        named = {f.node for f in self.findings}
        return tuple(n.name for n in self.nodes if n.name in named)

    @property
    def not_judged(self) -> tuple[Spread, ...]:
        """Cells measured on some node that could not be judged: valid on fewer than
        MIN_NODES nodes, or valid on some and not on others."""
        out = []
        for s in self.spreads:
            statuses = {v.status for v in s.values}
            if statuses == {"over_capacity"}:
                continue
            if not s.judged or statuses != {"valid"}:
                out.append(s)
        return tuple(out)

    @property
    def exit_code(self) -> Exit:
        """10 settings differ (not accepted), 1 a node stands out, 9 cells that could not
        be judged on every node, else 0."""
        if self.blocking:
            return Exit.NOT_COMPARABLE
        if self.findings:
            return Exit.NOT_REPRODUCED
        if self.not_judged:
            return Exit.PARTIAL
        return Exit.OK

    def node(self, name: str) -> Node:
        return next(n for n in self.nodes if n.name == name)

    def verdict(self) -> str:
        parts = []
        if self.blocking:
            names = ",".join(dict.fromkeys(d.name for d in self.blocking))
            parts.append(f"NOT COMPARABLE ({names} DIFFER BETWEEN NODES)")
        named = self.outlier_nodes
        if named:
            word = "STANDS" if len(named) == 1 else "STAND"
            parts.append(f"{len(named)} OF {len(self.nodes)} NODES {word} OUT: {', '.join(named)}")
        else:
            parts.append(f"NO NODE STANDS OUT ({len(self.nodes)} NODES)")
        if self.not_judged:
            cells = {s.key for s in self.not_judged}
            parts.append(f"{len(cells)} CELLS NOT JUDGED ON EVERY NODE")
        return "FLEET: " + "; ".join(parts)


def _settings(
    nodes: Sequence[Node], accept: frozenset[str]
) -> tuple[tuple[SettingDifference, ...], tuple[str, ...]]:
    twin = all(n.run.twin for n in nodes)
    skip = settings_mod.TWIN_SIMULATED if twin else frozenset()
    common: dict[str, str] = {}
    unchecked = []
    for name in NAMES:
        found = [n.settings[name] for n in nodes if name in n.settings]
        if name in skip or len(found) < len(nodes):
            unchecked.append(name)
            continue
        common[name] = Counter(found).most_common(1)[0][0]
    out = []
    for n in nodes:
        check = settings_mod.check(common, n.settings, accept, names=NAMES, skip=skip)
        out += [
            SettingDifference(n.name, d.name, d.ours, d.theirs, d.accepted)
            for d in check.differences
        ]
    return tuple(out), tuple(unchecked)


def _cell_noise(
    metric: MetricSpec, values: Sequence[tuple[float, ...]], pooled: stats.PooledNoise | None
) -> float | None:
    """The relative run-to-run sd of one trial for this cell, or None when unknown (one
    trial per node, or repeats so alike that their sd is 0: no estimate of the noise)."""
    if pooled is not None and pooled.sound and pooled.df > 0 and pooled.sd_log > NO_NOISE:
        return pooled.sd_log
    own = stats.pooled_sd_log(values)
    return own[0] if own is not None and own[0] > NO_NOISE else None


def spread(
    key: Key,
    metric: MetricSpec,
    nodes: Sequence[Node],
    rule: Rule,
    pooled: stats.PooledNoise | None,
) -> Spread:
    raw: list[NodeValue] = []
    for n in nodes:
        cell = n.run.cell(key)
        if cell is None:
            raw.append(NodeValue(n.name, None, None, 0))
            continue
        trials = cell.trials.get(metric.name, ())
        raw.append(NodeValue(n.name, cell.status, cell.value(metric.name), len(trials)))
    good = [
        (i, v)
        for i, v in enumerate(raw)
        if v.status == "valid" and v.value is not None and v.value > 0
    ]
    if not good:
        return Spread(key, metric, tuple(raw))
    values = [v.value for _, v in good if v.value is not None]
    med = stats.median(values)
    range_pct = (max(values) - min(values)) / med * 100.0
    logs = [math.log(x) for x in values]
    m = stats.median(logs)
    s = MAD_TO_SD * stats.median([abs(y - m) for y in logs])
    out = list(raw)
    for (i, v), y in zip(good, logs, strict=True):
        out[i] = NodeValue(v.node, v.status, v.value, v.trials, math.expm1(y - m) * 100.0)
    if len(good) < MIN_NODES:
        return Spread(key, metric, tuple(out), med, s * 100.0, range_pct)
    groups = []
    for n in nodes:
        cell = n.run.cell(key)
        if cell is not None and cell.status == "valid":
            groups.append(cell.trials.get(metric.name, ()))
    sd = _cell_noise(metric, groups, pooled)
    floors: list[float] = []
    for (i, v), y in zip(good, logs, strict=True):
        if sd is not None:
            floor = NOISE_SE * sd * math.sqrt(2.0 / max(v.trials, 1))
        else:
            floor = math.log1p(rule.min_deviation_pct / 100.0)
        limit = max(rule.k * s, floor)
        floors.append(limit)
        if abs(y - m) > limit:
            out[i] = NodeValue(v.node, v.status, v.value, v.trials, out[i].deviation_pct, True)
    threshold = math.expm1(min(floors)) * 100.0
    return Spread(
        key,
        metric,
        tuple(out),
        med,
        s * 100.0,
        range_pct,
        threshold,
        "noise" if sd is not None else "minimum",
    )


def fleet(nodes: Sequence[Node], rule: Rule) -> FleetReport:
    runs = [n.run for n in nodes]
    noise = pooled_noise(runs)
    keys = sorted(
        {k for r in runs for k in r.cells},
        key=lambda k: (k[0] != "prefill", _size(k[1]), k[2]),
    )
    spreads = [
        spread(key, metric, nodes, rule, noise.get(metric.name))
        for metric in METRICS
        for key in keys
        if key[0] == metric.phase
    ]
    differences, unchecked = _settings(nodes, rule.accept)
    return FleetReport(
        nodes=tuple(nodes),
        rule=rule,
        spreads=tuple(spreads),
        noise=noise,
        settings=differences,
        unchecked=unchecked,
        levels=tuple(sorted({k[2] for k in keys if k[0] == "decode"})),
        contexts=tuple(dict.fromkeys(k[1] for k in sorted(keys, key=lambda k: _size(k[1])))),
    )


def _size(label: str) -> float:
    scale = {"K": 1024.0, "M": 1048576.0}.get(label[-1:], 1.0)
    try:
        return float(label[:-1]) * scale
    except ValueError:
        try:
            return float(label)
        except ValueError:
            return math.inf
