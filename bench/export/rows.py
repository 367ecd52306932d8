"""The export's rows: tidy, one observation per row, every value at server speed.

Figures: one row per cell (phase, context, concurrency), trial and figure, with the run's
identity on every row (run id, bench commit, image, server version), the figure's value
and unit, and the cell's status (bench.results: valid, not_ready, invalid, over_capacity,
interrupted; `not_run` for a planned cell with no result). A cell without figures still
has its rows, value empty, so that "Over capacity" is in the table too. Decode figures are
the card's "All measurements" columns (CellFigures); prefill rows (concurrency 1) have
prefill_tok_s and ttft_s. Every row of a cell also says how many of its trials were valid
and how many it ran (`cell_valid_trials` of `cell_trials`: 2 of 3 when one trial of three
failed): the mean tables.md shows is over its valid trials alone. Rates are divided and
durations multiplied by the run's speed factor (bench.results, "Speed convention"): the
numbers tables.md shows, unrounded.

Requests: one row per request of samples.jsonl (every cell's raw timings), times in server
seconds from the cell's start (the records' client-clock seconds times the speed factor),
with each request's TTFT and time between tokens worked out as bench.stream.records does.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from bench import bounds
from bench.bundle import provenance as sources
from bench.errors import UsageError
from bench.results import CellFigures, CellResult, PrefillSample, Results

FIGURE_COLUMNS = (
    "run_id", "bench_commit", "image", "server_version", "phase", "context", "prompt_tokens",
    "concurrency", "trial", "figure", "value", "unit", "status", "reason", "cell_valid_trials",
    "cell_trials",
)  # fmt: skip
# CellFigures' fields, in the card's column order, and their units.
DECODE_FIGURES: tuple[tuple[str, str], ...] = (
    ("total_tok_s", "tok/s"),
    ("per_request_tok_s", "tok/s"),
    ("ttft_s", "s"),
    ("tbt_s", "s"),
    ("average_active", "requests"),
    ("completed_requests", "requests"),
    ("output_tokens", "tokens"),
    ("measured_for_s", "s"),
)
PREFILL_FIGURES: tuple[tuple[str, str], ...] = (("prefill_tok_s", "tok/s"), ("ttft_s", "s"))
REQUEST_COLUMNS = (
    "run_id", "phase", "context", "concurrency", "trial", "worker", "start_s", "sent_s",
    "first_token_s", "end_s", "prompt_tokens", "output_tokens", "chunks", "ttft_s", "tbt_s",
    "finished", "cancelled", "error", "http_status",
)  # fmt: skip
SAMPLES_NAME = "samples.jsonl"
_MAX_LINE_BYTES = 64 * 1024 * 1024  # one request's line: its chunk times, bounded

Row = dict[str, Any]


def identity(results: Results, env: Any) -> Row:
    """The run's columns of every row: its id, bench's commit, the image, the server version."""
    return {
        "run_id": results.run_id,
        "bench_commit": sources.bench_commit(results.bench_version),
        "image": sources.image_id(env),
        "server_version": results.server.version,
    }


def _decode_values(figures: CellFigures | None, speed: float) -> dict[str, float | None]:
    if figures is None:
        return dict.fromkeys((name for name, _ in DECODE_FIGURES), None)
    shown = figures.at_server_speed(speed)
    return {name: float(getattr(shown, name)) for name, _ in DECODE_FIGURES}


def _prefill_values(sample: PrefillSample, speed: float) -> dict[str, float | None]:
    if sample.status != "valid":
        return {"prefill_tok_s": None, "ttft_s": None}
    shown = sample.at_server_speed(speed)
    return {"prefill_tok_s": shown.prefill_tok_s, "ttft_s": shown.ttft_s}


def _counts(trials: Sequence[CellResult] | Sequence[PrefillSample]) -> Row:
    """A cell's trials: how many were valid, of how many it ran (none for a cell not run)."""
    valid = sum(1 for t in trials if t.status == "valid")
    return {"cell_valid_trials": valid, "cell_trials": len(trials)}


def figure_rows(results: Results, env: Any = None) -> list[Row]:
    """Every cell's figures, trial by trial, in the order of the card's tables."""
    ident = identity(results, env)
    speed = results.speed_factor
    rows: list[Row] = []

    def add(
        where: Row, values: dict[str, float | None], units: tuple[tuple[str, str], ...]
    ) -> None:
        bad = [
            why
            for name, _ in units
            if (v := values[name]) is not None and (why := bounds.figure_problem(v, name))
        ]
        if bad:  # as at the verdicts' door: the row is invalid, with the reason (issue 29, H8)
            where = {**where, "status": "invalid", "reason": bad[0]}
            values = dict.fromkeys(values)
        for name, unit in units:
            rows.append({**ident, **where, "figure": name, "value": values[name], "unit": unit})

    for ctx in results.plan.contexts:
        samples = [p for p in results.prefill if p.context_label == ctx.label]
        for p in samples:
            where = {"phase": "prefill", "context": ctx.label, "prompt_tokens": p.prompt_tokens,
                     "concurrency": 1, "trial": p.trial, "status": p.status,
                     "reason": p.reason, **_counts(samples)}  # fmt: skip
            add(where, _prefill_values(p, speed), PREFILL_FIGURES)
        if not samples and ctx.scout_reason is not None:
            where = {"phase": "prefill", "context": ctx.label, "prompt_tokens": ctx.prompt_tokens,
                     "concurrency": 1, "trial": 0, "status": "over_capacity",
                     "reason": ctx.scout_reason, **_counts(())}  # fmt: skip
            add(where, {"prefill_tok_s": None, "ttft_s": None}, PREFILL_FIGURES)
    for planned in results.plan.cells:
        cells = [
            c
            for c in results.cells
            if (c.context_label, c.concurrency) == (planned.context_label, planned.concurrency)
        ]
        for c in cells:
            where = {"phase": "decode", "context": c.context_label,
                     "prompt_tokens": c.prompt_tokens, "concurrency": c.concurrency,
                     "trial": c.trial, "status": c.status, "reason": c.reason,
                     **_counts(cells)}  # fmt: skip
            add(where, _decode_values(c.figures, speed), DECODE_FIGURES)
        if not cells:
            where = {"phase": "decode", "context": planned.context_label,
                     "prompt_tokens": planned.prompt_tokens, "concurrency": planned.concurrency,
                     "trial": 0, "status": "not_run" if planned.run else "over_capacity",
                     "reason": planned.reason, **_counts(())}  # fmt: skip
            add(where, _decode_values(None, speed), DECODE_FIGURES)
    return [{k: row.get(k) for k in FIGURE_COLUMNS} for row in rows]


class _Sample(BaseModel):
    """A line of samples.jsonl as bench.run.sweep writes it; other keys are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    phase: str
    context: str
    concurrency: int
    trial: int
    worker: int
    start_s: float
    sent_s: float | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    prompt_tokens: int | None = None
    tokens: int
    chunk_s: list[float] = []
    finished: bool = False
    cancelled: bool = False
    error: str | None = None
    http_status: int | None = None


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with path.open("rb") as f:
        for number, line in enumerate(f, start=1):
            if len(line) > _MAX_LINE_BYTES:
                raise UsageError(f"{path}:{number}: a line over {_MAX_LINE_BYTES} bytes")
            if line.strip():
                yield number, line


def request_rows(results: Results, directory: Path) -> list[Row]:
    """One row per request of the run's samples.jsonl (none when the run has none)."""
    path = directory / SAMPLES_NAME
    if not path.is_file():
        return []
    n = results.speed_factor
    rows: list[Row] = []

    def server(t: float | None) -> float | None:
        return None if t is None else t * n

    for number, line in _lines(path):
        try:
            s = _Sample.model_validate(json.loads(line))
        except (ValueError, ValidationError):  # JSONDecodeError and UnicodeDecodeError too
            raise UsageError(
                f"{path}:{number}: not a request record of `bench run`",
                hint="check the bundle with `bench verify`",
            ) from None
        origin = s.start_s if s.sent_s is None else s.sent_s
        ttft = None if s.first_token_s is None else s.first_token_s - origin
        last = s.chunk_s[-1] if s.chunk_s else None
        tbt = None
        if s.first_token_s is not None and last is not None and s.tokens >= 2:
            tbt = (last - s.first_token_s) / (s.tokens - 1)
        rows.append({
            "run_id": results.run_id, "phase": s.phase, "context": s.context,
            "concurrency": s.concurrency, "trial": s.trial, "worker": s.worker,
            "start_s": server(s.start_s), "sent_s": server(s.sent_s),
            "first_token_s": server(s.first_token_s), "end_s": server(s.end_s),
            "prompt_tokens": s.prompt_tokens, "output_tokens": s.tokens,
            "chunks": len(s.chunk_s), "ttft_s": server(ttft), "tbt_s": server(tbt),
            "finished": s.finished, "cancelled": s.cancelled, "error": s.error,
            "http_status": s.http_status,
        })  # fmt: skip
    return rows
