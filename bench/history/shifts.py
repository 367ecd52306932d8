"""`bench history changes`: every series of the history searched for change points
(bench.history.changes), each change named by its runs and the `make bisect` that would
find the commit.

A series is one (cell, figure, host, launch profile, comparable settings): the runs
`bench history trend` draws on one line. A run's value is the geometric mean of its valid
trials (a run without one is left out of the series). Without --figure the figures
searched are those a verdict is about: total_tok_s, per_request_tok_s, ttft_s, tbt_s for
a decode cell, prefill_tok_s and ttft_s for a prefill sample, output_tok_s and TTFT and
TPOT at p50 and p99 for a workload's point, and a capacity search's capacity. A workload's
points are series of their own workload (its name and hash are among the settings).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from bench import escape
from bench.errors import UsageError
from bench.history import changes, trend
from bench.history import workload_rows as wl
from bench.history.database import Connection
from bench.history.trend import PHASE_FIGURES, CellChoice, Point
from bench.verdict.cells import label_size

SEARCHED = {
    "decode": ("total_tok_s", "per_request_tok_s", "ttft_s", "tbt_s"),
    "prefill": ("prefill_tok_s", "ttft_s"),
    # compare's figures of a point (bench.verdict.workload_cells)
    wl.WORKLOAD_PHASE: ("output_tok_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s"),
    wl.CAPACITY_PHASE: ("capacity",),
}
_PHASES = tuple(SEARCHED)  # the order cells are listed in
# make bisect's FIGURE= for the figures it can follow (provisioning bisect --figure).
BISECT_FIGURE = {"total_tok_s": "total", "per_request_tok_s": "per-request",
                 "ttft_s": "ttft", "tbt_s": "tbt"}  # fmt: skip
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


@dataclass(frozen=True)
class Found:
    cell: CellChoice
    figure: str
    host: str | None
    profile: str | None
    points: tuple[Point, ...]  # the runs searched, oldest first
    search: changes.Search


def _context_tokens(context: str) -> int:
    digits = context.rstrip("KkMm")
    scale = {"K": 1024, "M": 1024 * 1024}.get(context[-1:].upper(), 1)
    return int(digits) * scale if digits.isdigit() else 0


def _size(c: CellChoice) -> float:
    return label_size(c.context) if c.phase == wl.WORKLOAD_PHASE else _context_tokens(c.context)


def cells(conn: Connection) -> list[CellChoice]:
    """Every cell the history has: decode cells first, by context and concurrency, then
    prefill samples, then workload points by rate (closed ones by C), then capacities."""
    found = [
        CellChoice(str(phase), str(context), int(conc))
        for phase, context, conc in conn.query(
            "SELECT DISTINCT phase, context, concurrency FROM cells"
        )
        if phase in SEARCHED
    ]
    return sorted(found, key=lambda c: (_PHASES.index(c.phase), _size(c), c.context,
                                        c.concurrency))  # fmt: skip


def _figures(cell: CellChoice, figure: str | None) -> tuple[str, ...]:
    if figure is None:
        return SEARCHED[cell.phase]
    return (figure,) if figure in PHASE_FIGURES[cell.phase] else ()


def check_figure(figure: str | None) -> None:
    every = list(dict.fromkeys(n for names in PHASE_FIGURES.values() for n in names))
    if figure is not None and figure not in every:
        raise UsageError(f"--figure {figure}: not a figure", hint=f"one of {', '.join(every)}")


def run_value(point: Point) -> float:
    """The run's value: the geometric mean of its valid trials."""
    return math.exp(math.fsum(math.log(v) for v in point.values) / len(point.values))


def search_points(
    cell: CellChoice, figure: str, found: Sequence[Point], *, seed: int = 0
) -> list[Found]:
    """The points split into series (host, profile, settings), each searched."""
    groups: dict[tuple[str | None, str | None, str], list[Point]] = {}
    for p in found:
        if p.values and all(v > 0 and math.isfinite(v) for v in p.values):
            groups.setdefault((p.host, p.profile, p.settings_sha256), []).append(p)
    return [
        Found(cell, figure, host, profile, tuple(g),
              changes.search([run_value(p) for p in g], seed=seed))
        for (host, profile, _), g in groups.items()
    ]  # fmt: skip


def find(
    conn: Connection,
    *,
    cell: CellChoice | None = None,
    figure: str | None = None,
    host: str | None = None,
    profile: str | None = None,
) -> list[Found]:
    out: list[Found] = []
    for c in [cell] if cell else cells(conn):
        for f in _figures(c, figure):
            found = trend.points(conn, c, f, host=host, profile=profile)
            out += search_points(c, f, found)
    return out


def bisect_command(found: Found, good: Point, bad: Point) -> str:
    """The `make bisect` line that would find the commit, or why there is none."""
    if found.cell.phase != "decode":
        return "no make bisect: it follows decode cells"
    if found.figure not in BISECT_FIGURE:
        return f"no make bisect: it does not follow {found.figure}"
    for p in (good, bad):
        if not p.engine_commit or not _COMMIT.fullmatch(p.engine_commit):
            return f"no make bisect: run {escape.terminal(p.run_id)} records no engine commit"
    if good.engine_commit == bad.engine_commit:
        return "no make bisect: both runs have the same engine commit (the change is not vLLM's)"
    host = found.host if found.host and _HOST.fullmatch(found.host) else "<host>"
    cell = f"{found.cell.concurrency}x{found.cell.context}"
    return (
        f"make bisect HOST={host} GOOD={good.engine_commit} BAD={bad.engine_commit} "
        f"CELL={cell} FIGURE={BISECT_FIGURE[found.figure]} VLLM_REPO=<your vLLM clone>"
    )


def _run(p: Point) -> str:
    image = (p.image_id or "—")[:19]
    return escape.terminal(f"{p.run_id} ({p.created_at}, engine {p.engine or '—'}, image {image})")


def _title(f: Found) -> str:
    where = f"host {f.host or '—'}, profile {f.profile or '—'}"
    workload = trend.workload_of(f.points[0].settings) if f.points else None
    of = f" of workload {workload}" if workload else ""
    return escape.terminal(f"{f.cell} {f.figure}{of}, {where}")


def _span_lines(searched: Sequence[Found]) -> list[str]:
    """Each searched series' latest span: equivalent within the margin, or not resolved."""
    spans = [(f, f.search.latest) for f in searched if f.search.latest is not None]
    if not spans:
        return []
    open_ = [(f, s) for f, s in spans if not s.equivalent]
    m = changes.MARGIN_PCT
    out = [
        "",
        f"Latest span of each series (since its last change), newer half against older: "
        f"{len(spans) - len(open_)} equivalent within ±{m:g} %, {len(open_)} not resolved "
        f"({100 * (1 - 2 * changes.EQUIVALENCE_ALPHA):g} % interval inside ±{m:g} %).",
    ]
    for f, s in open_:
        r = s.shift
        out.append(
            f"- not resolved: {_title(f)}: runs {s.first + 1} to {f.search.runs}, "
            f"{r.delta_pct:+.1f} % [{r.low_pct:+.1f}, {r.high_pct:+.1f}]"
        )
    return out


def render(found: Sequence[Found]) -> str:
    searched = [f for f in found if f.search.searched]
    short = [f for f in found if not f.search.searched]
    total = sum(len(f.search.changes) for f in searched)
    out = [
        f"{len(searched)} series searched, {total} change{'s' if total != 1 else ''} found "
        f"(binary segmentation, pooled t on log values, permutation p <= {changes.ALPHA} "
        f"over {changes.PERMUTATIONS} orders, >= {changes.MIN_SEGMENT} runs each side)."
    ]
    for f in searched:
        if not f.search.changes:
            continue
        out += ["", f"{_title(f)}: {f.search.runs} runs"]
        for c in f.search.changes:
            good, bad = f.points[c.index - 1], f.points[c.index]
            s = c.shift
            out += [
                f"- last good {_run(good)}",
                f"  first bad {_run(bad)}",
                f"  {f.figure} {s.delta_pct:+.1f} % [{s.low_pct:+.1f}, {s.high_pct:+.1f}] "
                f"(95 %), p {c.p_value:.3f}",
                f"  {bisect_command(f, good, bad)}",
            ]
    out += _span_lines(searched)
    if short:
        out += ["", f"Not searched, fewer than {changes.MIN_RUNS} runs:"]
        out += [f"- {_title(f)}: {f.search.runs} runs" for f in short]
    return "\n".join(out)
