"""Our run of a card's point as the trials a reproduction judges (`reproduce.Trial`).

A run of `bench run --workload` (the card's traffic: `bench card workload`) keeps each
point's figures in results.json and each request's times in samples.jsonl (phase
"workload", context the point's index, one trial per run of it). A trial here is the
point's requests of one trial as `metrics.TimedRequest`s and its duration (first send to last
end), both in server time: client seconds x the run's speed factor (a twin run faster than
real time). A request is ok when it finished without an error and was not cancelled; its
end is its last byte (or, cut, the last time it was seen).

A trial whose point status says it was not the card's traffic as sent (`left_out`:
late_client, interrupted) is for the caller to leave out, saying why.

samples.jsonl is read line by line, bounded: a line over MAX_LINE_BYTES, or more than
MAX_LINES lines, is refused (UsageError, one line).
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from bench import bounds, run_files
from bench.errors import UsageError
from bench.publishers.metrics import TimedRequest
from bench.publishers.reproduce import Trial
from bench.results import Results

MAX_LINE_BYTES = 4 << 20
MAX_LINES = 10_000_000


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        f = path.open("rb")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    with f:
        for n, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if n > MAX_LINES or len(raw) > MAX_LINE_BYTES:
                raise UsageError(f"{path} line {n}: too long, or too many lines: not bench's")
            try:
                line = json.loads(raw)
            except (ValueError, RecursionError):
                raise UsageError(f"{path} line {n}: not JSON: not bench's samples") from None
            if isinstance(line, dict):
                yield line


def _time(value: Any, speed: float) -> float | None:
    v = bounds.number(value, -bounds.SECONDS_MAX, bounds.SECONDS_MAX)
    return None if v is None else v * speed


def _record(line: dict[str, Any], speed: float) -> TimedRequest | None:
    """One samples.jsonl line as a TimedRequest in server time; None for a request never sent."""
    start = _time(line.get("start_s"), speed)
    if start is None:
        return None
    first = _time(line.get("first_token_s"), speed)
    raw_chunks: list[Any] = line["chunk_s"] if isinstance(line.get("chunk_s"), list) else []
    raw_tokens: list[Any] = (
        line["chunk_tokens"] if isinstance(line.get("chunk_tokens"), list) else []
    )
    chunks = [_time(x, speed) for x in raw_chunks]
    counts = [bounds.count(x) for x in raw_tokens]
    if len(chunks) != len(counts) or any(x is None for x in (*chunks, *counts)):
        chunks, counts = [], []
    times = [t for t in chunks if t is not None]
    toks = [c for c in counts if c is not None]
    end = _time(line.get("end_s"), speed)
    seen = max([start, *([first] if first is not None else []), *times])
    end = seen if end is None or end < seen else end
    if first is None or not times or times[0] < first or first < start:
        first, times, toks = (None, [], []) if not times else (times[0], times, toks)
    ok = bool(line.get("finished")) and not line.get("cancelled") and line.get("error") is None
    return TimedRequest(
        start_s=start,
        first_token_s=first,
        end_s=end,
        input_tokens=bounds.count(line.get("prompt_tokens")) or 0,
        output_tokens=bounds.count(line.get("tokens")) or 0,
        chunk_s=tuple(times),
        chunk_tokens=tuple(toks),
        ok=ok and first is not None,
    )


# A trial whose point says our client did not send the card's traffic (it fell behind its
# schedule) or the run stopped in it is no measurement of the card's point: left out, said.
# overloaded (the server's backlog grew) and failed (the server's errors) are findings about
# the server, and are judged.
NOT_MEASURED = frozenset({"late_client", "interrupted"})


def left_out(results: Results, point: int = 0) -> dict[int, str]:
    """The trials of workload point POINT that are no measurement of it (NOT_MEASURED), by
    trial, each with its status and reasons in one line."""
    wl = results.workload
    if wl is None:
        return {}
    return {
        p.trial: f"{p.status}: {'; '.join(p.reasons) or 'no reason recorded'}"
        for p in wl.points
        if p.index == point and p.status in NOT_MEASURED
    }


def trials_of(
    directory: Path,
    results: Results,
    *,
    gpus: int | None,
    point: int = 0,
    skip: Collection[int] = (),
) -> list[Trial]:
    """The trials of workload point POINT of the run in DIRECTORY; UsageError when the run
    is not a workload run or has no such point."""
    wl = results.workload
    if wl is None:
        raise UsageError(
            f"{directory}: a run of the card's matrix, not of a workload: a publisher's card "
            "is reproduced by a run of its traffic",
            hint="bench card workload CARD.json -o card.toml, then bench run --workload card.toml",
        )
    speed = results.speed_factor
    durations = {
        p.trial: p.duration_s * speed for p in wl.points if p.index == point and p.trial not in skip
    }
    if not durations:
        raise UsageError(f"{directory}: the workload run has no point {point}")
    records: dict[int, list[TimedRequest]] = {t: [] for t in durations}
    for line in _lines(directory / run_files.SAMPLES):
        if line.get("phase") != "workload" or line.get("context") != str(point):
            continue
        trial = line.get("trial")
        if trial not in records:
            continue
        try:
            rec = _record(line, speed)
        except ValueError as exc:  # times out of order: a line bench did not write
            raise UsageError(f"{directory / run_files.SAMPLES}: {exc}") from None
        if rec is not None:
            records[trial].append(rec)
    out = []
    for trial in sorted(records):
        d = durations[trial]
        if not (math.isfinite(d) and d > 0):
            raise UsageError(f"{directory}: point {point} trial {trial} has no duration")
        out.append(Trial(tuple(records[trial]), d, gpus))
    return out
