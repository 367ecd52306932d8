"""A workload run's points as a markdown table (tables.md's workload section), at server
speed (durations x speed factor, rates / speed factor: identical for a real server).

Every text from outside (reasons quote the server) is escaped where it is rendered."""

from __future__ import annotations

import math

from bench import escape
from bench.workload_points import PointResult, Quantiles, WorkloadRun


def _ms(q: Quantiles | None, attr: str, speed: float) -> str:
    if q is None:
        return "-"
    return f"{getattr(q, attr) * speed * 1e3:,.1f}"


def _rate(value: float | None, speed: float) -> str:
    if value is None:
        return "-"
    return "inf" if math.isinf(value) else f"{value / speed:,.2f}"


def _point_name(p: PointResult, speed: float) -> str:
    if p.concurrency is not None:
        return f"C = {p.concurrency}"
    return f"{_rate(p.offered_rate, speed)}/s"


def _slo(p: PointResult) -> str:
    if not p.slo:
        return "-"
    return ", ".join(f"{c.figure} p{c.percentile} {c.verdict}" for c in p.slo)


def _describe(run: WorkloadRun) -> str:
    w = run.workload
    a, ln = w.arrivals, w.lengths
    if a.kind == "rate":
        shape = f"{a.process} arrivals, {a.requests} requests a point"
        shape += f", burstiness {a.burstiness:g}" if a.process == "gamma" else ""
        shape += f", at most {a.max_in_flight} in flight" if a.max_in_flight else ""
    elif a.kind == "trace":
        shape = (
            f"a trace's arrivals and lengths ({escape.md_cell(a.path)}, timestamps / {a.speedup:g})"
        )
    else:
        shape = (
            f"closed loop, {a.requests_per_stream} x C prompts after "
            f"{a.warmups_per_stream} x C warm-ups"
        )
    if w.prompts.source != "random":
        lengths = (
            f"prompts and output lengths from {escape.md_cell(w.prompts.path)} ({w.prompts.source})"
        )
    elif a.kind == "trace":
        lengths = "lengths from the trace"
    else:
        lengths = (
            f"input {ln.input_tokens:,} and output {ln.output_tokens:,} tokens, range "
            f"ratio {ln.range_ratio:g} ({ln.semantics}'s rule)"
        )
    prefix = (
        f"; a {w.prefix.tokens:,}-token prefix shared by {w.prefix.group_size}"
        if w.prefix.tokens
        else ""
    )
    return (
        f"{shape}; {lengths}{prefix}; seed {w.seed}; ignore_eos {'on' if ln.ignore_eos else 'off'}."
    )


def _capacity(run: WorkloadRun, speed: float) -> list[str]:
    """The SLO capacity's section: the bound and the point estimate, their intervals, each
    search's path."""
    cap = run.capacity
    assert cap is not None
    per = speed if cap.by == "rate" else 1.0
    unit = "requests/s" if cap.by == "rate" else "streams"

    def shown(x: float) -> str:
        return f"{x / per:,.3g}"

    def mean(value: float | None, interval: tuple[float, float] | None, n: int) -> str:
        assert value is not None
        text = f"**{shown(value)} {unit}**"
        if interval is not None:
            text += f", 95 % interval [{shown(interval[0])}, {shown(interval[1])}]"
        return text + f" over {n} search(es)"

    head = f"### SLO capacity ({escape.md_cell(cap.slo)}, by {cap.by})"
    if cap.estimate is None:
        found = "no search found a point that meets the SLO"
    else:
        found = mean(cap.estimate, cap.interval, sum(s.met is not None for s in cap.searches))
    lines = [head, "", f"Capacity, the bound: {found} (each search's highest point shown to "
             "meet the SLO at 99 % confidence: the capacity lies above it); server time "
             f"{cap.server_s:,.0f} s."]  # fmt: skip
    if cap.crossing is not None:
        given = sum(s.crossing is not None for s in cap.searches)
        lines.append(
            "Capacity, the point estimate: "
            f"{mean(cap.crossing, cap.crossing_interval, given)} (where each search's measured "
            "percentile crosses its bound, interpolated between its points)."
        )
    elif any(s.crossing_note for s in cap.searches):
        lines.append("Capacity, the point estimate: none (each search's reason below).")
    lines += [f"Search: {escape.md_cell(cap.method)}.", ""]
    for s in cap.searches:
        path = ", ".join(f"{shown(x)} {v}" for x, v in s.tried)
        bracket = (
            f"met {shown(s.met) if s.met is not None else '-'}, "
            f"not {shown(s.missed) if s.missed is not None else '-'}"
        )
        if s.crossing is not None:
            bracket += f"; estimate {shown(s.crossing)} ({escape.md_cell(s.crossing_term or '')})"
        elif s.crossing_note:
            bracket += f"; no estimate: {escape.md_cell(s.crossing_note)}"
        note = f" ({escape.md_cell(s.note)})" if s.note else ""
        lines.append(f"- search {s.repeat + 1}: {path}; {bracket}{note}")
    return lines


def render(run: WorkloadRun, speed: float) -> str:
    w = run.workload
    lines = [
        f"## Workload {escape.md_cell(w.name)}",
        "",
        _describe(run),
        "",
        "| Point | Trial | Status | Done/sent | Achieved req/s | Output tok/s | Total tok/s "
        "| TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | ITL p50 ms | E2EL p99 ms "
        "| Goodput req/s | SLO |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in run.points:
        lines.append(
            f"| {_point_name(p, speed)} | {p.trial + 1} | {p.status} | {p.completed}/{p.requests} "
            f"| {_rate(p.achieved_rate, speed)} | {p.output_tok_s / speed:,.1f} "
            f"| {p.total_tok_s / speed:,.1f} | {_ms(p.ttft, 'p50', speed)} "
            f"| {_ms(p.ttft, 'p99', speed)} | {_ms(p.tpot, 'p50', speed)} "
            f"| {_ms(p.tpot, 'p99', speed)} | {_ms(p.itl, 'p50', speed)} "
            f"| {_ms(p.e2el, 'p99', speed)} | {_rate(p.goodput_rate, speed)} | {_slo(p)} |"
        )
    if run.capacity is not None:
        lines += ["", *_capacity(run, speed)]
    said = [
        f"- {_point_name(p, speed)}, trial {p.trial + 1}: {escape.md_cell(text)}"
        for p in run.points
        for text in (*p.reasons, *p.notes)
    ]
    if said:
        lines += ["", *said]
    return "\n".join(lines)
