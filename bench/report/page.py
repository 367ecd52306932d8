"""report.html: one file, no network. The card's tables come from bench.run.card_tables (the same
Markdown as tables.md, turned into HTML here); plots are inlined as data: URIs."""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.host.telemetry import WindowRecord
from bench.report.answers import answers_section
from bench.report.retrieval import retrieval_section
from bench.report.server_view import server_view_section
from bench.results import Results
from bench.run import card_tables as tables

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2rem auto;
       max-width: 1320px; padding: 0 1rem; color: #1d1d1f; }
h1 { margin-bottom: 0.2rem; } .sub { color: #555; margin-top: 0; }
table { border-collapse: collapse; margin: 0.6rem 0 1.2rem; font-size: 0.86rem; }
th, td { border: 1px solid #d0d0d0; padding: 0.25rem 0.55rem; text-align: right; }
td { white-space: nowrap; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
td.over { color: #888; background: #f7f7f7; }
td.long { white-space: normal; min-width: 12em; text-align: left; }
div.wide { overflow-x: auto; }
dl.facts { display: grid; grid-template-columns: max-content auto; gap: 0.15rem 1rem; }
dl.facts dt { color: #555; } dl.facts dd { margin: 0; }
pre { background: #f6f6f6; padding: 0.6rem; white-space: pre-wrap; word-break: break-all; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.5rem 0; }
.note { color: #555; font-size: 0.9rem; } .warn { color: #8a4b00; }
"""


@dataclass(frozen=True)
class Plot:
    """One plot of the page: plots/<name> on disk, inline here with the id <name> less .png."""

    name: str  # "frontier.png"
    caption: str
    png: bytes
    note: str = ""  # a paragraph under it (what the axes mean)

    def html(self) -> str:
        ident = html.escape(self.name.removesuffix(".png"))
        note = f'<p class="note">{html.escape(self.note)}</p>' if self.note else ""
        return (
            f"<h3>{html.escape(self.caption)}</h3>"
            f'<img id="{ident}" alt="{html.escape(self.caption)}" '
            f'src="data:image/png;base64,{base64.b64encode(self.png).decode()}">{note}'
        )


def _cell(text: str, header: bool) -> str:
    lines = [p.strip() for p in re.split(r"<br\s*/?>", text)]
    parts = [html.escape(p) for p in lines]
    tag = "th" if header else "td"
    klass = ' class="over"' if text.strip() == tables.OVER else ""
    # A status with its reason: let it wrap (a matrix cell is already lines of its own).
    if not header and max(len(p) for p in lines) > 32:
        klass = ' class="long"'

    return f"<{tag}{klass}>{'<br>'.join(parts)}</{tag}>"


def markdown_to_html(markdown: str) -> str:
    """The subset bench.run.card_tables writes: '## ' headings, pipe tables, paragraphs."""
    out: list[str] = []
    rows: list[list[str]] = []

    def flush() -> None:
        if not rows:
            return
        head, body = rows[0], rows[1:]
        out.append(
            '<div class="wide"><table><thead><tr>'
            + "".join(_cell(c, True) for c in head)
            + "</tr></thead>"
        )
        out.append(
            "<tbody>"
            + "".join("<tr>" + "".join(_cell(c, False) for c in r) + "</tr>" for r in body)
            + "</tbody></table></div>"
        )
        rows.clear()

    for line in markdown.splitlines():
        stripped = line.strip()
        if stripped.startswith("|") and stripped.endswith("|"):
            cells = [c for c in stripped[1:-1].split("|")]
            if all(re.fullmatch(r"\s*:?-{3,}:?\s*", c) for c in cells):
                continue
            rows.append(cells)
            continue
        flush()
        if stripped.startswith(("## ", "### ")):
            level = 3 if stripped.startswith("### ") else 2
            out.append(f"<h{level}>{html.escape(stripped[level + 1 :])}</h{level}>")
        elif stripped:
            out.append(f'<p class="note">{html.escape(stripped)}</p>')
    flush()
    return "\n".join(out)


def _facts(items: Mapping[str, object]) -> str:
    body = "".join(
        f"<dt>{html.escape(k)}</dt><dd>{html.escape(str(v))}</dd>"
        for k, v in items.items()
        if v not in (None, "", ())
    )
    return f'<dl class="facts">{body}</dl>'


def _environment_section(env: Mapping[str, Any]) -> str:
    gpu = env.get("gpu") or {}
    gpus = gpu.get("gpus") or []
    names = sorted({str(g.get("name", "?")) for g in gpus})  # a name of 5 is no str (H8)
    host = env.get("host") or {}
    image = env.get("image") or {}
    launch = env.get("launch") or {}
    memory = host.get("memory_total_bytes")
    facts = {
        "GPUs": f"{len(gpus)} \u00d7 {', '.join(names)}" if gpus else f"none ({gpu.get('reason')})",
        "Driver / CUDA": (
            f"{gpu.get('driver_version')} / {gpu.get('cuda_version')}" if gpus else None
        ),
        "Host": host.get("hostname"),
        "OS / kernel": f"{host.get('os')} / {host.get('kernel')}",
        "CPU": f"{host.get('cpu_model')} ({host.get('cpu_count')} threads)",
        "Memory": f"{memory / 2**30:,.0f} GiB" if isinstance(memory, int) else None,
        "Image digest": (
            (image.get("digest") or "not given to bench")
            if image.get("in_container")
            else "not in a container"
        ),
        "vLLM version": env.get("vllm_version"),
    }
    argv = " ".join(launch.get("argv") or []) or "(not recorded)"
    return (
        "<h2>Environment</h2>"
        + _facts(facts)
        + f"<p class='note'>Launch command ({html.escape(str(launch.get('source')))}, "
        "secrets redacted):</p>" + f"<pre>{html.escape(argv)}</pre>"
    )


def _num(value: float | None, fmt: str) -> str:
    return "—" if value is None else f"{value:{fmt}}"


def _telemetry_section(windows: Sequence[WindowRecord]) -> str:
    """Per measurement window: power, clocks, temperature, clock limits, energy per token."""
    head = (
        "Context", "Requests at once", "Trial", "GPUs", "Power, all GPUs (W, mean)",
        "SM clock (MHz, min)", "Temperature (°C, max)", "Utilisation (%, mean)",
        "Clock limits seen (share of samples)", "Energy per output token (J)",
    )  # fmt: skip
    rows = []
    for w in windows:
        gpus = w.telemetry.gpus
        powers = [g.mean_power_w for g in gpus]
        power = sum(p for p in powers if p is not None) if None not in powers else None
        clocks = [g.min_sm_clock_mhz for g in gpus if g.min_sm_clock_mhz is not None]
        temps = [g.max_temperature_c for g in gpus if g.max_temperature_c is not None]
        utils = [g.mean_utilization_pct for g in gpus if g.mean_utilization_pct is not None]
        limits: dict[str, float] = {}
        for g in gpus:
            for reason, share in g.throttle_reasons.items():
                limits[reason] = max(limits.get(reason, 0.0), share)
        rows.append(
            (
                w.context_label, str(w.concurrency), str(w.trial), str(len(gpus)),
                _num(power, ",.0f"), _num(min(clocks, default=None), ",.0f"),
                _num(max(temps, default=None), ".0f"),
                _num(sum(utils) / len(utils) if utils else None, ".0f"),
                ", ".join(f"{k} {v:.0%}" for k, v in sorted(limits.items())) or "none",
                _num(w.telemetry.energy_per_output_token_j, ".3f"),
            )
        )  # fmt: skip
    body = "".join("<tr>" + "".join(_cell(c, False) for c in r) + "</tr>" for r in rows)
    return (
        "<h2>GPU telemetry</h2><p class='note'>Sampled with nvidia-smi during every window; "
        "energy is power integrated over the window, all GPUs, divided by the window's output "
        "tokens.</p>"
        "<table><thead><tr>" + "".join(_cell(h, True) for h in head) + "</tr></thead>"
        f"<tbody>{body}</tbody></table>"
    )


def report_page(
    results: Results,
    plots: Sequence[Plot],
    environment: Mapping[str, Any] | None = None,
    gpu_windows: Sequence[WindowRecord] = (),
) -> str:
    """The card's page: facts, plots, its three tables (a workload's: workload_page)."""
    s = results.settings
    facts = {
        "Run": results.run_id,
        "Started": results.created_at,
        "State": results.state,
        "Server": results.server.url,
        "Decode contexts": " ".join(c.label for c in results.plan.contexts if c.decode),
        "Prefill-only contexts": " ".join(c.label for c in results.plan.contexts if not c.decode),
        "Concurrency": " ".join(map(str, s.concurrencies)),
        "Time per measurement": f"{s.duration_s:g} s (server time)",
        "Max output": f"{s.max_tokens:,} tokens",
        "Trials": s.trials,
        "KV capacity": (
            f"{results.plan.kv.tokens:,} tokens ({results.plan.kv.source})"
            if results.plan.kv.tokens
            else results.plan.kv.source
        ),
        "Benchmark tool": f"bench {results.bench_version}",
    }
    images = "".join(p.html() for p in plots)
    body = f"<h2>Plots</h2>\n{images}\n{markdown_to_html(tables.render(results))}"
    return document(
        results, "Speed test matrix", facts, body, environment=environment, gpu_windows=gpu_windows
    )


def document(results: Results, heading: str, facts: Mapping[str, object], body: str, *,
             environment: Mapping[str, Any] | None,
             gpu_windows: Sequence[WindowRecord]) -> str:  # fmt: skip
    """The page around `body`: title, facts, then the server's view, answers, retrieval,
    telemetry, environment."""
    speed = results.speed_factor
    title = f"{results.server.model} · {results.server.version or 'unknown version'}"
    speed_note = (
        f'<p class="warn">The server ran {speed:g}&times; faster than real time (a twin); every '
        "figure below is shown at server speed, as a real server would have measured it.</p>"
        if speed != 1
        else ""
    )
    env_html = _environment_section(environment) if environment else ""
    if gpu_windows:
        env_html = _telemetry_section(gpu_windows) + env_html
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{html.escape(heading)} · {html.escape(title)}</title>
<style>{_CSS}</style></head>
<body>
<h1>{html.escape(heading)}</h1>
<p class="sub">{html.escape(title)}</p>
{speed_note}
{_facts(facts)}
{body}
{server_view_section(results.server_spans, speed)}
{answers_section(results.fingerprint)}
{retrieval_section(results.fingerprint)}
{env_html}
<p class="note">Check this bundle: <code>bench verify BUNDLE --allowed-signers FILE</code>,
or with stock OpenSSH as described in docs/verify.md.</p>
</body></html>
"""
