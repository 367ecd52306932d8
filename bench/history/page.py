"""`bench history report --html OUT`: the history as one self-contained HTML page.

What it shows: the card's matrix (bench.history.matrix), and for a workload's figure the
workloads' (a row per workload, a column per point), where each cell holds a trend line
per series (bench.history.sparkline: the latest value under it, change points marked); a
click on a cell opens its panel (each series as a table: date, run, host, commit, image,
value with its interval, status; and its change points with the `make bisect` line, as
`bench history changes` prints them); two selects that filter every series, panel and
comparison by host and launch profile in the browser (a few lines of plain script, nothing
fetched); and the latest run against its baseline as the compare page shows it
(bench.verdict.page.compare_parts over bench.history.runs' figures; two workload runs as
compare's lines and points' table, their runs having no decode cell to draw).

Every string from the database is hostile: it reaches the page through html.escape (text
and attributes; bench.verdict.page's table_html for the tables), after
bench.escape.terminal has written its control characters as escapes, clipped to MAX_TEXT
characters. Element ids are numbers, never the data.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

from bench import escape
from bench.history import changes, matrix, runs, shifts, sparkline, trend
from bench.history.database import Connection
from bench.history.matrix import Line, Matrix, Square
from bench.history.trend import Point
from bench.verdict import capacity_delta, compare, headline, page, tables
from bench.verdict.tables import TCell, VerdictTable

MAX_TEXT = runs.MAX_TEXT  # characters of one string from the database
MAX_LINE = 300  # characters of one line of the change points' text
MAX_COMPARES = 4  # latest runs compared, one per (host, profile), the newest first
TITLE = "Results history"

_STYLE = """<style>
table.matrix td.cell { cursor: pointer; vertical-align: top; text-align: left; }
table.matrix td.cell:hover { background: #eef4ff; }
td.cell div.line { margin: 2px 0; } td.cell .value { display: block; font-size: 11px; }
svg.trend polyline.series { stroke: #1f77b4; stroke-width: 1.3; }
svg.trend line.change { stroke: #b30000; stroke-dasharray: 2 2; }
svg.trend circle.change-point { fill: #b30000; } svg.trend circle.latest { fill: #1f77b4; }
svg.trend text.none { font-size: 10px; fill: #999; }
div.panel { border: 1px solid #ccc; padding: 0.5em 1em; margin: 1em 0; }
div.panel pre { white-space: pre-wrap; word-break: break-all; }
section.compare { border-top: 2px solid #ccc; margin-top: 2em; }
.filters label { margin-right: 1.5em; } .note { color: #555; }
[hidden] { display: none !important; }
</style>"""

# The selects hide what another host or profile ran (option 0: all); a click on a cell
# shows its panel and hides the others. Plain script: no network, no library.
_SCRIPT = """<script>
(function () {
  var host = document.getElementById("host-filter");
  var profile = document.getElementById("profile-filter");
  function keep(select, value) {
    return select.selectedIndex === 0 || select.value === value;
  }
  function apply() {
    document.querySelectorAll("[data-host]").forEach(function (el) {
      el.hidden = !(keep(host, el.dataset.host) && keep(profile, el.dataset.profile));
    });
  }
  host.addEventListener("change", apply);
  profile.addEventListener("change", apply);
  document.querySelectorAll("td.cell[data-panel]").forEach(function (td) {
    td.addEventListener("click", function () {
      document.querySelectorAll("div.panel").forEach(function (p) {
        p.hidden = p.id !== td.dataset.panel;
      });
      document.getElementById(td.dataset.panel).scrollIntoView();
    });
  });
})();
</script>"""


def shown(text: object) -> str:
    """A string from the database as the page's text, before html.escape: control
    characters as escapes, at most MAX_TEXT characters."""
    return escape.clipped(str(text), MAX_TEXT)


def _name(text: str | None) -> str:
    return shown(text) if text else "—"


def _where(host: str | None, profile: str | None) -> str:
    """The attributes the filters read (the names as the selects offer them)."""
    h, p = html.escape(_name(host), quote=True), html.escape(_name(profile), quote=True)
    return f'data-host="{h}" data-profile="{p}"'


def _series_name(line: Line) -> str:
    return f"host {_name(line.host)}, profile {_name(line.profile)}"


def _changes(line: Line) -> list[int]:
    return [c.index for c in line.found.search.changes] if line.found else []


def _cell(square: Square | None, n: int) -> str:
    if square is None or not square.lines:
        return '<td class="na">—</td>'
    blocks = []
    for line in square.lines:
        values = [shifts.run_value(p) for p in line.valued]
        found = len(_changes(line))
        latest = f"latest {values[-1]:,.4g}" if values else "no valid run"
        if len(square.lines) > 1:  # which line is whose
            latest = f"{escape.clipped(_name(line.host), 16)}: {latest}"
        latest += f" · {found} change{'s' if found != 1 else ''}" if found else ""
        label = f"{shown(square.title)}, {_series_name(line)}: {len(line.valued)} runs drawn"
        if values:
            label += f", from {min(values):,.4g} to {max(values):,.4g}"
        empty = shown(line.points[-1].status.replace("_", " "))  # e.g. over capacity
        svg = sparkline.svg(values, _changes(line), label=label, empty=empty)
        blocks.append(
            f'<div class="line" {_where(line.host, line.profile)}>{svg}'
            f'<span class="value">{html.escape(latest)}</span></div>'
        )
    if square.more_series:
        blocks.append(f'<span class="note">{square.more_series} more series not shown</span>')
    return f'<td class="cell" id="cell-{n}" data-panel="panel-{n}">{"".join(blocks)}</td>'


def _point_row(p: Point, mark: str) -> list[TCell]:
    status = p.status + (" (UNVERIFIED)" if p.trust != "signed" else "")
    return [
        TCell(shown(p.created_at)), TCell(shown(p.run_id)), TCell(_name(p.host)),
        TCell(_name(p.engine)), TCell(_name(p.image_id)[:19]), TCell(p.value_text()),
        TCell(shown(status), "" if p.status == "valid" else "warn"),
        TCell(mark, "worse" if mark == "first bad" else ""),
    ]  # fmt: skip


def _series_table(line: Line, figure: str) -> str:
    bad = {id(line.valued[i]) for i in _changes(line)}
    good = {id(line.valued[i - 1]) for i in _changes(line)}
    rows = [
        _point_row(p, "first bad" if id(p) in bad else "last good" if id(p) in good else "")
        for p in line.points
    ]
    runs_text = f"{line.runs} runs"
    if line.cut:
        runs_text = f"the newest {len(line.points)} of {line.runs} runs"
    header = ["date", "run", "host", "engine", "image", f"{figure} ± 95 %", "status", "change"]
    return page.table_html(VerdictTable(f"{_series_name(line)}: {runs_text}", header, rows))


def _change_text(line: Line) -> str:
    if line.found is None:
        return '<p class="note">No run of this series has a value to search.</p>'
    text = shifts.render([line.found])
    clipped = [escape.clipped(t, MAX_LINE) for t in text.splitlines()]
    return f"<pre>{html.escape(chr(10).join(clipped))}</pre>"


def _panel(square: Square, n: int, figure: str) -> str:
    parts = [f'<div class="panel" id="panel-{n}" hidden>',
             f"<h2>{html.escape(shown(square.title))}: {html.escape(figure)}</h2>"]  # fmt: skip
    for line in square.lines:
        parts += [f'<div class="series" {_where(line.host, line.profile)}>',
                  _series_table(line, figure), _change_text(line), "</div>"]  # fmt: skip
    return "".join([*parts, "</div>"])


def _matrix(m: Matrix, n: int = 0) -> tuple[str, list[str], int]:
    """The matrix as a table, the panels of its cells, and the next free number of a
    cell (its element ids: cell-N, panel-N), from N on."""
    head = "".join(f"<th>{html.escape(shown(c))}</th>" for c in m.columns)
    rows, panels = [], []
    for context in m.rows:
        cells = []
        for column in m.columns:
            square = m.squares.get((context, column))
            cells.append(_cell(square, n))
            if square is not None and square.lines:
                panels.append(_panel(square, n, m.figure))
            n += 1
        rows.append(f"<tr><th>{html.escape(shown(context))}</th>{''.join(cells)}</tr>")
    table = (
        f'<table class="matrix"><tr><th>{html.escape(m.corner)}</th>{head}</tr>'
        f"{''.join(rows)}</table>"
    )
    return table, panels, n


@dataclass(frozen=True)
class Pair:
    latest: runs.Run
    baseline: runs.Run | None


def pairs(found: Sequence[runs.Run], baseline: str | None) -> list[Pair]:
    """What the page compares: the latest run against --baseline; without one, the latest
    run of each (host, profile) against the run before it in its series."""
    if baseline is not None:
        chosen = runs.chosen(found, baseline)
        return [Pair(found[-1], chosen)]
    if not found:
        return []
    latest: dict[tuple[str | None, str | None], runs.Run] = {}
    for r in found:
        latest[(r.host, r.profile)] = r
    newest = sorted(latest.values(), key=lambda r: (r.created_at, r.manifest_sha256))[::-1]
    return [Pair(r, runs.previous(found, r)) for r in newest[:MAX_COMPARES]]


def _compare(conn: Connection, pair: Pair) -> str:
    where = _where(pair.latest.host, pair.latest.profile)
    head = f'<section class="compare" {where}>'
    name = html.escape(shown(pair.latest.run_id))
    if pair.baseline is None:
        return (
            f"{head}<h2>{name}</h2><p>No earlier run of its series (host, profile, "
            "settings) to compare it with; give one with --baseline.</p></section>"
        )
    if pair.baseline is pair.latest:
        return f"{head}<h2>{name}</h2><p>The baseline is the latest run itself.</p></section>"
    a, b = runs.figures(conn, pair.baseline), runs.figures(conn, pair.latest)
    c = compare.compare(a, b, compare.Policy())
    of_card = any(k[0] in ("decode", "prefill") for r in (a, b) for k in r.cells)
    parts = page.compare_parts(c) if of_card else _workload_parts(c)
    return head + "".join(parts) + "</section>"


def _workload_parts(c: compare.Comparison) -> list[str]:
    """Two workload runs (points, or a capacity's searches) as compare judges them: its
    lines, the SLO capacity's change and the points' table. The card's heatmaps, curves and
    frontier draw decode cells, which these runs have none of."""
    parts = [f"<h2>{html.escape(c.b.name)} against {html.escape(c.a.name)}</h2>"]
    lines = [*c.settings.lines("A", "B"), headline.verdict(c), *c.summaries()]
    if c.capacity is not None:
        lines += capacity_delta.lines(c.capacity, c.policy.alpha)
    for line in filter(None, lines):
        heading = line.startswith("### ")
        tag = "h3" if heading else "p"
        parts.append(f"<{tag}>{html.escape(line.removeprefix('### '))}</{tag}>")
    return parts + [page.table_html(t) for t in tables.compare_tables(c)]


def _select(ident: str, label: str, names: Sequence[str]) -> str:
    options = "".join(
        f'<option value="{html.escape(n, quote=True)}">{html.escape(n)}</option>' for n in names
    )
    return (
        f'<label>{label} <select id="{ident}"><option value="">all</option>{options}'
        "</select></label>"
    )


def _notes(m: Matrix, points: Matrix | None, found: Sequence[runs.Run], where: str) -> list[str]:
    cut = sum(1 for x in (m, points) if x for line in x.lines if line.cut)
    notes = [
        f"History {shown(where)}: {len(found)} runs; figure {m.figure} at server speed, each "
        "run's value the geometric mean of its valid trials. A cell holds one line per "
        "series (host, launch profile and comparable settings), oldest run left; a red "
        "dashed rule and dot mark a change point (its first bad run), the last dot is the "
        "latest run. Click a cell for its runs and change points.",
        f"Bounded: a series shows its newest {matrix.MAX_POINTS} runs, drawn, listed and "
        f"searched for changes ({cut} series here have more; `bench history trend` and "
        f"`bench history changes` read them all); a cell its {matrix.MAX_SERIES} series with "
        f"the newest runs; the matrix its {matrix.MAX_CONTEXTS} smallest contexts and "
        f"{matrix.MAX_COLUMNS} first columns; at most {MAX_COMPARES} comparisons.",
        f"Change points: binary segmentation on log values, permutation p <= {changes.ALPHA} "
        f"over {changes.PERMUTATIONS} orders, at least {changes.MIN_SEGMENT} runs each side; "
        f"a series of fewer than {changes.MIN_RUNS} runs is not searched.",
    ]
    if m.more_rows or m.more_columns:
        notes.append(f"Not shown: {m.more_rows} more contexts and {m.more_columns} more columns.")
    if points is not None:
        notes.append(
            f"Workloads: {points.figure} of a workload run's points (bench run --workload) or "
            "of a capacity search's (bench capacity, each search a trial), at server speed: a "
            "row per workload (its name and the hash of the workload as run), a column per "
            "point (its offered rate, closed:C, trace), drawn as the cells' series."
        )
        if points.more_rows or points.more_columns:
            notes.append(
                f"Not shown: {points.more_rows} more workloads and {points.more_columns} more "
                "points."
            )
    return notes


def _drawn(card: Matrix, points: Matrix | None) -> list[Matrix]:
    """The card's matrix for a figure of the card's cells (drawn when empty too), the
    workloads' for a figure of a workload's points: both for a figure of both (total_tok_s)
    when a workload has it."""
    of_card = any(card.figure in trend.PHASE_FIGURES[p] for p in ("decode", "prefill"))
    out = [card] if of_card else []
    if points is not None and (points.squares or not of_card):
        out.append(points)
    return out


def report(
    conn: Connection,
    figure: str,
    *,
    where: str,
    host: str | None = None,
    profile: str | None = None,
    baseline: str | None = None,
) -> str:
    """The page, from the open history; WHERE names the database in its text."""
    found = runs.all_runs(conn, host=host, profile=profile)
    compared = pairs(found, baseline)
    m = matrix.build(conn, figure, host=host, profile=profile)
    wm = matrix.points(conn, figure, host=host, profile=profile)
    drawn = _drawn(m, wm)
    if wm not in drawn:
        wm = None
    tables: list[str] = []
    panels: list[str] = []
    n = 0
    for each in drawn:
        table, more, n = _matrix(each, n)
        tables.append(table)
        panels += more
    lines = [line for each in drawn for line in each.lines]
    hosts = sorted({_name(x.host) for x in lines} | {_name(p.latest.host) for p in compared})
    profiles = sorted(
        {_name(x.profile) for x in lines} | {_name(p.latest.profile) for p in compared}
    )
    notes = _notes(m, wm, found, where)
    parts = [_STYLE, *(f'<p class="note">{html.escape(t)}</p>' for t in notes)]
    parts.append(
        '<p class="filters">'
        + _select("host-filter", "Host", hosts)
        + _select("profile-filter", "Launch profile", profiles)
        + "</p>"
    )
    if not found:
        parts.append("<p>No run in the history (on the host and profile asked for).</p>")
    parts += [*tables, *panels]
    if compared:
        parts.append("<h2>The latest run against its baseline</h2>")
        parts += [_compare(conn, p) for p in compared]
    parts.append(_SCRIPT)
    return page.page_html(f"{TITLE}: {figure}", parts)
