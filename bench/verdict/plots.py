"""Heatmaps of Δ % and per-concurrency curves for the verdict pages, as PNG bytes.

matplotlib itself is owned by `bench.report.plots` (Agg backend, optional `report` extra,
a one-line ToolMissing when absent); these drawings get pyplot from there.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.report.plots import _pyplot, legend


@dataclass(frozen=True)
class HeatCell:
    delta_pct: float | None  # None: no figure to show
    text: str  # what to write in the square
    flagged: bool = False  # drawn with a heavy edge
    muted: bool = False  # within noise: colour washed out so only real changes stand out


@dataclass(frozen=True)
class Heatmap:
    title: str
    rows: Sequence[str]  # contexts
    columns: Sequence[int]  # concurrency levels
    cell: Callable[[str, int], HeatCell]
    limit_pct: float  # colour scale is ±limit
    better_when_positive: bool | None  # None: any deviation is bad (reproduce)


def heatmaps_png(maps: Sequence[Heatmap]) -> bytes:
    pyplot = _pyplot()
    cols = min(2, len(maps))
    rows = math.ceil(len(maps) / cols)
    width = max(4.5, 0.75 * max(len(m.columns) for m in maps) + 2.0)
    height = max(2.8, 0.5 * max(len(m.rows) for m in maps) + 1.6)
    fig, axes = pyplot.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    for ax, hm in zip(axes.flat, maps, strict=False):
        cmap = "coolwarm" if hm.better_when_positive is None else "RdYlGn"
        if hm.better_when_positive is False:
            cmap = "RdYlGn_r"
        grid = []
        for r in hm.rows:
            line = []
            for c in hm.columns:
                d = hm.cell(r, c).delta_pct
                line.append(math.nan if d is None else max(-hm.limit_pct, min(hm.limit_pct, d)))
            grid.append(line)
        image = ax.imshow(grid, cmap=cmap, vmin=-hm.limit_pct, vmax=hm.limit_pct, aspect="auto")
        ax.set_facecolor("#d9d9d9")
        ax.set_xticks(range(len(hm.columns)), [str(c) for c in hm.columns])
        ax.set_yticks(range(len(hm.rows)), list(hm.rows))
        ax.set_xlabel("simultaneous requests")
        ax.set_ylabel("context")
        ax.set_title(hm.title, fontsize=10)
        for i, r in enumerate(hm.rows):
            for j, c in enumerate(hm.columns):
                cell = hm.cell(r, c)
                ax.text(
                    j,
                    i,
                    cell.text,
                    ha="center",
                    va="center",
                    fontsize=7,
                    fontweight="bold" if cell.flagged else "normal",
                )
                if cell.muted:
                    ax.add_patch(
                        pyplot.Rectangle(
                            (j - 0.5, i - 0.5),
                            1,
                            1,
                            facecolor="white",
                            alpha=0.65,
                            edgecolor="none",
                        )
                    )
                if cell.flagged:
                    ax.add_patch(
                        pyplot.Rectangle(
                            (j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="black", linewidth=2
                        )
                    )
        fig.colorbar(image, ax=ax, label="Δ %", shrink=0.8)
    for ax in list(axes.flat)[len(maps) :]:
        ax.axis("off")
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=110)
    pyplot.close(fig)
    return out.getvalue()


@dataclass(frozen=True)
class PlotSeries:
    label: str
    x: Sequence[int]
    y: Sequence[float]
    err: Sequence[float] | None  # half-width of the 95 % CI, same length as y
    dashed: bool
    color: int = 0  # index into matplotlib's colour cycle (one colour per context)


def curves_png(panels: Sequence[tuple[str, str, Sequence[PlotSeries]]]) -> bytes:
    """One panel per (title, y label, series); x is concurrency on a log-2 axis."""
    pyplot = _pyplot()

    cols = min(2, len(panels))
    rows = math.ceil(len(panels) / cols)
    fig, axes = pyplot.subplots(rows, cols, figsize=(6.0 * cols, 3.6 * rows), squeeze=False)
    for ax, (title, ylabel, series) in zip(axes.flat, panels, strict=False):
        for s in series:
            ax.errorbar(
                list(s.x),
                list(s.y),
                yerr=None if s.err is None else list(s.err),
                label=s.label,
                linestyle="--" if s.dashed else "-",
                marker="o",
                markersize=3,
                capsize=2,
            )
        ax.set_xscale("log", base=2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("simultaneous requests")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        legend(ax, fontsize=6, ncol=2)
    for ax in list(axes.flat)[len(panels) :]:
        ax.axis("off")
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=110)
    pyplot.close(fig)
    return out.getvalue()


@dataclass(frozen=True)
class StripPoint:
    column: int  # index into the strip's categories
    y: float  # Δ % from the cell's median
    label: str  # the node
    outlier: bool  # drawn in red with its label


@dataclass(frozen=True)
class Strip:
    title: str
    categories: Sequence[str]  # cells
    points: Sequence[StripPoint]
    thresholds: Sequence[float | None]  # per category: the |Δ %| a node had to exceed


def strips_png(strips: Sequence[Strip]) -> bytes:
    """One strip plot per figure: every node's Δ % from the cell's median, per cell; the
    nodes that stand out in red and named, the cell's threshold as dashes."""
    pyplot = _pyplot()
    width = max(8.0, 0.45 * max(len(s.categories) for s in strips) + 2.0)
    fig, axes = pyplot.subplots(len(strips), 1, figsize=(width, 3.2 * len(strips)), squeeze=False)
    for ax, strip in zip(axes.flat, strips, strict=False):
        for i, limit in enumerate(strip.thresholds):
            if limit is not None:
                for sign in (1.0, -1.0):
                    ax.plot([i - 0.35, i + 0.35], [sign * limit] * 2, color="#999", lw=0.8, ls="--")
        quiet = [p for p in strip.points if not p.outlier]
        loud = [p for p in strip.points if p.outlier]
        # A small fixed jitter by node, so nodes with the same value do not hide each other.
        names = sorted({p.label for p in strip.points})
        step = 0.5 / max(len(names), 1)
        offset = {n: -0.25 + step * (i + 0.5) for i, n in enumerate(names)}
        qx = [p.column + offset[p.label] for p in quiet]
        lx = [p.column + offset[p.label] for p in loud]
        ax.scatter(qx, [p.y for p in quiet], s=14, color="#4a78b5", zorder=2)
        ax.scatter(lx, [p.y for p in loud], s=28, color="#c0231c", zorder=3)
        for p, px in zip(loud, lx, strict=True):
            ax.annotate(
                p.label, (px, p.y), textcoords="offset points", xytext=(4, 2), fontsize=7,
                color="#c0231c",
            )  # fmt: skip
        ax.axhline(0.0, color="#444", lw=0.8)
        ax.set_xticks(range(len(strip.categories)), list(strip.categories), rotation=60, fontsize=7)
        ax.set_xlim(-0.6, len(strip.categories) - 0.4)
        ax.set_ylabel("Δ % from the median")
        ax.set_title(strip.title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=110)
    pyplot.close(fig)
    return out.getvalue()
