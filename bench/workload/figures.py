"""A point's figures from its requests (docs/workloads.md defines each; vLLM's `vllm bench
serve` is the reference where a definition is shared):

    completed       ended normally, no failure, not cancelled
    duration        first send to the last end of any request of the point
    TTFT            request written to its first token chunk
    TPOT            per request (last chunk - first chunk) / (tokens - 1), tokens > 1
                    (vLLM's (E2EL - TTFT) / (output - 1))
    ITL             every gap between consecutive token chunks (a chunk may carry several
                    tokens, as vLLM's ITL list is per chunk)
    E2EL            request written to its last token chunk
    throughput      output tokens / duration; total: (input + output) / duration
    achieved rate   completed / duration
    goodput         completed requests within every SLO bound / duration (vLLM's --goodput;
                    a request of one token has TPOT 0 there)
    lateness        dispatched - due (open loop): the client's own delay

The SLO checks count a failed request as over every bound (its latency is unknown, and a
server that fails requests does not meet an SLO by failing them).

Validity (`status`, first that applies): `failed` when over FAILURE_SHARE of the requests
failed; `late_client` when the client's lateness p99 exceeded LATE_P99_S (or LATE_GAP_SHARE of the
mean scheduled gap, when that is longer) or its sent rate
missed the schedule's by over RATE_TOLERANCE; `overloaded` when requests were still
running at the point's bound, or the backlog grew through the second half of the
arrivals (in flight at the last send > 1.5 x at the middle send + 4, and fewer than
OVERLOAD_SHARE of that half's arrivals completed in it): a finding about the server, not
noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from bench import stats
from bench.failures import ErrorKind
from bench.stream.records import RequestRecord
from bench.workload import slo as slo_rules
from bench.workload.runner import PointRun
from bench.workload.schedule import Planned
from bench.workload_points import PointResult, PointStatus, Quantiles
from bench.workload_spec import Slo

FAILURE_SHARE = 0.01
LATE_P99_S = 0.010  # client seconds
LATE_GAP_SHARE = 0.05
RATE_TOLERANCE = 0.02
OVERLOAD_SHARE = 0.9
MIN_FOR_OVERLOAD = 20  # requests a point needs before its backlog is judged


def quantiles(values: Sequence[float]) -> Quantiles | None:
    if not values:
        return None
    ci = {f"p{q}_ci": stats.quantile_interval(values, q / 100) for q in (50, 90, 99)}
    return Quantiles(
        n=len(values),
        mean=math.fsum(values) / len(values),
        p50=stats.percentile(values, 50),
        p90=stats.percentile(values, 90),
        p99=stats.percentile(values, 99),
        min=min(values),
        max=max(values),
        **ci,
    )


def _completed(r: RequestRecord) -> bool:
    return r.finished and r.failure is None and not r.cancelled


def _e2el(r: RequestRecord) -> float | None:
    last = r.last_token_s
    return None if last is None else last - r.ttft_from_s


def in_flight_at(records: Sequence[RequestRecord], t: float) -> int:
    return sum(
        1
        for r in records
        if not math.isnan(r.start_s) and r.start_s <= t and (r.end_s is None or r.end_s > t)
    )


def point_result(
    run: PointRun,
    planned: Sequence[Planned],
    *,
    index: int,
    trial: int,
    offered_rate: float | None,
    concurrency: int | None,
    slo: Slo | None,
    speed: float,
    ignore_eos: bool,
    warmups: int,
    started_at_s: float | None,
) -> PointResult:
    recs = run.records
    sent = [r for r in recs if not math.isnan(r.start_s)]
    done = [r for r in recs if _completed(r)]
    failed = [r for r in recs if r.failure is not None]
    kinds: dict[ErrorKind, int] = {}
    for r in failed:
        kinds[r.failure.kind] = kinds.get(r.failure.kind, 0) + 1  # type: ignore[union-attr]
    first = min((r.start_s for r in sent), default=run.t0_s)
    last_end = max((r.end_s for r in recs if r.end_s is not None), default=first)
    duration = max(last_end - first, 1e-9)
    open_loop = bool(run.due_s) and not math.isnan(run.due_s[0])
    span = (run.due_s[-1] - run.due_s[0]) if open_loop else (
        max((r.start_s for r in sent), default=first) - first
    )  # fmt: skip
    input_tokens = sum(r.prompt_tokens or 0 for r in done)
    output_tokens = sum(r.tokens for r in done)
    by_figure = {
        "ttft": [v for r in done if (v := r.ttft_s) is not None],
        "tpot": [v for r in done if (v := r.tbt_s) is not None],
        "e2el": [v for r in done if (v := _e2el(r)) is not None],
    }
    itl = [g for r in done for g in r.gaps_s()]
    untimed = _untimed(done, by_figure["tpot"])
    if untimed is not None:  # no time per token can be read from these streams
        by_figure["tpot"], itl = [], []
    load = _load(run, sent)
    checks = []
    bounds = {} if slo is None else {k: v / speed for k, v in slo.bounds().items()}
    hard_failed = [r for r in failed if not r.cancelled]
    for figure, q, bound in [] if slo is None else slo.terms():
        values = by_figure[figure] + [math.inf] * len(hard_failed)
        checks.append(slo_rules.judge(figure, values, bound / speed, q))
    good = sum(1 for r in done if _within(r, bounds)) if bounds else None
    finite_rate = offered_rate is not None and math.isfinite(offered_rate)
    status, reasons = _validity(run, failed, load, finite_rate=finite_rate)
    notes = _notes(recs, planned, ignore_eos) + ([untimed] if untimed else [])
    return PointResult(
        index=index, trial=trial, offered_rate=offered_rate, concurrency=concurrency,
        status=status, reasons=tuple(reasons), notes=tuple(notes),
        requests=len(recs), completed=len(done), failures_by_kind=kinds, warmups=warmups,
        stopped_early=_stopped_early(recs, planned) if ignore_eos else 0,
        unfinished=run.unfinished, duration_s=duration, arrival_span_s=max(span, 0.0),
        sent_rate=load.sent_rate, scheduled_rate=load.scheduled_rate,
        achieved_rate=len(done) / duration,
        input_tokens=input_tokens, output_tokens=output_tokens,
        output_tok_s=output_tokens / duration,
        total_tok_s=(input_tokens + output_tokens) / duration,
        ttft=quantiles(by_figure["ttft"]), tpot=quantiles(by_figure["tpot"]),
        itl=quantiles(itl), e2el=quantiles(by_figure["e2el"]),
        lateness=quantiles(load.lateness), held=quantiles([h for h in run.held_s if h > 0]),
        backlog_mid=load.backlog_mid, backlog_end=load.backlog_end,
        goodput_rate=None if good is None else good / duration,
        slo=tuple(checks), started_at_s=started_at_s,
    )  # fmt: skip


@dataclass(frozen=True)
class _Load:
    """How an open-loop point's schedule was kept (all None or empty for a closed one)."""

    lateness: list[float]
    sent_rate: float | None
    scheduled_rate: float | None
    backlog_mid: int | None
    backlog_end: int | None


def _load(run: PointRun, sent: Sequence[RequestRecord]) -> _Load:
    due, recs = run.due_s, run.records
    if not due or math.isnan(due[0]):
        return _Load([], None, None, None, None)
    lateness = [d - t for d, t in zip(run.dispatched_s, due, strict=True) if not math.isnan(d)]
    return _Load(
        lateness,
        # When the client sent, whatever a max_in_flight cap then held it for.
        _rate(len(sent), [d for d in run.dispatched_s if not math.isnan(d)]),
        _rate(len(due), due),
        in_flight_at(recs, due[len(due) // 2]),
        in_flight_at(recs, due[-1]),
    )


def _validity(
    run: PointRun, failed: Sequence[RequestRecord], load: _Load, *, finite_rate: bool
) -> tuple[PointStatus, list[str]]:
    """The point's status and its reasons (module docstring, "Validity")."""
    recs = run.records
    reasons: list[str] = []
    status: PointStatus = "valid"
    if len(failed) > FAILURE_SHARE * max(len(recs), 1):
        status = "failed"
        reasons.append(f"{len(failed)} of {len(recs)} requests failed (bound {FAILURE_SHARE:.0%})")
    if finite_rate and load.lateness:
        p99 = stats.percentile(load.lateness, 99)
        late = _late_bound(load.scheduled_rate)
        if p99 > late:
            reasons.append(f"the client sent late: lateness p99 {p99 * 1e3:.1f} ms > "
                           f"{late * 1e3:.3g} ms")  # fmt: skip
        sent, planned = load.sent_rate, load.scheduled_rate
        if sent and planned and abs(sent / planned - 1) > RATE_TOLERANCE:
            reasons.append(f"the client sent at {sent:.3g}/s against a schedule of "
                           f"{planned:.3g}/s")  # fmt: skip
        if reasons and status == "valid":
            status = "late_client"
    overload = _overloaded(run, recs, load.backlog_mid, load.backlog_end) if finite_rate else None
    if run.unfinished:
        overload = f"{run.unfinished} request(s) still running at the point's bound"
    if overload is not None:
        reasons.append(overload)
        status = "overloaded" if status == "valid" else status
    return status, reasons


def _late_bound(scheduled_rate: float | None) -> float:
    """LATE_P99_S, or LATE_GAP_SHARE of the mean scheduled gap when that is longer: a delay
    that small beside the gaps leaves the arrival process what it was planned to be (and
    TTFT counts from the send, so lateness never enters it)."""
    gap = 1.0 / scheduled_rate if scheduled_rate else 0.0
    return max(LATE_P99_S, LATE_GAP_SHARE * gap)


def _untimed(done: Sequence[RequestRecord], tpots: Sequence[float]) -> str | None:
    """Why TPOT and ITL cannot be read from these requests, or None when they can: text
    without a token count (its tokens credited later, when made unknown), or each request's
    tokens in one read (bursts), the card's cells' rules (bench.run.figures)."""
    blind = sum(1 for r in done if r.unattributed)
    if blind:
        return (
            f"TPOT and ITL not measurable: {blind} request(s) streamed text without a token "
            "count (the server must send usage on every chunk)"
        )
    if tpots and stats.median(tpots) <= 0:
        return (
            "TPOT and ITL not measurable: tokens arrived in bursts (the server, or a starved "
            "client, delivered most requests' tokens in one read)"
        )
    return None


def _rate(n: int, times: Sequence[float]) -> float | None:
    if n < 2:
        return None
    span = max(times) - min(times)
    return (n - 1) / span if span > 0 else None


def _within(r: RequestRecord, bounds: dict[str, float]) -> bool:
    values = {"ttft": r.ttft_s, "tpot": r.tbt_s if r.tokens > 1 else 0.0, "e2el": _e2el(r)}
    return all((v := values[k]) is not None and v <= b for k, b in bounds.items())


def _overloaded(
    run: PointRun, recs: Sequence[RequestRecord], mid: int | None, end: int | None
) -> str | None:
    due = run.due_s
    if mid is None or end is None or len(due) < MIN_FOR_OVERLOAD:
        return None
    t_mid, t_end = due[len(due) // 2], due[-1]
    arrived = len(due) - len(due) // 2
    completed = sum(1 for r in recs if r.end_s is not None and t_mid < r.end_s <= t_end)
    if end > 1.5 * mid + 4 and completed < OVERLOAD_SHARE * arrived:
        return (
            f"overloaded: requests in flight grew from {mid} to {end} over the second half "
            f"of the arrivals, and {completed} of its {arrived} arrivals' worth completed in it"
        )
    return None


def _stopped_early(recs: Sequence[RequestRecord], planned: Sequence[Planned]) -> int:
    """Completed requests (records in schedule order) with fewer tokens than drawn."""
    return sum(
        1
        for r, p in zip(recs, planned, strict=True)
        if _completed(r) and r.tokens < p.output_tokens
    )


def _notes(
    recs: Sequence[RequestRecord], planned: Sequence[Planned], ignore_eos: bool
) -> list[str]:
    notes = []
    done = [r for r in recs if _completed(r)]
    if done:
        asked = math.fsum(p.input_tokens for p in planned) / len(planned)
        got = math.fsum(r.prompt_tokens or 0 for r in done) / len(done)
        notes.append(f"prompts: drawn mean {asked:,.0f} tokens, measured mean {got:,.0f}")
    early = _stopped_early(recs, planned) if ignore_eos else 0
    if early:
        notes.append(
            f"{early} request(s) ended before their drawn output length under ignore_eos: "
            "the server stopped them early (its max_model_len, or ignore_eos not honoured)"
        )
    return notes
