"""The server's spans joined to the run's requests by trace id (results.json's `server_spans`).

A request of samples.jsonl (its `trace_id`, bench.stream.traceparent) and a span of
server_spans.jsonl (bench.live.server_span) with the same trace id are the same request
seen from both ends. Of a trace's spans the one with a time to first token is taken
(vLLM's "llm_request"), else the first. Per cell (samples.jsonl's phase, context,
concurrency and trial; a workload point's lines are one cell, concurrency 0), over its
completed requests (`finished`, no error) that have a span: the medians of the server's
queue time, time to first token and end-to-end time, the median client TTFT of those same
requests, and how many had a server TTFT larger than the client's
(bench.results.ServerTimings).

Run once, after the last cell (and after waiting for late exports: the receiver's
`wait_for`), from the two files: a resumed run joins what all its sessions wrote. Both files
are read line by line, bounded (MAX_LINE_BYTES, MAX_LINES); a line that is not one of
bench's (torn by a kill) is skipped. No third-party library here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import bounds, stats
from bench.live import server_span
from bench.live.server_span import ServerSpan
from bench.results import ServerSpans, ServerTimings
from bench.stream.traceparent import TRACE_ID

MAX_LINE_BYTES = 16 << 20
MAX_LINES = 10_000_000
NO_SPANS = (
    "the server exported no spans (start vLLM with --otlp-traces-endpoint {endpoint} to see "
    "its own timings)"
)
Key = tuple[str, str, int, int]  # phase, context, concurrency, trial
WORKLOAD = "workload"  # samples.jsonl's phase of a workload point (context: its index)


@dataclass(frozen=True, slots=True)
class SentRequest:
    """A request of samples.jsonl, as far as the join needs it."""

    key: Key
    trace_id: str
    completed: bool
    client_ttft_s: float | None


def lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of a .jsonl file, bounded; nothing for a missing file."""
    try:
        f = path.open("rb")
    except FileNotFoundError:
        return
    except OSError:
        return
    with f:
        for n, raw in enumerate(iter(lambda: f.readline(MAX_LINE_BYTES + 1), b""), start=1):
            if n > MAX_LINES:
                return
            if len(raw) > MAX_LINE_BYTES:
                continue
            try:
                row = json.loads(raw)
            except (ValueError, RecursionError):
                continue
            if isinstance(row, dict):
                yield row


def read_requests(path: Path) -> list[SentRequest]:
    """samples.jsonl's requests that carried a trace id."""
    out = []
    for row in lines(path):
        trace_id = row.get("trace_id")
        if not (isinstance(trace_id, str) and TRACE_ID.fullmatch(trace_id)):
            continue
        c, trial = row.get("concurrency"), row.get("trial", 0)
        if isinstance(c, bool) or not isinstance(c, int) or isinstance(trial, bool):
            continue
        if not isinstance(trial, int):
            continue
        phase = str(row.get("phase", ""))[:32]
        if phase == WORKLOAD:
            c = 0  # a point's lines name their worker there: the point is one cell
        key = (phase, str(row.get("context", ""))[:64], c, trial)
        completed = row.get("finished") is True and row.get("error") is None
        out.append(SentRequest(key, trace_id, completed, _client_ttft(row)))
    return out


def _client_ttft(row: dict[str, Any]) -> float | None:
    first = bounds.number(row.get("first_token_s"), -bounds.SECONDS_MAX, bounds.SECONDS_MAX)
    sent = row.get("sent_s")
    origin = bounds.number(
        row.get("start_s") if sent is None else sent, -bounds.SECONDS_MAX, bounds.SECONDS_MAX
    )
    if first is None or origin is None or first < origin:
        return None
    return first - origin


def read_spans(path: Path) -> dict[str, ServerSpan]:
    """server_spans.jsonl by trace id: the span with a TTFT, else the first."""
    spans: dict[str, ServerSpan] = {}
    for row in lines(path):
        span = server_span.from_json(row)
        if span is None:
            continue
        had = spans.get(span.trace_id)
        if had is None or (had.ttft_s is None and span.ttft_s is not None):
            spans[span.trace_id] = span
    return spans


def join(
    requests: list[SentRequest],
    spans: dict[str, ServerSpan],
    *,
    endpoint: str,
    kept: int,
    dropped: dict[str, int],
) -> ServerSpans:
    """results.json's `server_spans`: the counts, the note, and every cell's timings."""
    cells: dict[Key, list[tuple[SentRequest, ServerSpan | None]]] = {}
    for r in requests:
        if r.completed:
            cells.setdefault(r.key, []).append((r, spans.get(r.trace_id)))
    rows = [_timings(key, pairs) for key, pairs in cells.items()]
    rows.sort(key=lambda t: (t.phase, t.trial, _order(t.context), t.context, t.concurrency))
    completed = sum(t.completed for t in rows)
    joined = sum(t.joined for t in rows)
    result = ServerSpans(
        endpoint=endpoint,
        kept=kept,
        joined=joined,
        completed=completed,
        dropped={k: v for k, v in sorted(dropped.items()) if v},
        cells=tuple(rows),
    )
    return result.model_copy(update={"note": note(result)})


def _order(context: str) -> float:
    """A context label's place: 8K before 16K (a workload point's index as a number)."""
    text = context.upper()
    scale = {"K": 1e3, "M": 1e6}.get(text[-1:], 1.0)
    try:
        value = float(text[:-1] if scale != 1.0 else text)
    except ValueError:
        return math.inf
    return value * scale if math.isfinite(value) else math.inf


def _timings(key: Key, pairs: list[tuple[SentRequest, ServerSpan | None]]) -> ServerTimings:
    with_span = [(r, s) for r, s in pairs if s is not None]
    queue = [s.queue_s for _, s in with_span if s.queue_s is not None]
    server_ttft = [s.ttft_s for _, s in with_span if s.ttft_s is not None]
    client_ttft = [r.client_ttft_s for r, _ in with_span if r.client_ttft_s is not None]
    e2e = [s.e2e_s for _, s in with_span if s.e2e_s is not None]
    larger = sum(
        1
        for r, s in with_span
        if s.ttft_s is not None and r.client_ttft_s is not None and s.ttft_s > r.client_ttft_s
    )
    phase, context, concurrency, trial = key
    return ServerTimings(
        phase=phase,
        context=context,
        concurrency=concurrency,
        trial=trial,
        completed=len(pairs),
        joined=len(with_span),
        queue_s=_median(queue),
        server_ttft_s=_median(server_ttft),
        client_ttft_s=_median(client_ttft),
        server_e2e_s=_median(e2e),
        server_ttft_larger=larger,
    )


def _median(values: list[float]) -> float | None:
    return stats.median(values) if values else None


def note(s: ServerSpans) -> str:
    """What the run says about the spans, once."""
    dropped = ", ".join(f"{why} {n:,}" for why, n in s.dropped.items())
    tail = f"; dropped: {dropped}" if dropped else ""
    if not s.kept:
        return NO_SPANS.format(endpoint=s.endpoint) + tail
    share = s.joined_share
    joined = f"{s.joined:,} of {s.completed:,} completed requests"
    shown = f" ({share:.1%})" if share is not None else ""
    return f"server spans: {joined}{shown} joined to the server's span; {s.kept:,} kept{tail}"
