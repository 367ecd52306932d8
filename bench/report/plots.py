"""The report's plots with matplotlib (the `report` extra, in every image), as PNG bytes.

matplotlib is imported here only, with the non-interactive Agg backend, so that the
report renders on a headless host (inside the server's container, before signing).

The same run gives the same PNG bytes wherever the same matplotlib draws it: matplotlib's
own default style (a user's matplotlibrc ignored), its bundled DejaVu Sans (found before a
system copy of the same name) rendered by the FreeType its wheel carries, and no
"Software" or time in the PNG's metadata. The locks pin one matplotlib for the images
and the .venv (tests/provisioning/flow/test_flow.py compares the bytes).
"""

from __future__ import annotations

import io
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.errors import ToolMissing
from bench.report.data import CellPoint, PrefillPoint
from bench.report.frontier import X_LABEL, FrontierPoint, pareto

_DPI = 110


def _pyplot() -> Any:
    # Font-cache chatter ("generated new fontManager") is not a bench event.
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ToolMissing(
            "matplotlib is not installed; the report needs it",
            hint="pip install 'bench[report]'",
        ) from None
    plt.style.use(_STYLE)
    return plt


# matplotlib's built-in defaults, whatever matplotlibrc the machine has, and one font.
_STYLE: list[str | dict[str, Any]] = [
    "default",
    {"font.family": ["sans-serif"], "font.sans-serif": ["DejaVu Sans"]},
]


def legend(ax: Any, **kw: Any) -> None:
    """`ax.legend` with its place named. Left to the default ("best"), matplotlib warns when
    its search for the best place takes over 1 s, which on a loaded machine it did (and the
    tests treat warnings as errors); named, it is the same place and no warning."""
    ax.legend(loc="best", **kw)


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI, bbox_inches="tight", metadata={"Software": None})
    _pyplot().close(fig)
    return buf.getvalue()


def _ordered(values: Sequence[tuple[int, str]]) -> list[str]:
    return [label for _, label in sorted(set(values))]


def decode_heatmap(cells: Sequence[CellPoint], title: str) -> bytes:
    """Rows context, columns concurrency, colour and number total tok/s; grey where not run."""
    plt = _pyplot()
    rows = _ordered([(c.prompt_tokens, c.context_label) for c in cells])
    cols = sorted({c.concurrency for c in cells})
    grid = [[math.nan] * len(cols) for _ in rows]
    by_pos = {(c.context_label, c.concurrency): c for c in cells}
    for i, r in enumerate(rows):
        for j, col in enumerate(cols):
            cell = by_pos.get((r, col))
            if cell is not None and cell.total_tok_s is not None:
                grid[i][j] = cell.total_tok_s
    fig, ax = plt.subplots(figsize=(1.15 * len(cols) + 2.2, 0.7 * len(rows) + 1.8))
    cmap = plt.get_cmap("viridis").with_extremes(bad="#e4e4e4")
    image = ax.imshow(grid, cmap=cmap, aspect="auto")
    finite = [v for row in grid for v in row if not math.isnan(v)]
    top = max(finite, default=1.0)
    for i, r in enumerate(rows):
        for j, col in enumerate(cols):
            cell = by_pos.get((r, col))
            value = grid[i][j]
            if not math.isnan(value):
                ttft = f"\n{cell.ttft_s * 1000:,.0f} ms" if cell and cell.ttft_s is not None else ""
                flag = "*" if cell is not None and cell.status == "not_ready" else ""
                colour = "black" if value > 0.6 * top else "white"
                ax.text(j, i, f"{value:,.1f}{flag}{ttft}", ha="center", va="center",
                        fontsize=7.5, color=colour)  # fmt: skip
            else:
                text = "Over\ncapacity" if cell and cell.status == "over_capacity" else "—"
                ax.text(j, i, text, ha="center", va="center", fontsize=7, color="#666666")
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel("simultaneous requests")
    ax.set_ylabel("context")
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, label="total output tok/s")
    if any(c.status == "not_ready" for c in cells):
        ax.annotate(
            "* readiness gate never held: measured anyway, flagged",
            (0, -0.16), xycoords="axes fraction", fontsize=7.5, color="#8a4b00",
        )  # fmt: skip
    return _png(fig)


def prefill_vs_context(points: Sequence[PrefillPoint], title: str) -> bytes:
    """Prefill tok/s per context, contexts evenly spaced (251K and 256K would overlap on a
    token axis), the cold TTFT written under each point."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ordered = sorted(points, key=lambda p: p.prompt_tokens)
    xs = list(range(len(ordered)))
    ys = [p.prefill_tok_s for p in ordered]
    ax.plot(xs, ys, marker="o", color="#1f77b4")
    for x, p in zip(xs, ordered, strict=True):
        ax.annotate(f"{p.prefill_tok_s:,.0f}\n{p.ttft_s * 1000:,.0f} ms", (x, p.prefill_tok_s),
                    textcoords="offset points", xytext=(0, 8), ha="center",
                    fontsize=7)  # fmt: skip
    ax.set_xticks(xs, [f"{p.context_label}\n{p.prompt_tokens:,}" for p in ordered], fontsize=8)
    ax.set_xlim(-0.5, len(xs) - 0.5)
    ax.set_ylim(0, max(ys, default=1.0) * 1.25)
    ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("context (prompt tokens)")
    ax.set_ylabel("prefill tok/s (prompt tokens / TTFT)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    return _png(fig)


def latency_vs_concurrency(cells: Sequence[CellPoint], title: str) -> bytes:
    """TTFT and time between tokens against concurrency, one line per context."""
    plt = _pyplot()
    from matplotlib import ticker

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.3))
    contexts = _ordered([(c.prompt_tokens, c.context_label) for c in cells])
    concurrencies = sorted({c.concurrency for c in cells})
    for label in contexts:
        mine = sorted(
            (c for c in cells if c.context_label == label and c.ttft_s is not None),
            key=lambda c: c.concurrency,
        )
        if not mine:
            continue
        xs = [c.concurrency for c in mine]
        left.plot(xs, [(c.ttft_s or 0) * 1000 for c in mine], marker="o", label=label)
        right.plot(xs, [(c.tbt_s or 0) * 1000 for c in mine], marker="o", label=label)
    # TTFT spans two decades (log axis, ticks at 1-2-5); time between tokens one (linear from 0).
    left.set_yscale("log")
    left.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    right.set_ylim(bottom=0)
    for ax, what in ((left, "TTFT (ms, median)"), (right, "time between tokens (ms, median)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
        ax.minorticks_off()
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_xlabel("simultaneous requests")
        ax.set_ylabel(what)
        ax.grid(alpha=0.3, which="both")
    legend(right, title="context", fontsize=8)
    fig.suptitle(title, fontsize=10)
    return _png(fig)


@dataclass(frozen=True)
class FrontierSeries:
    """One run's points in one context; `divisor` turns its total tok/s into the y axis."""

    label: str  # the run ("" for a single run's report)
    points: Sequence[FrontierPoint]
    divisor: float = 1.0
    dashed: bool = False
    color: int = 0  # index into matplotlib's colour cycle: one colour per run on every panel


def frontier(panels: Sequence[tuple[str, Sequence[FrontierSeries]]], ylabel: str,
             title: str) -> bytes:  # fmt: skip
    """One panel per context: every series' points (concurrency written beside each, a
    hollow marker for a not_ready cell) and its Pareto front as a line. `ylabel` is the
    axis in full ("... per GPU (4 GPUs: source)"): the part in brackets goes to the title."""
    axis, _, source = ylabel.partition(" (")
    plt = _pyplot()
    from matplotlib import ticker

    cols = max(1, min(3, len(panels)))
    rows = max(1, math.ceil(len(panels) / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5.0 * cols, 4.0 * rows), squeeze=False)
    for ax, (context, series) in zip(axes.flat, panels, strict=False):
        for s in series:
            colour = f"C{s.color % 10}"
            ys = [p.total_tok_s / s.divisor for p in s.points]
            xs = [p.per_user_tok_s for p in s.points]
            ax.scatter([x for x, p in zip(xs, s.points, strict=True) if not p.flagged],
                       [y for y, p in zip(ys, s.points, strict=True) if not p.flagged],
                       s=22, color=colour, zorder=3)  # fmt: skip
            ax.scatter([x for x, p in zip(xs, s.points, strict=True) if p.flagged],
                       [y for y, p in zip(ys, s.points, strict=True) if p.flagged],
                       s=22, facecolors="none", edgecolors=colour, zorder=3)  # fmt: skip
            for x, y, p in zip(xs, ys, s.points, strict=True):
                # The first run's labels above its points, the next one's below them.
                ax.annotate(str(p.concurrency), (x, y), textcoords="offset points",
                            xytext=(4, 3 if s.color % 2 == 0 else -10), fontsize=7,
                            color=colour)  # fmt: skip
            front = pareto(s.points)
            name = f"{s.label} Pareto front" if s.label else "Pareto front"
            ax.plot([p.per_user_tok_s for p in front], [p.total_tok_s / s.divisor for p in front],
                    color=colour, linestyle="--" if s.dashed else "-", linewidth=1.4,
                    label=name, zorder=2)  # fmt: skip
        top_x = max((p.per_user_tok_s for s in series for p in s.points), default=1.0)
        top_y = max((p.total_tok_s / s.divisor for s in series for p in s.points), default=1.0)
        ax.set_xlim(0, top_x * 1.12)  # room for the labels right of the points
        ax.set_ylim(0, top_y * 1.12)
        ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:,.0f}"))
        ax.set_title(f"context {context}", fontsize=9)
        ax.set_xlabel(X_LABEL, fontsize=8)
        ax.set_ylabel(axis, fontsize=8)
        ax.grid(alpha=0.3)
        legend(ax, fontsize=7)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    where = f"y: {axis} ({source}; " if source else "("
    fig.suptitle(f"{title}\n{where}labels: requests at once; hollow: readiness gate never held)",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    return _png(fig)
