"""`bench report DIR`: write report.html and plots/*.png into a run directory."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bench.host import telemetry
from bench.report import data, html, plots
from bench.run import layout
from bench.settings import Settings

REPORT_NAME = "report.html"
PLOTS_DIR = "plots"


def write_report(run_dir: Path) -> Path:
    results = layout.load_results(run_dir)
    env: dict[str, Any] | None = None
    env_path = run_dir / layout.ENVIRONMENT
    if env_path.is_file():
        raw = layout.read_json(env_path)
        env = raw if isinstance(raw, dict) else None
    cells = data.decode_cells(results)
    label = f"{results.server.model} · {results.run_id}"
    figures = {
        "decode_heatmap.png": (
            "Sustained decode: total tok/s (TTFT below) by context and concurrency",
            plots.decode_heatmap(cells, f"Sustained decode, total tok/s · {label}"),
        ),
        "prefill_vs_context.png": (
            "Prefill throughput against context (TTFT below each point)",
            plots.prefill_vs_context(data.prefill_points(results), f"Prefill · {label}"),
        ),
        "latency_vs_concurrency.png": (
            "TTFT and time between tokens against concurrency, per context",
            plots.latency_vs_concurrency(cells, f"Latency · {label}"),
        ),
    }
    (run_dir / PLOTS_DIR).mkdir(exist_ok=True)
    for name, (_, png) in figures.items():
        (run_dir / PLOTS_DIR / name).write_bytes(png)
    windows = telemetry.read_windows(run_dir / layout.GPU_TELEMETRY)
    page = html.render(results, {caption: png for caption, png in figures.values()}, env, windows)
    out = run_dir / REPORT_NAME
    out.write_text(page, encoding="utf-8")
    return out


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("report", help="write report.html and plots/*.png for a run directory")
    p.add_argument("dir", type=Path, metavar="DIR")
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace, settings: Settings) -> int:
    print(write_report(args.dir))
    return 0
