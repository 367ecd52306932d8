"""The figures of one cell from its request records and /metrics samples.

Definitions are the card's (docs/run.md, "Figures"):
- output tokens: usage tokens whose chunk arrived inside [w0, w1];
- measured for: w0 to the last usage chunk inside the window;
- total tok/s = output tokens / measured for;
- TBT of a request = (t_last - t_first) / (tokens - 1), up to the window's end; the
  cell shows the median;
- per request tok/s = 1 / median TBT (1000 / ms);
- TTFT = median over every request of the cell that produced a token;
- completed = requests that finished inside the window;
- average active = mean of vllm:num_requests_running sampled inside the window.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.engines import base
from bench.results import ActiveSource, CellExtras, CellFigures
from bench.stats import distribution, median
from bench.stream import metrics
from bench.stream.metrics import Snapshot
from bench.stream.records import RequestRecord

# A cell is stalled when no token arrived for the window's last tenth and for ten times the
# longest gap between chunks seen before. The card's cells end within 0.2 s of their 30 s
# window ("measured for" 29.8-30.0 s), so this never takes a card-like cell.
STALL_WINDOW_FRACTION = 0.1
STALL_GAP_FACTOR = 10.0


def cell_figures(
    records: Sequence[RequestRecord],
    w0_s: float,
    w1_s: float,
    samples: Sequence[Snapshot],
    client_active: Sequence[tuple[float, int]],
    *,
    first: Snapshot | None,
    last: Snapshot | None,
    ready_after_s: float | None,
) -> tuple[CellFigures | None, CellExtras, str | None]:
    """(figures, extras, reason): figures None with a reason when nothing was measured."""
    output_tokens = 0
    last_chunk_s: float | None = None
    completed = 0
    in_window = 0
    ttfts: list[float] = []
    tbts: list[float] = []
    gaps: list[float] = []
    chunks = 0
    chunk_tokens = 0
    for r in records:
        got, t_last = r.tokens_between(w0_s, w1_s)
        if got:
            output_tokens += got
            in_window += 1
            if last_chunk_s is None or (t_last is not None and t_last > last_chunk_s):
                last_chunk_s = t_last
        if r.finished and r.end_s is not None and w0_s <= r.end_s <= w1_s:
            completed += 1
        # A request's life ends at the window's end: what arrives while the streams are
        # being cancelled does not count, so the figures do not depend on how long that takes.
        if r.first_token_s is not None and r.first_token_s <= w1_s:
            ttfts.append(r.first_token_s - r.ttft_from_s)
            n, t_end = r.tokens_between(float("-inf"), w1_s)
            if n >= 2 and t_end is not None:
                tbts.append((t_end - r.first_token_s) / (n - 1))
        gaps += [g for t, g in zip(r.chunk_s[1:], r.gaps_s(), strict=True) if t <= w1_s]
        chunks += len(r.chunk_s)
        chunk_tokens += r.tokens

    running = [
        v for s in samples if w0_s <= s.t_s <= w1_s and (v := s.get(metrics.RUNNING)) is not None
    ]
    average_active, active_source = _average_active(running, client_active, w0_s, w1_s)

    extras = CellExtras(
        ttft=distribution(ttfts),
        tbt=distribution(tbts),
        chunk_gap=distribution(gaps),
        tokens_per_chunk=chunk_tokens / chunks if chunks else None,
        spec_decode_acceptance_rate=_either(
            _ratio(
                metrics.delta(first, last, metrics.SPEC_ACCEPTED),
                metrics.delta(first, last, metrics.SPEC_DRAFT_TOKENS),
            ),
            _gauge(last, base.SPEC_ACCEPT_RATE, base.SPEC_ACCEPT_LENGTH),
        ),
        spec_decode_acceptance_length=_either(
            _length(first, last), _gauge(last, base.SPEC_ACCEPT_LENGTH, base.SPEC_ACCEPT_LENGTH)
        ),
        prefix_cache_hit_rate=_either(
            _ratio(
                metrics.delta(first, last, metrics.PREFIX_HITS),
                metrics.delta(first, last, metrics.PREFIX_QUERIES),
            ),
            _gauge(last, base.PREFIX_HIT_RATE, base.PREFIX_HIT_RATE),
        ),
        requests_started=len(records),
        requests_failed=sum(r.error is not None for r in records),
        requests_in_window=in_window,
        tokens_received=chunk_tokens,
        ready_after_s=ready_after_s,
        metrics_samples=len(running),
    )
    blind = sum(
        r.unattributed > 0 and r.first_token_s is not None and r.first_token_s <= w1_s
        for r in records
    )
    if blind:
        # Text came in chunks without a usage count: their tokens are credited when a
        # count finally comes (with usage only in the last chunk, a whole request at its
        # end), tokens made before the window would count inside it.
        return (
            None,
            extras,
            (
                f"usage not continuous: {blind} request(s) streamed text without a token count, "
                "so when their tokens were made is unknown (the server must send usage on "
                "every chunk: vLLM's continuous_usage_stats)"
            ),
        )
    if output_tokens == 0 or last_chunk_s is None or last_chunk_s <= w0_s:
        return None, extras, "no token received inside the window"
    if not tbts or not ttfts:
        return None, extras, "no request produced two tokens"
    measured_for_s = last_chunk_s - w0_s
    tbt_s = median(tbts)
    if tbt_s <= 0:
        # Each request's tokens came in one read: the server (or a starved client) delivered
        # them in bursts, and no time between tokens can be measured from them.
        return None, extras, "time between tokens not measurable: tokens arrived in bursts"
    silent_s, window_s = w1_s - last_chunk_s, w1_s - w0_s
    longest_s = max(gaps, default=0.0)
    if silent_s > max(STALL_WINDOW_FRACTION * window_s, STALL_GAP_FACTOR * longest_s):
        # The server went quiet before the window ended: "measured for" stops at the last
        # token, so the cell would read at the rate from before the freeze, and Valid.
        return (
            None,
            extras,
            f"server stalled: no token in the last {silent_s:.1f} s of the {window_s:.1f} s "
            f"window (the longest gap between chunks before was {longest_s:.2f} s)",
        )
    figures = CellFigures(
        total_tok_s=output_tokens / measured_for_s,
        per_request_tok_s=1.0 / tbt_s,
        ttft_s=median(ttfts),
        tbt_s=tbt_s,
        average_active=average_active,
        active_source=active_source,
        completed_requests=completed,
        output_tokens=output_tokens,
        measured_for_s=measured_for_s,
    )
    return figures, extras, None


def _average_active(
    running: list[float], client_active: Sequence[tuple[float, int]], w0_s: float, w1_s: float
) -> tuple[float, ActiveSource]:
    """Mean requests running over the window: the server's samples, else our in-flight count."""
    if running:
        return sum(running) / len(running), "server_metrics"
    inside = [n for t, n in client_active if w0_s <= t <= w1_s]
    return (sum(inside) / len(inside) if inside else 0.0), "client_in_flight"


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0:
        return None
    return num / den


def _either(counted: float | None, gauge: float | None) -> float | None:
    return counted if counted is not None else gauge


def _gauge(last: Snapshot | None, key: str, active: str) -> float | None:
    """An engine's own averaged gauge (SGLang, TensorRT-LLM: bench.engines) where the
    counters are absent; None while `active` reads 0 (no speculative decoding, no cache)."""
    if last is None or not last.get(active):
        return None
    return last.get(key)


def _length(first: Snapshot | None, last: Snapshot | None) -> float | None:
    accepted = metrics.delta(first, last, metrics.SPEC_ACCEPTED)
    drafts = metrics.delta(first, last, metrics.SPEC_DRAFTS)
    if accepted is None or drafts is None or drafts <= 0:
        return None
    return 1.0 + accepted / drafts
