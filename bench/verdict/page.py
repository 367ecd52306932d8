"""The verdict as one self-contained HTML page: the coloured tables and plots (PNG inline)."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

from bench import writes
from bench.report import frontier
from bench.report import plots as report_plots
from bench.stats import mean_ci
from bench.verdict import budget, capacity_delta, headline, plots
from bench.verdict.cells import MetricSpec, RunFigures, metrics_of
from bench.verdict.compare import Comparison
from bench.verdict.reproduce import CellCheck, Reproduction
from bench.verdict.tables import (
    VerdictTable,
    compare_tables,
    fewer_trials_lines,
    pct,
    provenance_lines,
    reproduce_tables,
    trust_lines,
)

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; white-space: nowrap; }
th { background: #f2f2f2; }
td.ok { background: #d8f0d8; } td.bad { background: #f6c9c9; } td.warn { background: #fde2b0; }
td.oc { background: #e4e4e4; color: #666; } td.na { color: #999; }
td.better { background: #cdeccd; } td.worse { background: #f4c4c4; }
.verdict { font-size: 18px; font-weight: bold; margin: 1em 0; }
.pass { color: #1a7f1a; } .fail { color: #b30000; } .open { color: #8a5a00; }
img { max-width: 100%; }
"""


def table_html(t: VerdictTable) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in t.header)
    rows = []
    for row in t.rows:
        cells = "".join(
            f'<td class="{c.css}">{html.escape(c.text)}</td>' if c.css
            else f"<td>{html.escape(c.text)}</td>"
            for c in row
        )  # fmt: skip
        rows.append(f"<tr>{cells}</tr>")
    return f"<h3>{html.escape(t.title)}</h3><table><tr>{head}</tr>{''.join(rows)}</table>"


def img_html(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{data}">'


def page_html(title: str, parts: Sequence[str]) -> str:
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}'
        f"</title><style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
        + "".join(parts)
        + "</body></html>\n"
    )


def write(path: Path, text: str) -> None:
    writes.write_atomic(path, text)


def _decode_metrics() -> tuple[MetricSpec, ...]:
    return metrics_of("decode")


# How a cell that is not valid on our side is written in the matrix heatmaps.
NOT_VALID_MARK = {
    "not ready here": "⚠ not ready",
    "GPU throttled here": "⚠ GPU throttled",
    "invalid here": "⚠ invalid",
    "interrupted here": "⚠ interrupted",
    "failed here": "⚠ failed",
}


def reproduce_heat_cell(check: CellCheck | None, metric: MetricSpec) -> plots.HeatCell:
    """One square of the reproduce matrix: Δ %, or why there is none to trust."""
    if check is None:
        return plots.HeatCell(None, "")
    if check.verdict in NOT_VALID_MARK:
        return plots.HeatCell(None, NOT_VALID_MARK[check.verdict], flagged=True)
    if check.verdict == "both over capacity":
        return plots.HeatCell(None, "OC")
    if "over capacity" in check.verdict:
        return plots.HeatCell(None, "OC≠", flagged=True)
    f = next((f for f in check.figures if f.metric is metric), None)
    if f is None or f.delta_pct is None:
        return plots.HeatCell(None, "n/m" if check.verdict == "not measured here" else "—")
    text = pct(f.delta_pct) + (" ?" if f.outcome == "inconclusive" else "")
    return plots.HeatCell(f.delta_pct, text, flagged=f.outcome != "pass")


def reproduce_page(r: Reproduction) -> str:
    contexts = [
        c for c in r.card.contexts if any(k[0] == "decode" and k[1] == c for k in r.card.cells)
    ]
    levels = list(r.card.concurrencies)
    checks = {c.key: c for c in r.cells}

    def heat(metric: MetricSpec) -> plots.Heatmap:
        def cell(ctx: str, conc: int) -> plots.HeatCell:
            return reproduce_heat_cell(checks.get(("decode", ctx, conc)), metric)

        tol = r.tolerances.of(metric)
        return plots.Heatmap(
            f"{metric.label}: Δ % (ours vs card, ±{tol:g} % passes)",
            contexts,
            levels,
            cell,
            2.0 * tol,
            None,
        )

    word = "pass" if r.reproduced else "fail"
    head = trust_lines([r.ours]) + r.settings.lines("ours", "card") + r.answers_lines()
    head.append(f"The run's {r.ours.weights or 'weights: not recorded'}.")
    head += r.fewer_trials_lines()
    parts = [
        *(f"<p>{html.escape(line)}</p>" for line in head if line),
        f"<p>Bundle <code>{html.escape(r.ours.name)}</code> against card "
        f"<code>{html.escape(r.card.name)}</code>; speed factor {r.ours.speed_factor:g} "
        f"(rates ÷, latencies × by it); tolerances ±{r.tolerances.throughput_pct:g} % "
        f"throughput, ±{r.tolerances.latency_pct:g} % latency.</p>",
        f'<p class="verdict {word}">{html.escape(r.summary())}</p>',
        img_html(plots.heatmaps_png([heat(m) for m in _decode_metrics()]), "heatmap of Δ %"),
        *(table_html(t) for t in reproduce_tables(r)),
    ]
    return page_html("Reproduce", parts)


def _curves(c: Comparison) -> bytes:
    panels = []
    for metric in _decode_metrics():
        series = []
        contexts = list(dict.fromkeys([*c.a.contexts, *c.b.contexts]))
        for run, dashed in ((c.a, False), (c.b, True)):
            for ctx in run.contexts:
                xs, ys, errs = [], [], []
                for conc in run.concurrencies:
                    cell = run.cell(("decode", ctx, conc))
                    v = cell.value(metric.name) if cell else None
                    if cell is None or v is None:
                        continue
                    values = cell.trials[metric.name]
                    err = 0.0
                    if len(values) >= 2:
                        ci = mean_ci(values)
                        err = (ci.high - ci.low) / 2
                    scale = 1000.0 if metric.unit == "ms" else 1.0
                    xs.append(conc)
                    ys.append(v * scale)
                    errs.append(err * scale)
                if xs:
                    label = f"{'A' if not dashed else 'B'} {ctx}"
                    color = contexts.index(ctx)
                    series.append(plots.PlotSeries(label, xs, ys, errs, dashed, color))
        panels.append((metric.label, metric.unit, series))
    return plots.curves_png(panels)


def frontier_png(runs: Sequence[tuple[str, RunFigures]]) -> bytes:
    """Total output tok/s per GPU against per-user tok/s, per context, one line (Pareto
    front) per run: (label, run) pairs, the first solid, the others dashed."""
    counts = [frontier.gpu_count_of_settings(r.settings, twin=r.twin) for _, r in runs]
    divisors, ylabel = frontier.common_scale(counts)
    contexts = list(dict.fromkeys(ctx for _, r in runs for ctx in r.contexts))
    panels = []
    for ctx in contexts:
        series = []
        for i, ((label, run), divisor) in enumerate(zip(runs, divisors, strict=True)):
            points = []
            for conc in run.concurrencies:
                cell = run.cell(("decode", ctx, conc))
                if cell is None or cell.status not in ("valid", "not_ready", "gpu_throttled"):
                    continue
                x, y = cell.value("per_request_tok_s"), cell.value("total_tok_s")
                if x is not None and y is not None:
                    points.append(frontier.FrontierPoint(conc, x, y, cell.status != "valid"))
            if points:
                series.append(report_plots.FrontierSeries(label, points, divisor, i > 0, i))
        if series:
            panels.append((ctx, series))
    return report_plots.frontier(panels, ylabel, "Frontier")


def _compare_heat(c: Comparison, metric: MetricSpec) -> plots.Heatmap:
    contexts = list(dict.fromkeys([*c.a.contexts, *c.b.contexts]))
    levels = sorted(set(c.a.concurrencies) | set(c.b.concurrencies))
    deltas = {d.key: d for d in c.cells}

    def cell(ctx: str, conc: int) -> plots.HeatCell:
        d = deltas.get(("decode", ctx, conc))
        if d is None:
            return plots.HeatCell(None, "")
        if d.mark == "cannot compare":
            return plots.HeatCell(None, "⚠", flagged=True)
        if not d.figures:
            changed = d.mark == "status changed"
            return plots.HeatCell(None, "≠" if changed else "OC", flagged=changed)
        f = next((f for f in d.figures if f.metric is metric), None)
        if f is None or f.delta_pct is None:
            return plots.HeatCell(None, "—")
        flagged = f.mark in ("improved", "regressed")
        return plots.HeatCell(f.delta_pct, pct(f.delta_pct), flagged=flagged, muted=not flagged)

    limit = max(2.0 * c.policy.min_effect(metric), 10.0)
    title = f"{metric.label}: Δ % (B vs A; washed out = within noise)"
    return plots.Heatmap(title, contexts, levels, cell, limit, metric.higher_is_better)


def compare_page(comparisons: Sequence[Comparison]) -> str:
    return page_html("Compare", [part for c in comparisons for part in compare_parts(c)])


def compare_parts(c: Comparison) -> list[str]:
    """One comparison as the compare page shows it: what differs, the verdict, the heatmaps,
    curves and frontier, and the tables (bench history's page shows its runs so too). A B that
    answers differently gets its verdict and no figures: they are not judged."""
    parts: list[str] = []
    diff = "".join(
        f"<tr><th>{html.escape(n)}</th><td>{html.escape(a)}</td><td>{html.escape(b)}</td></tr>"
        for n, a, b in c.metadata_diff
    )
    parts.append(f"<h2>{html.escape(c.b.name)} against {html.escape(c.a.name)}</h2>")
    if diff:
        parts.append(
            f"<h3>What differs</h3><table><tr><th></th><th>A</th><th>B</th></tr>{diff}</table>"
        )
    flagged = len(c.flagged)
    word = "fail" if flagged or c.cannot_compare or c.raw_only or c.answers.refused else "pass"
    if word == "pass" and headline.outcome(c) != "equivalent":
        word = "open"  # not resolved: neither a change nor shown within the margin
    lines = trust_lines([c.a, c.b]) + c.settings.lines("A", "B") + provenance_lines(c)
    lines += c.answers.lines()
    for line in lines:
        if line:
            parts.append(f"<p>{html.escape(line)}</p>")
    parts.append(f'<p class="verdict {word}">{html.escape(headline.verdict(c))}</p>')
    if c.answers.refused:  # what B's figures say is not judged
        return parts
    parts += [f"<p>{html.escape(line)}</p>" for line in fewer_trials_lines(c)]
    if c.prior is not None:  # the noise measured before the compare (--noise-from)
        parts += [f"<p>{html.escape(line.lstrip('- '))}</p>" for line in c.prior.lines()]
    said = c.summaries() + [s.lstrip("- ") for s in budget.lines(c)]
    items = "".join(f"<li>{html.escape(s)}</li>" for s in said)
    parts.append(f"<ul>{items}</ul>")
    if c.capacity is not None:
        cap = capacity_delta.lines(c.capacity, c.policy.alpha)
        parts += [f"<p>{html.escape(line.lstrip('#- '))}</p>" for line in cap if line]
    if any(k[0] == "decode" for k in (*c.a.cells, *c.b.cells)):  # the card's matrix
        parts += _decode_plots(c)
    parts += [table_html(t) for t in compare_tables(c)]
    return parts


def _decode_plots(c: Comparison) -> list[str]:
    """The decode cells' heatmaps of Δ %, curves by concurrency and frontier."""
    parts = []
    maps = [_compare_heat(c, m) for m in _decode_metrics()]
    parts.append(img_html(plots.heatmaps_png(maps), "Δ % heatmap"))
    parts.append(
        f"<p>A = {html.escape(c.a.name)} (solid), B = {html.escape(c.b.name)} "
        "(dashed); error bars: 95 % CI over trials.</p>"
    )
    parts.append(img_html(_curves(c), "figures by concurrency"))
    parts.append(
        "<p>Frontier: per context, total output tok/s per GPU (per server when a run "
        "records no GPU count) against per-user output tok/s (1000 / median time between "
        "tokens), one point per concurrency, each run's Pareto front as its line.</p>"
    )
    parts.append(img_html(frontier_png([("A", c.a), ("B", c.b)]), "frontier"))
    return parts
