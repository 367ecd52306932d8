"""`bench history trend`: one cell's figure, run after run, as series of comparable runs.

A point is one run: its date, the engine's commit (its version when no commit is recorded),
its image, the figure's mean over the run's valid trials with its 95 % t interval when it
had two or more (bench.stats.mean_ci), and the cell's status. A trial counts when its
status is valid and it carries no flag (a gpu_throttled cell is shown, not averaged in, as
a verdict treats it). Runs whose comparable settings (bench.history.rows: window, output
length, API, model, launch flags, GPUs, twin or engine) are the same are one series; each
other set of settings is a series of its own, listed after it with what differs.

A workload run's point is a cell too (bench.history.workload_rows): `--cell 4/s` (a rate
point, offered requests/s at server speed; `inf/s` all at once), `closed:8` (a closed-count
point of 8 streams), `trace`, or `capacity` (a `bench capacity` run: each search a trial).
Its workload (name and hash) is one of the settings, so each workload is a series of its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench import escape, stats
from bench.errors import UsageError
from bench.export.rows import DECODE_FIGURES, PREFILL_FIGURES
from bench.history import workload_rows as wl
from bench.history.database import Connection

_CELL = re.compile(r"^([0-9]+[KkMm]?):([0-9]+|prefill)$")
_RATE = re.compile(r"^((?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:e[+-]?[0-9]+)?|inf)/s$")
_CLOSED = re.compile(r"^closed:([0-9]+)$")
# Each phase's figures, in the order the help lists them; the first is `trend`'s default.
PHASE_FIGURES: dict[str, tuple[str, ...]] = {
    "decode": tuple(n for n, _ in DECODE_FIGURES),
    "prefill": tuple(n for n, _ in PREFILL_FIGURES),
    wl.WORKLOAD_PHASE: tuple(n for n, _ in wl.POINT_FIGURES),
    wl.CAPACITY_PHASE: tuple(n for n, _ in wl.CAPACITY_FIGURES),
}
CELL_HINT = (
    "e.g. --cell 8K:64 or 8K:prefill; a workload's point 4/s, inf/s, closed:8, trace; capacity"
)


@dataclass(frozen=True)
class CellChoice:
    phase: str
    context: str
    concurrency: int

    def __str__(self) -> str:
        if self.phase == wl.CAPACITY_PHASE or (
            self.phase == wl.WORKLOAD_PHASE and self.context != "closed"
        ):
            return self.context
        if self.phase == wl.WORKLOAD_PHASE:
            return f"closed:{self.concurrency}"
        return f"{self.context}:{'prefill' if self.phase == 'prefill' else self.concurrency}"


def parse_cell(text: str) -> CellChoice:
    """`8K:64` (a decode cell), `8K:prefill` (the context's prefill sample), a workload's
    point (`4/s`, `inf/s`, `closed:8`, `trace`) or `capacity`."""
    given = text.strip().lower()
    if (rate := _RATE.fullmatch(given)) and (value := float(rate.group(1))) > 0:
        return CellChoice(wl.WORKLOAD_PHASE, f"{value:g}/s", 0)
    if closed := _CLOSED.fullmatch(given):
        return CellChoice(wl.WORKLOAD_PHASE, "closed", int(closed.group(1)))
    if given == "trace":
        return CellChoice(wl.WORKLOAD_PHASE, "trace", 0)
    if given == wl.CAPACITY_CONTEXT:
        return CellChoice(wl.CAPACITY_PHASE, wl.CAPACITY_CONTEXT, 0)
    m = _CELL.fullmatch(text.strip())
    if not m:
        raise UsageError(
            f"--cell {text!r}: not CONTEXT:CONCURRENCY nor a workload's point", hint=CELL_HINT
        )
    context = m.group(1).upper()
    if m.group(2) == "prefill":
        return CellChoice("prefill", context, 1)
    return CellChoice("decode", context, int(m.group(2)))


def default_figure(cell: CellChoice) -> str:
    """`trend`'s figure when none is given: total_tok_s of a cell, prefill_tok_s of a
    prefill sample, output_tok_s of a workload's point, a capacity search's capacity."""
    return PHASE_FIGURES[cell.phase][0]


def check_figure(cell: CellChoice, figure: str) -> str:
    known = PHASE_FIGURES[cell.phase]
    if figure not in known:
        raise UsageError(
            f"--figure {figure}: not a {_phase_name(cell.phase)} figure",
            hint=f"one of {', '.join(known)}",
        )
    return figure


def _phase_name(phase: str) -> str:
    return "workload point" if phase == wl.WORKLOAD_PHASE else phase


def workload_of(settings: dict[str, str]) -> str | None:
    """The workload (name and hash) of a series' settings; None for the card's matrix."""
    return settings.get("workload")


@dataclass
class Point:
    created_at: str
    run_id: str
    engine: str | None
    image_id: str | None
    host: str | None
    trust: str
    settings_sha256: str
    settings: dict[str, str]
    values: list[float] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    engine_commit: str | None = None  # the whole commit, for `make bisect`
    profile: str | None = None
    manifest_sha256: str | None = None  # the run's key (bench.history.marks records it)

    @property
    def status(self) -> str:
        kinds = sorted(set(self.statuses))
        if len(kinds) == 1:
            return kinds[0]
        return ", ".join(f"{k} {self.statuses.count(k)}" for k in kinds)

    def value_text(self) -> str:
        if not self.values:
            return "—"
        if len(self.values) == 1:
            return f"{self.values[0]:,.4g}"
        ci = stats.mean_ci(self.values)
        return f"{ci.mean:,.4g} ± {(ci.high - ci.low) / 2:,.2g} (n={len(self.values)})"


@dataclass(frozen=True)
class Series:
    settings: dict[str, str]
    points: tuple[Point, ...]


_QUERY = """
SELECT r.manifest_sha256, r.created_at, r.run_id, r.engine_commit, r.engine_version,
       r.image_id, r.host, r.trust, r.settings_sha256, r.settings_json,
       c.trial, c.status, c.flags, f.value, r.launch_profile
FROM runs r
JOIN cells c ON c.manifest_sha256 = r.manifest_sha256
LEFT JOIN figures f ON f.manifest_sha256 = c.manifest_sha256 AND f.phase = c.phase
    AND f.context = c.context AND f.concurrency = c.concurrency AND f.trial = c.trial
    AND f.figure = ?
WHERE c.phase = ? AND c.context = ? AND c.concurrency = ?
"""


def settings_of(text: Any) -> dict[str, str]:
    """A run's recorded settings_json as names and values; {} when it is no JSON object."""
    try:
        loaded = json.loads(str(text))
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {}


def points(
    conn: Connection,
    cell: CellChoice,
    figure: str,
    *,
    host: str | None = None,
    profile: str | None = None,
) -> list[Point]:
    """One point per run that has the cell, oldest first."""
    sql, params = _QUERY, [figure, cell.phase, cell.context, cell.concurrency]
    if host is not None:
        sql, params = sql + " AND r.host = ?", [*params, host]
    if profile is not None:
        sql, params = sql + " AND r.launch_profile = ?", [*params, profile]
    sql += " ORDER BY r.created_at, r.manifest_sha256, c.trial"
    found: dict[str, Point] = {}
    for row in conn.query(sql, params):
        key, created, run_id, commit, version, image, on, trust, sha, settings = row[:10]
        trial_status, flags, value, launch_profile = row[11], row[12], row[13], row[14]
        point = found.get(key)
        if point is None:
            engine = str(commit)[:12] if commit else (str(version) if version else None)
            point = found[key] = Point(
                str(created), str(run_id), engine, image, on, str(trust), str(sha),
                settings_of(settings), engine_commit=str(commit) if commit else None,
                profile=str(launch_profile) if launch_profile else None,
                manifest_sha256=str(key),
            )  # fmt: skip
        status = str(trial_status)
        if status == "valid" and flags:
            status = str(flags)
        point.statuses.append(status)
        if status == "valid" and value is not None:
            point.values.append(float(value))
    return list(found.values())


def series(found: Sequence[Point]) -> list[Series]:
    """The points grouped by their settings, each group in date order, groups in the order
    of their first run."""
    groups: dict[str, list[Point]] = {}
    for p in found:
        groups.setdefault(p.settings_sha256, []).append(p)
    return [Series(g[0].settings, tuple(g)) for g in groups.values()]


def differences(first: dict[str, str], other: dict[str, str]) -> str:
    names = sorted(set(first) | set(other))
    return ", ".join(
        f"{n} {first.get(n, '—')} → {other.get(n, '—')}"
        for n in names
        if first.get(n) != other.get(n)
    )


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(escape.md_cell(c) for c in cells) + " |"


def render(cell: CellChoice, figure: str, found: Sequence[Series], *, show_host: bool) -> str:
    """The series as Markdown tables, a line before each saying which settings it has."""
    if not found:
        return f"No run in the history has cell {cell}."
    header = ["date", "run", "engine", "image", figure, "status"]
    if show_host:
        header.insert(2, "host")
    out: list[str] = []
    first = found[0].settings
    for i, s in enumerate(found, start=1):
        if i == 1:
            w = workload_of(s.settings)
            of = f" of workload {escape.terminal(w)}" if w else ""
            out.append(f"Series 1 of {len(found)}: cell {cell}{of}, {figure}, {len(s.points)} runs")
        else:
            out += [
                "",
                f"Series {i} of {len(found)}: a new series, its settings differ from series 1 "
                f"({differences(first, s.settings)}), {len(s.points)} runs",
            ]
        out += ["", _row(header), "|" + "---|" * len(header)]
        for p in s.points:
            status = p.status + (" (UNVERIFIED)" if p.trust != "signed" else "")
            line = [p.created_at, p.run_id, p.engine or "—", (p.image_id or "—")[:19],
                    p.value_text(), status]  # fmt: skip
            if show_host:
                line.insert(2, p.host or "—")
            out.append(_row(line))
    return "\n".join(out)
