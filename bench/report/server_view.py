"""report.html's "Server's view": per cell, the server's own queue time and time to first
token from its trace spans (results.json's `server_spans`, bench.live.span_join) beside the
client's TTFT of the same requests, at server speed like every figure of the report.
Every text is escaped (a cell's label and the note come from results.json)."""

from __future__ import annotations

import html

from bench.results import ServerSpans, ServerTimings


def _ms(seconds: float | None, speed: float) -> str:
    return "—" if seconds is None else f"{seconds * speed * 1000:,.1f}"


def _cell(t: ServerTimings) -> str:
    if t.phase == "workload":
        name = f"point {t.context}"
    elif t.phase == "prefill":
        name = f"{t.context} prefill scout"
    else:
        name = f"{t.context}, C = {t.concurrency}"
    return name + (f", trial {t.trial + 1}" if t.trial else "")


def server_view_section(spans: ServerSpans | None, speed: float) -> str:
    """The section; empty for a run made without `--otlp-traces-port`."""
    if spans is None:
        return ""
    note = f"<p class='note'>{html.escape(spans.note or '')}</p>"
    if not spans.kept:
        return f"<h2>Server's view</h2>{note}"
    head = (
        "Cell",
        "Completed",
        "With span",
        "Queue p50 ms",
        "Server TTFT p50 ms",
        "Client TTFT p50 ms",
        "Server TTFT > client",
    )
    rows = []
    for t in spans.cells:
        cells = (
            _cell(t),
            f"{t.completed:,}",
            f"{t.joined:,}",
            _ms(t.queue_s, speed),
            _ms(t.server_ttft_s, speed),
            _ms(t.client_ttft_s, speed),
            f"{t.server_ttft_larger:,}",
        )
        rows.append("<tr>" + "".join(f"<td>{html.escape(x)}</td>" for x in cells) + "</tr>")
    return (
        "<h2>Server's view</h2>"
        f"{note}<p class='note'>From the server's trace spans (vLLM's "
        "<code>gen_ai.latency.time_in_queue</code> and "
        "<code>gen_ai.latency.time_to_first_token</code>), joined to the requests by trace id; "
        "medians over each cell's completed requests that have a span, the client's TTFT over "
        "the same requests.</p><table><thead><tr>"
        + "".join(f"<th>{html.escape(h)}</th>" for h in head)
        + f"</tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
