"""The fleet report as one self-contained HTML page: the findings, the nodes' environment,
a strip plot per figure and the tables of `tables`."""

from __future__ import annotations

import html

from bench.fleet.nodes import FACTS
from bench.fleet.report import FleetReport
from bench.fleet.tables import cell_label, fleet_tables, head_lines
from bench.fleet.words import node_lines
from bench.verdict import page, plots
from bench.verdict.cells import METRICS, MetricSpec


def _strip(r: FleetReport, metric: MetricSpec) -> plots.Strip | None:
    spreads = [s for s in r.spreads if s.metric is metric and any(
        v.deviation_pct is not None for v in s.values)]  # fmt: skip
    if not spreads:
        return None
    points = [
        plots.StripPoint(i, v.deviation_pct, v.node, v.outlier)
        for i, s in enumerate(spreads)
        for v in s.values
        if v.deviation_pct is not None
    ]
    named = sorted({p.label for p in points if p.outlier})
    title = f"{metric.label}: each node's Δ % from the cell's median"
    title += f"; standing out: {', '.join(named)}" if named else "; no node stands out"
    return plots.Strip(
        title, [cell_label(s) for s in spreads], points, [s.threshold_pct for s in spreads]
    )


def _clock(mhz: float | None) -> str:
    return "—" if mhz is None else f"{mhz:,.0f} MHz"


def fleet_page(r: FleetReport) -> str:
    parts: list[str] = []
    found = set(node_lines(r))
    items: list[str] = []
    for line in [*head_lines(r), ""]:
        if line.startswith("- "):
            text = line.removeprefix("- ")
            css = ' class="verdict fail"' if text in found else ""
            items.append(f"<li{css}>{html.escape(text)}</li>")
            continue
        if items:
            parts.append(f"<ul>{''.join(items)}</ul>")
            items = []
        if line and not line.startswith("## "):
            parts.append(f"<p>{html.escape(line)}</p>")
    word = "fail" if r.findings or r.blocking else "pass"
    parts.append(f'<p class="verdict {word}">{html.escape(r.verdict())}</p>')
    facts = [f for f in FACTS if any(f in n.facts for n in r.nodes)]
    clocks = any(n.window_clock_mhz is not None for n in r.nodes)
    if facts or clocks:
        names = ["node", *facts] + (["mean SM clock in the windows"] if clocks else [])
        head = "".join(f"<th>{html.escape(f)}</th>" for f in names)
        rows = "".join(
            f"<tr><th>{html.escape(n.name)}</th>"
            + "".join(f"<td>{html.escape(n.facts.get(f, '—'))}</td>" for f in facts)
            + (f"<td>{_clock(n.window_clock_mhz)}</td>" if clocks else "")
            + "</tr>"
            for n in r.nodes
        )
        parts.append(f"<h3>Environment</h3><table><tr>{head}</tr>{rows}</table>")
    strips = [s for m in METRICS if (s := _strip(r, m)) is not None]
    if strips:
        parts.append(page.img_html(plots.strips_png(strips), "strip plots of Δ % per node"))
    parts += [page.table_html(t) for t in fleet_tables(r)]
    return page.page_html("Fleet", parts)
