"""A series as a small inline SVG trend line for the history's page: one point per run,
oldest left, the change points marked (a dashed rule before the first bad run and a red
dot on it), the latest run a dot of its own.

Plain SVG text, no library: the page is one file that draws without a network, and a
sparkline is a polyline. The y axis spans the series' own range, but never less than
MIN_SPAN (10 %) of the series' median, centred on it: a run-to-run wiggle of 1 % is drawn as a
small wiggle, not stretched to the full height where it would look like the 20 % step of a
regression (a flat series is drawn across the middle). The numbers are written beside it
(the tooltip gives the range), not on it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

WIDTH, HEIGHT, PAD = 112, 36, 4
MIN_SPAN = 0.10


def _xy(values: Sequence[float]) -> list[tuple[float, float]]:
    ordered = sorted(values)
    median = ordered[len(ordered) // 2]
    low, high = ordered[0], ordered[-1]
    floor = MIN_SPAN * abs(median)
    if high - low < floor:  # widen around the middle of the series' own range
        middle = (low + high) / 2
        low, high = middle - floor / 2, middle + floor / 2
    span = high - low
    step = (WIDTH - 2 * PAD) / max(len(values) - 1, 1)
    inner = HEIGHT - 2 * PAD
    return [
        (PAD + i * step, PAD + (inner / 2 if span <= 0 else inner * (high - v) / span))
        for i, v in enumerate(values)
    ]


def svg(
    values: Sequence[float], changes: Sequence[int], *, label: str, empty: str = "no value"
) -> str:
    """VALUES (positive, finite, oldest first) as an <svg class="trend">; CHANGES are the
    indices of first bad runs; LABEL is its tooltip, EMPTY what it says without a value
    (both escaped here)."""
    title = f"<title>{html.escape(label)}</title>"
    head = (
        f'<svg class="trend" xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" '
        f'height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-label="{html.escape(label)}">{title}'
    )
    if not values:
        y = HEIGHT / 2 + 4
        return head + f'<text x="{PAD}" y="{y:.0f}" class="none">{html.escape(empty)}</text></svg>'
    xy = _xy(values)
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in xy)
    parts = [head, f'<polyline class="series" fill="none" points="{line}"/>']
    for index in changes:
        if 0 < index < len(xy):
            x = (xy[index - 1][0] + xy[index][0]) / 2
            parts.append(
                f'<line class="change" x1="{x:.1f}" y1="0" x2="{x:.1f}" y2="{HEIGHT}"/>'
                f'<circle class="change-point" cx="{xy[index][0]:.1f}" '
                f'cy="{xy[index][1]:.1f}" r="2.5"/>'
            )
    x, y = xy[-1]
    parts.append(f'<circle class="latest" cx="{x:.1f}" cy="{y:.1f}" r="2.2"/></svg>')
    return "".join(parts)
