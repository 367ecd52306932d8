"""A workload run's plots, as PNG bytes: TTFT and TPOT (p50, p99) against the load
(offered rate, or concurrency for closed-count points) and against the achieved output
tok/s. matplotlib itself is owned by `bench.report.plots` (Agg backend, one style, PNG
bytes without software or time); these drawings get pyplot from there.

Each point's status is its marker (bench.report.workload_data.STATUS_MARKERS), the p99's
95 % interval its error bar where the point had enough requests for one, and the
workload's SLO bound (server seconds) a dashed horizontal line on its panel.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bench.report.plots import _png, _pyplot
from bench.report.workload_data import (
    STATUS_MARKERS,
    LoadPoint,
    WorkloadPlotData,
    load_positions,
)
from bench.workload_points import Quantiles

_P50, _P99, _SLO = "C0", "C1", "#d62728"
TRIAL_STYLES = ("-", "--", ":", "-.")  # trial 1, 2, 3, 4, then again
Drawn = tuple[float, LoadPoint, Quantiles]


def _marker(status: str) -> str:
    return STATUS_MARKERS.get(status, ("o", ""))[0]


def _trial(ax: Any, mine: Sequence[Drawn], labelled: bool) -> None:
    """One trial's p50 and p99 lines, a status marker on each point, the p99's intervals."""
    xs = [x for x, _, _ in mine]
    style = TRIAL_STYLES[mine[0][1].trial % len(TRIAL_STYLES)]
    for attr, colour in (("p50", _P50), ("p99", _P99)):
        ys = [float(getattr(q, attr)) * 1e3 for _, _, q in mine]
        ax.plot(xs, ys, color=colour, linestyle=style, linewidth=1.2, zorder=2,
                label=attr if labelled else None)  # fmt: skip
        for x, y, (_, p, _) in zip(xs, ys, mine, strict=True):
            ax.scatter([x], [y], marker=_marker(p.status), s=30, color=colour, zorder=3)
    cis = [(x, q.p99, q.p99_ci) for x, _, q in mine if q.p99_ci is not None]
    if cis:
        ax.errorbar(
            [x for x, _, _ in cis], [p99 * 1e3 for _, p99, _ in cis],
            yerr=[[max(0.0, p99 - lo) * 1e3 for _, p99, (lo, _) in cis],
                  [max(0.0, hi - p99) * 1e3 for _, p99, (_, hi) in cis]],
            fmt="none", ecolor=_P99, capsize=3, linewidth=1, zorder=2,
            label="p99's 95 % interval" if labelled else None,
        )  # fmt: skip


def _panel(ax: Any, points: Sequence[tuple[float, LoadPoint]], name: str,
           bound_s: float | None) -> bool:  # fmt: skip
    """One figure (ttft or tpot) against x, trial by trial; whether anything was drawn."""
    drawn: list[Drawn] = []
    for x, p in points:
        q: Quantiles | None = getattr(p, name)
        if q is not None:
            drawn.append((x, p, q))
    trials = sorted({p.trial for _, p, _ in drawn})
    for trial in trials:
        mine = sorted((d for d in drawn if d[1].trial == trial), key=lambda d: d[0])
        _trial(ax, mine, labelled=trial == trials[0])
    if bound_s is not None:
        ax.axhline(bound_s * 1e3, color=_SLO, linestyle="--", linewidth=1.1, zorder=1,
                   label=f"SLO p99 \u2264 {bound_s * 1e3:,.4g} ms")  # fmt: skip
    if not drawn:
        ax.text(0.5, 0.5, "no point measured this figure", transform=ax.transAxes,
                ha="center", va="center", fontsize=9, color="#666666")  # fmt: skip
    for status in sorted({p.status for _, p, _ in drawn}):  # the legend's status markers
        ax.scatter([], [], marker=_marker(status), s=30, color="#555555", label=status)
    return bool(drawn)


def latency_against(data: WorkloadPlotData, *, throughput: bool, title: str) -> bytes:
    """Two panels, TTFT and TPOT (ms, server time), against the load (log axis, ticks at
    the points' loads) or, with `throughput`, against the achieved output tok/s. TTFT,
    which grows by decades once a server is overloaded, on a log axis; TPOT linear."""
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    ticks: list[tuple[float, str]] = []
    if throughput:
        xs: list[float | None] = [p.output_tok_s for p in data.points]
        x_label = "achieved output tok/s (server time)"
    else:
        positions, ticks = load_positions(data.points)
        xs = list(positions)
        x_label = ("simultaneous requests (closed count)" if data.closed
                   else "offered rate (requests per server second)")  # fmt: skip
    points = [(x, p) for x, p in zip(xs, data.points, strict=True) if x is not None]
    for ax, name, bound, y_label in (
        (left, "ttft", data.slo_ttft_s, "TTFT (ms, server time)"),
        (right, "tpot", data.slo_tpot_s, "TPOT (ms, server time)"),
    ):
        drew = _panel(ax, points, name, bound)
        if throughput:
            ax.set_xlim(left=0)
        elif ticks:
            ax.set_xscale("log", base=2)
            ax.set_xticks([t for t, _ in ticks], [label for _, label in ticks])
        if name == "ttft" and drew:
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(plt.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        else:
            ax.set_ylim(bottom=0)
        ax.minorticks_off()
        ax.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:,.4g}"))
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.grid(alpha=0.3)
        # Below the panel, never over a point (matplotlib's "best" place can cover one).
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=4, fontsize=7)
    fig.suptitle(f"{title}\n(markers: each point's status; error bars: the p99's 95 % interval)",
                 fontsize=10)  # fmt: skip
    fig.tight_layout()
    return _png(fig)
