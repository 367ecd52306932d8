"""A fleet report in words: where a node stands out (`64–128 requests (8K, 16K)`), by how
much, how its environment differs from the others', and the lines on noise, settings and
the rule that the Markdown tables and the HTML page print.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from bench import stats
from bench.fleet.nodes import FACTS
from bench.fleet.report import Finding, FleetReport
from bench.fleet.rule import MIN_NODES, NO_NOISE, NOISE_SE, Shift
from bench.verdict.cells import METRICS, Key, metrics_of

# A node's mean SM clock in the windows is named when it differs from the others' median
# by more than this (clocks move by a few MHz from run to run).
CLOCK_TOLERANCE_PCT = 2.0


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
    requests at 16K`, `1–2 requests (128, 256) and 1 request at 1K`, `prefill at 8K`."""
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
        else:  # contexts that share their levels said together, in context order
            by_levels: dict[tuple[int, ...], list[str]] = {}
            for c in in_order:
                by_levels.setdefault(tuple(sorted(set(decode[c]))), []).append(c)
            parts.append(
                " and ".join(
                    f"{_levels_text(lv, levels)} at {ctxs[0]}"
                    if len(ctxs) == 1
                    else f"{_levels_text(lv, levels)} ({', '.join(ctxs)})"
                    for lv, ctxs in by_levels.items()
                )
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
    by_way: dict[tuple[bool, int], list[Shift]] = {}
    for sh in report.shifts:
        if sh.node == name:
            by_way.setdefault((sh.slower, sh.cells), []).append(sh)
    for (slower, cells), shifts in by_way.items():
        amount = _amount([sh.deviation_pct for sh in shifts])
        labels = ", ".join(sh.metric.label for sh in shifts)
        way = "slower" if slower else "faster"
        out.append(f"{amount} {way} in the median of its {cells} cells ({labels})")
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
    k = f"k = {r.k:g} (given)" if r.k is not None else "k_cell"
    return (
        f"A node stands out in a cell when it is more than {k} sds of the spread between "
        "nodes from the median of the other nodes (the spread pooled over the figure's "
        f"cells, the node furthest off left out) AND beyond the run-to-run noise "
        f"({NOISE_SE:g} × sd × √(2/trials)), or beyond {r.min_deviation_pct:g} % where "
        "there is no noise estimate. It is off across a figure when the median of its "
        f"deviations is more than k_node sds and beyond {r.min_shift_pct:g} %. k_cell and "
        "k_node depend on the numbers of nodes and cells, set so that a fleet of equals has "
        f"a node named 1 % of the time. At least {MIN_NODES} valid nodes per cell; "
        "Δ = node against the median of the other nodes."
    )


def spread_lines(report: FleetReport) -> list[str]:
    """Per figure, the spread between nodes the rule scaled by, and k."""
    out = []
    for metric in METRICS:
        sc = report.scales.get(metric.name)
        if sc is None:
            continue
        if sc.sd <= NO_NOISE:
            out.append(
                f"- {metric.label}: no spread between nodes over {sc.cells} "
                f"cell{'s' if sc.cells != 1 else ''} (the same value on every node): "
                "only the floor below applies"
            )
            continue
        out.append(
            f"- {metric.label}: spread between nodes {sc.sd * 100:.2f} % "
            f"(as an sd, pooled over {sc.cells} cell{'s' if sc.cells != 1 else ''}), "
            f"k = {sc.k.cell:.2f} in one cell, {sc.k.node:.2f} across the cells: a node "
            f"must lie {stats.pct_of_log(sc.k.cell * sc.sd):.1f} % off in one cell, or "
            f"{stats.pct_of_log(sc.k.node * sc.sd):.1f} % in the median of its cells"
        )
    return out
