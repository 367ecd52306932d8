"""`bench report DIR`: write report.html and plots/*.png into a run directory."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Any

from bench import run_files, writes
from bench.errors import DiskError
from bench.host import telemetry
from bench.report import data, frontier, page, plots, workload_page
from bench.report.page import Plot
from bench.results import Results
from bench.settings import Settings

REPORT_NAME = "report.html"
PLOTS_DIR = "plots"


def write_report(run_dir: Path) -> Path:
    results = run_files.load_results(run_dir)
    # Wrong-shaped parts ("gpu": [1], "host": "h") read as not recorded (issue 29, H8).
    env = run_files.read_environment(run_dir)
    label = f"{results.server.model} · {results.run_id}"
    windows = telemetry.read_windows(run_dir / run_files.GPU_TELEMETRY)
    if results.workload is not None:  # a workload's points, not the card's cells
        figures = workload_page.workload_plots_of(results, label)
        text = workload_page.workload_report_page(results, figures, env, windows)
    else:
        figures = card_plots(results, env, label)
        text = page.report_page(results, figures, env, windows)
    plots_dir = run_dir / PLOTS_DIR
    made = not plots_dir.exists()
    try:
        plots_dir.mkdir(exist_ok=True)
        for figure in figures:
            writes.write_atomic(plots_dir / figure.name, figure.png)
        out = run_dir / REPORT_NAME
        writes.write_atomic(out, text)
    except OSError as exc:
        raise writes.disk_error(plots_dir, exc) from None
    except DiskError:
        if made:  # nothing half-made: the plots of a report never written go too
            for figure in figures:
                (plots_dir / figure.name).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                plots_dir.rmdir()
        raise
    return out


def card_plots(results: Results, env: dict[str, Any] | None, label: str) -> list[Plot]:
    """The card's four plots: decode heatmap, prefill, latency, frontier."""
    cells = data.decode_cells(results)
    return [
        Plot(
            "decode_heatmap.png",
            "Sustained decode: total tok/s (TTFT below) by context and concurrency",
            plots.decode_heatmap(cells, f"Sustained decode, total tok/s · {label}"),
        ),
        Plot(
            "prefill_vs_context.png",
            "Prefill throughput against context (TTFT below each point)",
            plots.prefill_vs_context(data.prefill_points(results), f"Prefill · {label}"),
        ),
        Plot(
            "latency_vs_concurrency.png",
            "TTFT and time between tokens against concurrency, per context",
            plots.latency_vs_concurrency(cells, f"Latency · {label}"),
        ),
        frontier_plot(results, env, cells, label),
    ]


def frontier_plot(
    results: Results, env: dict[str, Any] | None, cells: list[data.CellPoint], label: str
) -> Plot:
    """Total output tok/s per GPU against per-user output tok/s, per context (frontier.png)."""
    gpus = frontier.gpu_count(env, twin="twin" in results.server.version_payload)
    by_context = frontier.points_of(cells)
    panels = [(ctx, [plots.FrontierSeries("", pts, float(gpus.n or 1))])
              for ctx, pts in by_context.items()]  # fmt: skip
    png = plots.frontier(panels, gpus.axis_label(), f"Frontier · {label}")
    note = (
        f"x: per-user output tok/s, the decode speed one request sees (Per request tok/s: "
        f"1000 / the median time between tokens in ms). y: {gpus.axis_label()}, from Total "
        "tok/s (usage tokens received inside the window / its measured length). Both at "
        "server speed, trials averaged as in the tables; one point per concurrency, the "
        "line is the Pareto front (no other point is faster on both axes)."
    )
    return Plot("frontier.png", "Frontier: throughput per GPU against per-user speed", png, note)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("report", help="write report.html and plots/*.png for a run directory")
    p.add_argument("dir", type=Path, metavar="DIR")
    p.set_defaults(func=_report)


def _report(args: argparse.Namespace, settings: Settings) -> int:
    print(write_report(args.dir))
    return 0
