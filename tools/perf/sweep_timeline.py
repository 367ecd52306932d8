"""Where the wall time of a sweep went, rebuilt from its run directory and its JSON log.

Every span is placed on one timeline in seconds since the `bench run` process started:

- from results.json and samples.jsonl (times relative to each cell's start, plus the Unix
  time of that origin): cold scouts, the start of each cell (after the drain barrier),
  the last first token of the C requests launched together, the gate opening, the window,
  the last stream of the cell being accounted;
- from the log (`cell_started` before the drain barrier, `cell_finished` and
  `prefill_measured` once the results are on disk, `prompt_sized` with the seconds the
  sweep waited for /tokenize): the drain barrier, writing and prompt sizing.

Each instant of the wall is given to exactly one part (the first in PARTS whose span
covers it), so the parts always add up to the wall; "other" is what no span covers.
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

# The parts, in priority order; the first three are what the methodology itself needs.
WINDOWS = "measurement windows"
HOLDS = "readiness holds"
PREFILLS = "cold prefills"
FIRST_TOKENS = "first tokens of the C launched together (server)"
STARTUP = "start-up and planning"
SIZING = "prompt sizing (/tokenize), waited for"
DRAIN = "drain barrier"
GATE = "gate beyond the hold"
STOP = "stop (cancel streams)"
WRITING = "writing results"
FINISH = "finish (final save, tables)"
OTHER = "other"
PARTS = (WINDOWS, HOLDS, PREFILLS, FIRST_TOKENS, STARTUP, SIZING, DRAIN, GATE, STOP, WRITING)
NEEDED = (WINDOWS, HOLDS, PREFILLS)
_SHORT = {
    DRAIN: "drain_s",
    FIRST_TOKENS: "first_tokens_s",
    GATE: "gate_s",
    STOP: "stop_s",
    WRITING: "writing_s",
}


@dataclass(frozen=True, slots=True)
class Span:
    part: str
    start_s: float
    end_s: float


def log_events(lines: Iterable[str], started_wall: float) -> list[tuple[float, dict[str, Any]]]:
    """(seconds since process start, event) for every JSON log line with a timestamp."""
    out = []
    for line in lines:
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if not isinstance(ev, dict) or "timestamp" not in ev or "event" not in ev:
            continue
        t = dt.datetime.fromisoformat(ev["timestamp"]).timestamp() - started_wall
        out.append((t, ev))
    return out


def cover(spans: list[Span], wall_s: float) -> dict[str, float]:
    """Seconds of the wall per part: each instant goes to the highest-priority span on it."""
    rank = {p: i for i, p in enumerate(PARTS)}
    edges = sorted({0.0, wall_s, *(x for s in spans for x in (s.start_s, s.end_s))})
    edges = [e for e in edges if 0.0 <= e <= wall_s]
    got = dict.fromkeys((*PARTS, FINISH, OTHER), 0.0)
    last_mark = max((s.end_s for s in spans), default=0.0)
    for a, b in itertools.pairwise(edges):
        mid = (a + b) / 2
        on = [s.part for s in spans if s.start_s <= mid < s.end_s]
        if on:
            got[min(on, key=rank.__getitem__)] += b - a
        elif a >= last_mark:
            got[FINISH] += b - a
        else:
            got[OTHER] += b - a
    return got


def breakdown(
    results: dict[str, Any],
    samples: list[dict[str, Any]],
    events: list[tuple[float, dict[str, Any]]],
    started_wall: float,
    wall_s: float,
) -> dict[str, Any]:
    s = results["settings"]
    speed = results["server"]["speed_factor"]
    window_s = s["duration_s"] / speed
    hold_s = s["readiness_hold_s"] / speed
    multi = s["trials"] > 1
    prefill_rows = [r for r in samples if r["phase"] == "prefill"]
    anchor_unix = (
        prefill_rows[0]["origin_unix_s"]
        if prefill_rows
        else dt.datetime.fromisoformat(results["created_at"]).timestamp()
    )
    anchor = anchor_unix - started_wall
    spans = [Span(STARTUP, 0.0, anchor)]

    for r in prefill_rows:
        o = r["origin_unix_s"] - started_wall
        spans.append(Span(PREFILLS, o + r["start_s"], o + (r["end_s"] or r["start_s"])))

    cell_end, first_wave = _decode_times(samples)

    def name(label: str, c: int, trial: int) -> str:
        return f"{label} x {c}" + (f" trial {trial + 1}" if multi else "")

    started = {e["cell"]: t for t, e in events if e["event"] == "cell_started"}
    finished = {e["cell"]: t for t, e in events if e["event"] == "cell_finished"}
    per_cell: list[dict[str, Any]] = []
    for c in results["cells"]:
        extras = c.get("extras") or {}
        if c.get("started_at_s") is None or extras.get("window_start_s") is None:
            continue
        key = (c["context_label"], c["concurrency"], c["trial"])
        n = name(*key)
        t0 = anchor + c["started_at_s"]
        w0 = t0 + extras["window_start_s"]
        ready = t0 + (extras.get("ready_after_s") or extras["window_start_s"])
        last_first = t0 + max(first_wave.get(key, {0: 0.0}).values())
        end = t0 + cell_end.get(key, extras["window_end_s"])
        cell = [
            Span(DRAIN, started.get(n, t0), t0),
            Span(FIRST_TOKENS, t0, min(last_first, ready - hold_s)),
            Span(GATE, last_first, ready - hold_s),
            Span(HOLDS, ready - hold_s, ready),
            Span(GATE, ready, w0),
            Span(WINDOWS, w0, w0 + window_s),
            Span(STOP, w0 + window_s, end),
            Span(WRITING, end, finished.get(n, end)),
        ]
        spans += cell
        per_cell.append(
            {"cell": n} | {_SHORT[p]: round(v, 4) for p, v in _sum(cell).items() if p in _SHORT}
        )

    spans += _scout_spans(events, prefill_rows, spans, started_wall, anchor)
    sized_by_log = any(e["event"] == "prompt_sized" for _, e in events)

    spans = [sp for sp in spans if sp.end_s > sp.start_s]
    parts = cover(spans, wall_s)
    needed = sum(parts[p] for p in NEEDED)
    first = parts[FIRST_TOKENS]
    return {
        "wall_s": wall_s,
        "cells": len(per_cell),
        "prefills": len(prefill_rows),
        "needed_s": needed,
        "efficiency": wall_s / needed if needed else None,
        # The gate cannot hold before the server has given each of the C workers its first
        # token: that wait is the server's (the C-way TTFT the card reports), not the sweep's.
        "efficiency_with_first_tokens": wall_s / (needed + first) if needed else None,
        "floor_with_this_server": (needed + first) / needed if needed else None,
        "sweep_overhead_s": wall_s - needed - first,
        "breakdown_s": parts,
        "unaccounted_s": wall_s - sum(parts.values()),
        "sizing_logged": sized_by_log,
        "per_cell": per_cell,
    }


def _decode_times(
    samples: list[dict[str, Any]],
) -> tuple[dict[tuple[str, int, int], float], dict[tuple[str, int, int], dict[int, float]]]:
    """Per decode cell: when its last request ended, and each worker's first first token."""
    cell_end: dict[tuple[str, int, int], float] = {}
    first_wave: dict[tuple[str, int, int], dict[int, float]] = {}
    for r in samples:
        if r["phase"] != "decode":
            continue
        key = (r["context"], r["concurrency"], r["trial"])
        cell_end[key] = max(cell_end.get(key, 0.0), r["end_s"] or 0.0)
        wave = first_wave.setdefault(key, {})
        if r["worker"] not in wave and r["first_token_s"] is not None:
            wave[r["worker"]] = r["first_token_s"]
    return cell_end, first_wave


def _scout_spans(
    events: list[tuple[float, dict[str, Any]]],
    prefill_rows: list[dict[str, Any]],
    spans: list[Span],
    started_wall: float,
    anchor: float,
) -> list[Span]:
    """Writing after each scout and prompt sizing (from the log, or before the sweep logged
    it, the gap just before each scout)."""
    out: list[Span] = []
    scouts = {(r["context"], r["trial"]): r for r in prefill_rows}
    for t, e in events:
        if e["event"] == "prefill_measured":
            scout = scouts.get((e["context"], e["trial"] - 1))
            if scout is not None:
                end = scout["origin_unix_s"] - started_wall + scout["end_s"]
                out.append(Span(WRITING, end, t))
        elif e["event"] == "prompt_sized":
            out.append(Span(SIZING, t - e["waited_s"], t))
    if not any(e["event"] == "prompt_sized" for _, e in events):
        marks = sorted(sp.end_s for sp in [*spans, *out] if sp.part != PREFILLS)
        for r in prefill_rows:
            a = r["origin_unix_s"] - started_wall + r["start_s"]
            before = [m for m in marks if m <= a]
            out.append(Span(SIZING, before[-1] if before else anchor, a))
    return out


def _sum(spans: list[Span]) -> dict[str, float]:
    out: dict[str, float] = {}
    for sp in spans:
        out[sp.part] = out.get(sp.part, 0.0) + max(0.0, sp.end_s - sp.start_s)
    return out
