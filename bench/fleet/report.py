"""A fleet report: one sweep run on several nodes with the same settings; per cell and
figure the value on every node, the median and spread, and the nodes that stand out (the
rule: `rule`).

Settings that differ between nodes (window, max tokens, API, model, engine, launch flags,
GPU count and model, image id) make the report NOT COMPARABLE unless accepted by name.
Environment facts (driver, CUDA, GPU model and count, GPU max SM clock and power limit,
image id, vLLM version, kernel) are read from each bundle's environment.json, the GPUs'
mean SM clock over the measured windows from its gpu_telemetry.jsonl; for a node that
stands out, the facts it does not share with the others are named beside it (the clock
when it differs from the others' median by more than CLOCK_TOLERANCE_PCT).

This module owns FleetReport; `rule` judges, `nodes` loads the nodes and their facts,
`words` says the findings in sentences, `tables` and `page` render the report.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from bench import stats
from bench.errors import Exit
from bench.fleet.nodes import Node
from bench.fleet.rule import Rule, Scale, Shift, Spread, judge
from bench.verdict import settings as settings_mod
from bench.verdict.cells import BY_NAME, METRICS, Key, MetricSpec
from bench.verdict.reproduce import pooled_noise

# What a fleet's nodes must share: the verdict's settings, and the server image.
NAMES: tuple[str, ...] = (*settings_mod.NAMES, "image")


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
    scales: dict[str, Scale]  # per figure judged in some cell
    shifts: tuple[Shift, ...]  # nodes off across a figure's cells
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
        named = {f.node for f in self.findings} | {s.node for s in self.shifts}
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
        if self.outlier_nodes:
            return Exit.NOT_REPRODUCED
        if self.not_judged:
            return Exit.PARTIAL
        return Exit.OK

    @property
    def unseen_pct(self) -> float | None:
        """The largest deviation of a whole node, over every cell of a figure, that the
        everywhere test would not name: max over figures of max(k_node x s, the stated
        minimum shift); None when no figure was judged. A trial floor can raise a node's
        own limit further (its line in the tables)."""
        floor = math.log1p(self.rule.min_shift_pct / 100.0)
        limits = [max(s.k.node * s.sd, floor) for s in self.scales.values()]
        return stats.pct_of_log(max(limits)) if limits else None

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
            unseen = self.unseen_pct
            if unseen is None:
                parts.append(f"NO NODE STANDS OUT ({len(self.nodes)} NODES)")
            else:  # what the rule could not have seen: never a clean bill (issue 44)
                parts.append(
                    f"NO NODE STANDS OUT ({len(self.nodes)} NODES; ONE OFF BY UNDER "
                    f"{unseen:.1f} % IN EVERY CELL WOULD NOT BE NAMED)"
                )
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


def fleet(nodes: Sequence[Node], rule: Rule) -> FleetReport:
    runs = [n.run for n in nodes]
    noise = pooled_noise(runs)
    keys = sorted(
        {k for r in runs for k in r.cells},
        key=lambda k: (k[0] != "prefill", _size(k[1]), k[2]),
    )
    judged = judge(nodes, keys, METRICS, rule, noise)
    differences, unchecked = _settings(nodes, rule.accept)
    return FleetReport(
        nodes=tuple(nodes),
        rule=rule,
        spreads=judged.spreads,
        noise=noise,
        scales=judged.scales,
        shifts=judged.shifts,
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
