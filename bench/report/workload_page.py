"""report.html of a workload run (`bench run --workload`): its facts and description, two
plots (latency against the load, and against the achieved output tok/s), the points' table
(the same Markdown as tables.md's, bench.workload.tables) and each point's status with its
reasons. Every text from outside is escaped by html.escape, as bench.report.page does."""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from typing import Any

from bench.host.telemetry import WindowRecord
from bench.report import workload_plots
from bench.report.page import Plot, document, markdown_to_html
from bench.report.workload_data import STATUS_MARKERS, workload_plot_data
from bench.results import Results
from bench.workload import tables as workload_tables
from bench.workload_points import PointResult, WorkloadRun

LOAD_PLOT = "workload_latency_vs_load.png"
THROUGHPUT_PLOT = "workload_latency_vs_throughput.png"


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:,.4g} ms"


def slo_text(run: WorkloadRun) -> str:
    """The workload's p99 bounds in server time ("TTFT p99 ≤ 500 ms, ..."), or ""."""
    slo = run.workload.slo
    bounds = slo.bounds() if slo is not None else {}
    return ", ".join(f"{name.upper()} p99 \u2264 {_ms(bound)}" for name, bound in bounds.items())


def _note(run: WorkloadRun) -> str:
    markers = ", ".join(f"{status} a {words}" for status, (_, words) in STATUS_MARKERS.items())
    slo = slo_text(run)
    return (
        "Server time. p50 blue, p99 orange, one line per trial (the first solid, then dashed, "
        "dotted, dash-dot); each point's marker is its "
        f"status ({markers}); error bars: the p99's distribution-free 95 % interval, where "
        "the point had the requests for one (about 370)."
        + (f" Dashed red: the panel's SLO bound ({slo})." if slo else "")
    )


def workload_plots_of(results: Results, label: str) -> list[Plot]:
    """The run's two plots (results.workload must be set)."""
    assert results.workload is not None
    data = workload_plot_data(results)
    load = "concurrency" if data.closed else "the offered rate"
    note = _note(results.workload)
    return [
        Plot(
            LOAD_PLOT,
            f"TTFT and TPOT (p50, p99) against {load}",
            workload_plots.latency_against(
                data, throughput=False, title=f"Latency against {load} · {label}"
            ),
            note,
        ),
        Plot(
            THROUGHPUT_PLOT,
            "TTFT and TPOT (p50, p99) against the achieved output tok/s",
            workload_plots.latency_against(
                data, throughput=True, title=f"Latency against output tok/s · {label}"
            ),
            note,
        ),
    ]


def _point_name(p: PointResult, speed: float) -> str:
    if p.concurrency is not None:
        return f"C = {p.concurrency}"
    if p.offered_rate is None:
        return "-"
    return "inf" if math.isinf(p.offered_rate) else f"{p.offered_rate / speed:,.2f}/s"


def _status_section(run: WorkloadRun, speed: float) -> str:
    """Each point's status, its marker on the plots and its reasons and notes."""
    rows = []
    for p in run.points:
        said = "<br>".join(html.escape(text) for text in (*p.reasons, *p.notes)) or "—"
        marker = STATUS_MARKERS.get(p.status, ("", "?"))[1]
        rows.append(
            f"<tr><td>{html.escape(_point_name(p, speed))}</td><td>{p.trial + 1}</td>"
            f"<td>{html.escape(p.status)}</td><td>{html.escape(marker)}</td>"
            f'<td class="long">{said}</td></tr>'
        )
    return (
        "<h2>Each point's status</h2><p class='note'>valid: measured and kept to its "
        "schedule; overloaded: the backlog grew to the end of the arrivals (the server "
        "cannot serve this rate); late_client: the client did not keep to its schedule; "
        "failed: too many requests failed; interrupted: the run stopped during it.</p>"
        '<div class="wide"><table id="workload-status"><thead><tr><th>Point</th>'
        "<th>Trial</th><th>Status</th><th>Marker</th><th>Reasons and notes</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _facts(results: Results, run: WorkloadRun) -> dict[str, object]:
    w, a = run.workload, run.workload.arrivals
    if a.kind == "rate":
        rates = ", ".join("inf" if math.isinf(r) else f"{r:g}" for r in a.rates)
        arrivals = f"{a.process}, at {rates} requests/s, {a.requests} requests a point"
    else:
        arrivals = f"closed loop at C = {', '.join(map(str, a.concurrencies))}"
    return {
        "Run": results.run_id,
        "Started": results.created_at,
        "State": results.state,
        "Server": results.server.url,
        "Workload": f"{w.name} ({run.source})",
        "Description": w.description,
        "Workload sha256": run.sha256,
        "Arrivals": arrivals,
        "SLO (server time)": slo_text(run),
        "Trials": results.settings.trials,
        "Prompt sizing": run.prompt_sizing,
        "Benchmark tool": f"bench {results.bench_version}",
    }


def workload_report_page(
    results: Results,
    plots: Sequence[Plot],
    environment: Mapping[str, Any] | None = None,
    gpu_windows: Sequence[WindowRecord] = (),
) -> str:
    run = results.workload
    assert run is not None
    speed = results.speed_factor
    # tables.md's section, less its list of reasons and notes: the status table shows them
    # (escaped for HTML only, not for Markdown too).
    quiet = [p.model_copy(update={"reasons": (), "notes": ()}) for p in run.points]
    markdown = workload_tables.render(run.model_copy(update={"points": tuple(quiet)}), speed)
    body = (
        f"<h2>Plots</h2>\n{''.join(p.html() for p in plots)}\n{markdown_to_html(markdown)}\n"
        f"{_status_section(run, speed)}"
    )
    return document(
        results, "Workload run", _facts(results, run), body,
        environment=environment, gpu_windows=gpu_windows,
    )  # fmt: skip
