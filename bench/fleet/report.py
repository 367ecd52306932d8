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
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from bench import stats
from bench.errors import Exit
from bench.host import telemetry
from bench.provenance import sources as provenance
from bench.run import layout
from bench.verdict import run_source
from bench.verdict import settings as settings_mod
from bench.verdict.cells import BY_NAME, METRICS, Key, MetricSpec, RunFigures, Status, metrics_of
from bench.verdict.reproduce import pooled_noise

MIN_NODES = 3
MAD_TO_SD = 1.4826
DEFAULT_K = 3.5
DEFAULT_MIN_DEVIATION_PCT = 5.0
NOISE_SE = 3.0  # standard errors of a difference of two means the floor asks for
# A node's mean SM clock in the windows is named when it differs from the others' median
# by more than this (clocks move by a few MHz from run to run).
CLOCK_TOLERANCE_PCT = 2.0
# A relative sd below this is float rounding of identical repeats, not a noise estimate.
NO_NOISE = 1e-9
# What a fleet's nodes must share: the verdict's settings, and the server image.
NAMES: tuple[str, ...] = (*settings_mod.NAMES, "image")
# Environment facts compared between nodes, in the order they are named.
FACTS: tuple[str, ...] = (
    "driver",
    "CUDA",
    "GPU model",
    "GPU count",
    "GPU max SM clock",
    "GPU power limit",
    "image",
    "vLLM",
    "kernel",
)


@dataclass(frozen=True)
class Rule:
    k: float = DEFAULT_K
    min_deviation_pct: float = DEFAULT_MIN_DEVIATION_PCT
    accept: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Node:
    name: str
    run: RunFigures
    facts: dict[str, str] = field(default_factory=dict)
    # The mean SM clock of its GPUs over the measured windows (gpu_telemetry.jsonl).
    window_clock_mhz: float | None = None

    @property
    def settings(self) -> dict[str, str]:
        out = dict(self.run.settings)
        if self.run.image_id:
            out["image"] = self.run.image_id
        return out


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


@dataclass(frozen=True)
class Recorded:
    """What a bundle records beside its figures: environment.json, and the GPUs' mean SM
    clock over the measured windows (None without GPU telemetry)."""

    env: Any
    window_clock_mhz: float | None


def read_recorded(directory: Path) -> Recorded:
    """For `run_source.load_run_with`: read from the verified bundle's directory."""
    return Recorded(
        run_source.read_environment(directory),
        window_clock(directory / telemetry.GPU_TELEMETRY_NAME),
    )


def window_clock(path: Path) -> float | None:
    """The mean over windows and GPUs of the mean SM clock; None when not recorded or
    not readable (a telemetry file that does not parse is no evidence either way)."""
    try:
        windows = telemetry.read_windows(path)
    except (OSError, ValueError):  # pydantic's ValidationError, bad UTF-8, bad JSON
        return None
    clocks = [
        g.mean_sm_clock_mhz
        for w in windows
        for g in w.telemetry.gpus
        if g.mean_sm_clock_mhz is not None
    ]
    return stats.mean(clocks) if clocks else None


def load_nodes(
    paths: Sequence[Path], how: run_source.Verification, names: Sequence[str] | None = None
) -> list[Node]:
    """One node per bundle, each verified as `bench compare` verifies (VerifyFailed,
    exit 5, for one that does not), named `names` when the caller knows the hosts (the
    hostname a container records is its own), else by `node_names`."""
    loaded = [run_source.load_run_with(p, how, read_recorded) for p in paths]
    if names is None:
        names = node_names([str(p) for p in paths], [hostname(rec.env) for _, rec in loaded])
    return [
        Node(name, run, facts_of(rec.env), rec.window_clock_mhz)
        for name, (run, rec) in zip(names, loaded, strict=True)
    ]


def facts_of(env: Any) -> dict[str, str]:
    """The environment facts a fleet compares, from environment.json as plain JSON; a
    fact that is not recorded is left out."""
    env = env if isinstance(env, dict) else {}
    gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else {}
    gpus = [g for g in gpu.get("gpus") or [] if isinstance(g, dict)]

    def joined(key: str, unit: str) -> str | None:
        found = sorted({float(g[key]) for g in gpus if isinstance(g.get(key), int | float)})
        return ", ".join(f"{v:g} {unit}" for v in found) if found else None

    host = env.get("host") if isinstance(env.get("host"), dict) else {}
    names = sorted({settings_mod.gpu_name(str(g.get("name", "?"))) for g in gpus})
    out: dict[str, str | None] = {
        "driver": gpu.get("driver_version"),
        "CUDA": gpu.get("cuda_version"),
        "GPU model": ", ".join(names) if names else None,
        "GPU count": str(len(gpus)) if gpus else None,
        "GPU max SM clock": joined("max_sm_clock_mhz", "MHz"),
        "GPU power limit": joined("power_limit_w", "W"),
        "image": provenance.image_id(env),
        "vLLM": env.get("vllm_version"),
        "kernel": host.get("kernel"),
    }
    return {k: str(v) for k, v in out.items() if v is not None and str(v) != ""}


def node_names(paths: Sequence[str], hostnames: Sequence[str | None]) -> list[str]:
    """Each node's name: its recorded hostname when every bundle records a different one,
    else the bundle's name (without .tar.gz), else that with a number."""
    if all(hostnames) and len(set(hostnames)) == len(hostnames):
        return [str(h) for h in hostnames]
    names = []
    for p in paths:
        name = p.rstrip("/").rsplit("/", 1)[-1]
        for suffix in (".tar.gz", ".tgz"):
            name = name.removesuffix(suffix)
        if name == layout.RESULTS:
            parts = p.rstrip("/").rsplit("/", 2)
            name = parts[-2] if len(parts) >= 2 else name
        names.append(name)
    if len(set(names)) != len(names):
        names = [f"{n}#{i + 1}" for i, n in enumerate(names)]
    return names


def hostname(env: Any) -> str | None:
    host = env.get("host") if isinstance(env, dict) else None
    name = host.get("hostname") if isinstance(host, dict) else None
    return str(name) if name else None


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


# --- words ------------------------------------------------------------------------


def _amount(deviations: Sequence[float]) -> str:
    sizes = sorted(abs(d) for d in deviations)

    def fmt(x: float) -> str:
        return f"{x:.0f}" if x >= 5 else f"{x:.1f}"

    lo, hi = fmt(sizes[0]), fmt(sizes[-1])
    return f"{lo} %" if lo == hi else f"{lo}–{hi} %"


def _levels_text(concs: Sequence[int], levels: Sequence[int]) -> str:
    concs = sorted(set(concs))
    idx = [levels.index(c) for c in concs if c in levels]
    contiguous = len(idx) == len(concs) and idx == list(range(idx[0], idx[0] + len(idx)))
    if len(concs) == 1:
        return f"{concs[0]} request{'s' if concs[0] != 1 else ''}"
    if contiguous:
        return f"{concs[0]}–{concs[-1]} requests"
    return f"{', '.join(str(c) for c in concs)} requests"


def where(cells: Sequence[Key], levels: Sequence[int], contexts: Sequence[str]) -> str:
    """`64–128 requests`, `64–128 requests (8K, 16K)`, `1 request at 8K and 64–128
    requests at 16K`, `prefill at 8K`."""
    parts = []
    decode: dict[str, list[int]] = {}
    for phase, ctx, conc in cells:
        if phase == "decode":
            decode.setdefault(ctx, []).append(conc)
    if decode:
        sets = {tuple(sorted(set(v))) for v in decode.values()}
        in_order = [c for c in contexts if c in decode]
        if len(sets) == 1:
            text = _levels_text(next(iter(sets)), levels)
            if len(contexts) > 1:
                text += f" ({', '.join(in_order)})"
            parts.append(text)
        else:
            parts.append(
                " and ".join(f"{_levels_text(decode[c], levels)} at {c}" for c in in_order)
            )
    prefill = [ctx for phase, ctx, _ in cells if phase == "prefill"]
    if prefill:
        parts.append(f"prefill at {', '.join(dict.fromkeys(prefill))}")
    return " and ".join(parts)


def _others_text(values: Mapping[str, str | None]) -> str:
    groups: dict[str, list[str]] = {}
    for node, value in values.items():
        groups.setdefault(value or "not recorded", []).append(node)
    if len(groups) == 1:
        return next(iter(groups))
    return ", ".join(f"{v} ({', '.join(ns)})" for v, ns in groups.items())


def environment_differences(report: FleetReport, name: str) -> list[str]:
    """`its driver is 580.65 while the others run 580.82`, one per fact the node does
    not share with every other node."""
    me = report.node(name)
    others = [n for n in report.nodes if n.name != name]
    out = []
    for fact in FACTS:
        mine = me.facts.get(fact)
        theirs = {n.name: n.facts.get(fact) for n in others}
        if mine is None and all(v is None for v in theirs.values()):
            continue
        if all(v == mine for v in theirs.values()):
            continue
        verb = "run" if fact in ("driver", "CUDA", "image", "vLLM", "kernel") else "have"
        out.append(
            f"its {fact} is {mine or 'not recorded'} while the others {verb} {_others_text(theirs)}"
        )
    clocks = [n.window_clock_mhz for n in others if n.window_clock_mhz is not None]
    if me.window_clock_mhz is not None and clocks:
        ref = stats.median(clocks)
        if abs(me.window_clock_mhz / ref - 1.0) * 100.0 > CLOCK_TOLERANCE_PCT:
            out.append(
                f"its GPUs ran at {me.window_clock_mhz:,.0f} MHz (mean SM clock in the "
                f"windows) while the others ran {ref:,.0f} MHz (median)"
            )
    return out


def finding_texts(report: FleetReport, name: str) -> list[str]:
    """`gpu07 is 9 % slower at 64–128 requests (Total tok/s)`: the node's findings, the
    figures that stand out at the same cells in the same direction said once."""
    groups: dict[tuple[bool, str], list[Finding]] = {}
    for f in report.findings:
        if f.node == name:
            place = where([k for k, _ in f.cells], report.levels, report.contexts)
            groups.setdefault((f.slower, place), []).append(f)
    out = []
    for (slower, place), found in groups.items():
        amount = _amount([d for f in found for _, d in f.cells])
        labels = ", ".join(f.metric.label for f in found)
        out.append(f"{amount} {'slower' if slower else 'faster'} at {place} ({labels})")
    return [f"{name} is {' and '.join(out)}"] if out else []


def node_lines(report: FleetReport) -> list[str]:
    """Per node that stands out: what, where, and how its environment differs."""
    out = []
    for name in report.outlier_nodes:
        texts = finding_texts(report, name)
        diffs = environment_differences(report, name)
        recorded = sorted({k for n in report.nodes for k in n.facts})
        env = (
            "; ".join(diffs)
            if diffs
            else "no recorded environment difference from the others"
            + (f" ({', '.join(recorded)} compared)" if recorded else " (none recorded)")
        )
        out.append(f"{'; '.join(texts)}; {env}")
    return out


def noise_lines(report: FleetReport) -> list[str]:
    out = []
    r = report.rule
    for phase in ("decode", "prefill"):
        for metric in metrics_of(phase):
            if not any(s.metric is metric and s.values for s in report.spreads):
                continue
            n = report.noise.get(metric.name)
            if n is None or n.sd_log <= NO_NOISE:
                why = "one trial per node" if n is None else "repeats identical"
                out.append(
                    f"- {metric.label}: no run-to-run noise estimate ({why}): "
                    f"a node stands out only beyond {r.min_deviation_pct:g} % from the median"
                )
            elif n.sound:
                out.append(
                    f"- {metric.label}: run-to-run sd of one trial {n.sd_log * 100:.2f} % "
                    f"({n.df} degrees of freedom, pooled over {n.cells} cells of all nodes)"
                )
            else:
                out.append(
                    f"- {metric.label}: run-to-run noise differs between cells: each cell's "
                    f"own, pooled over the nodes (overall {n.sd_log * 100:.2f} %)"
                )
    return out


def settings_lines(report: FleetReport) -> list[str]:
    out = []
    if report.settings:
        out.append("Settings that differ between nodes (most nodes / this node):")
        for d in report.settings:
            mark = " (accepted)" if d.accepted else ""
            out.append(f"- {d.name}: {d.common} / {d.node}: {d.theirs}{mark}")
    if report.unchecked:
        out.append(
            "Settings not checked (not recorded on every node, or simulated by the twin): "
            + ", ".join(report.unchecked)
        )
    if report.blocking:
        names = ",".join(dict.fromkeys(d.name for d in report.blocking))
        out.append(
            f"NOT COMPARABLE: {names} differ between nodes; pass --accept {names} to report anyway"
        )
    return out


def rule_line(report: FleetReport) -> str:
    r = report.rule
    return (
        f"A node stands out in a cell when its log value is more than k = {r.k:g} × 1.4826 × "
        f"MAD (over the {len(report.nodes)} nodes) from the median AND beyond the "
        f"run-to-run noise ({NOISE_SE:g} × sd × √(2/trials)), or beyond "
        f"{r.min_deviation_pct:g} % where there is no noise estimate; at least {MIN_NODES} "
        "valid nodes per cell. Δ = node against the fleet median."
    )
