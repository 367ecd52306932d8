"""The fleet report as tables: `VerdictTable` data as the other verdicts have
(bench.verdict.tables), rendered to Markdown for the terminal here and to HTML in `page`, so
the two cannot disagree."""

from __future__ import annotations

from bench.fleet.report import FleetReport
from bench.fleet.rule import NodeValue, Spread
from bench.fleet.words import node_lines, noise_lines, rule_line, settings_lines, spread_lines
from bench.verdict.cells import METRICS, MetricSpec
from bench.verdict.tables import TCell, VerdictTable, key_cells, markdown, pct, trust_lines


def cell_label(s: Spread) -> str:
    phase, ctx, conc = s.key
    return f"{ctx} prefill" if phase == "prefill" else f"{ctx} x{conc}"


def _node_cell(v: NodeValue, metric: MetricSpec) -> TCell:
    if v.status is None:
        return TCell("not measured", "na")
    if v.status != "valid":
        css = "oc" if v.status == "over_capacity" else "warn"
        return TCell(v.status.replace("_", " "), css)
    text = metric.show(v.value)
    if v.outlier and v.deviation_pct is not None:
        worse = (v.deviation_pct < 0) == metric.higher_is_better
        return TCell(f"{text} ({pct(v.deviation_pct)} {'▼' if worse else '▲'})",
                     "worse" if worse else "better")  # fmt: skip
    return TCell(text)


def _stands_out(s: Spread) -> TCell:
    if s.outliers:
        return TCell(", ".join(f"{v.node} {pct(v.deviation_pct)}" for v in s.outliers), "worse")
    valid = sum(v.status == "valid" for v in s.values)
    if {v.status for v in s.values} == {"over_capacity"}:
        return TCell("over capacity on every node", "oc")
    if not s.judged:
        return TCell(f"not judged: valid on {valid} of {len(s.values)} nodes", "na")
    if valid < len(s.values):
        return TCell(f"none of the {valid} valid nodes", "warn")
    return TCell("none")


def fleet_tables(r: FleetReport) -> list[VerdictTable]:
    out = []
    names = [n.name for n in r.nodes]
    for metric in METRICS:
        rows = []
        for s in (x for x in r.spreads if x.metric is metric):
            if not any(v.status is not None for v in s.values):
                continue
            row = key_cells(s.key)
            row += [_node_cell(v, metric) for v in s.values]
            row.append(TCell(metric.show(s.median)))
            row.append(TCell("—" if s.range_pct is None else f"{s.range_pct:.1f} %"))
            limit = "—" if s.threshold_pct is None else f"±{s.threshold_pct:.1f} %"
            row += [TCell(limit), _stands_out(s)]
            rows.append(row)
        if rows:
            head = ["Context"] + (["Requests"] if metric.phase == "decode" else [])
            head += [*names, "Median", "Range", "Threshold", "Stands out"]
            phase = "Prefill" if metric.phase == "prefill" else "Sustained decode"
            out.append(VerdictTable(f"{phase}: {metric.label}", head, rows))
    return out


def head_lines(r: FleetReport) -> list[str]:
    lines = trust_lines([n.run for n in r.nodes])
    lines += [f"## Fleet: {len(r.nodes)} nodes", ""]
    lines += [f"- {n.name}: {n.run.name}" for n in r.nodes]
    lines.append("")
    settings = settings_lines(r)
    if settings:
        lines += [*settings, ""]
    speeds = {n.run.speed_factor for n in r.nodes}
    if speeds != {1.0}:
        shown = ", ".join(f"{x:g}" for x in sorted(speeds))
        lines += [f"Twin speed factor {shown}: every figure at server speed.", ""]
    lines += [rule_line(r), "Spread between nodes:", *spread_lines(r)]
    lines += ["Noise:", *noise_lines(r), ""]
    found = node_lines(r)
    if found:
        lines += ["Nodes that stand out:", *(f"- {line}" for line in found), ""]
    if r.not_judged:
        cells = sorted({s.key for s in r.not_judged}, key=lambda k: (k[0] != "prefill", k))
        lines.append(f"Cells not judged on every node ({len(cells)}):")
        for key in cells:
            s = next(x for x in r.not_judged if x.key == key)
            bad = [
                f"{v.node} {'not measured' if v.status is None else v.status.replace('_', ' ')}"
                for v in s.values
                if v.status != "valid"
            ]
            label = cell_label(s)
            lines.append(f"- {label}: {', '.join(bad) or 'valid on too few nodes'}")
        lines.append("")
    return lines


def fleet_markdown(r: FleetReport) -> str:
    body = [markdown(t) for t in fleet_tables(r)]
    return "\n".join(head_lines(r)) + "\n" + "\n\n".join(body) + f"\n\n{r.verdict()}\n"
