"""What a measured scout or cell becomes: its results.json entry, its raw lines.

A scout gives a PrefillSample (prefill tok/s from its TTFT); a cell gives a CellResult:
`invalid` when a wait passed its bound (bench.run.cell: the reason says what it waited
for), a request failed (the first failure is its reason, every failure is
counted by kind in `failures_by_kind`) or its figures cannot be made, `not_ready` when
measured on a server that never held the gate or did not drain, else `valid`. The
trial aggregates; the lines of samples.jsonl and metrics.jsonl.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from bench import bounds
from bench.failures import ErrorKind, count_by_kind
from bench.results import CellAggregate, CellResult, PrefillSample, Results, TokenSource
from bench.run import figures
from bench.run.cell import CellRun, launch_prefix_hit_rate
from bench.stats import estimate
from bench.stream.records import RequestRecord


def cell_result(
    run: CellRun,
    label: str,
    prompt_tokens: int,
    trial: int,
    *,
    started_at_s: float,
    max_tokens: int | None = None,
) -> CellResult:
    """The cell's entry: `invalid` with the first failure (and every failure counted by
    kind), `not_ready` with its figures and the reason, or `valid`."""
    base: dict[str, Any] = {
        "context_label": label,
        "prompt_tokens": prompt_tokens,
        "concurrency": run.concurrency,
        "trial": trial,
        "started_at_s": started_at_s,
        "failures_by_kind": count_by_kind([r.failure for r in run.records]),
    }
    unmeasured = _not_measured(run)
    if unmeasured is not None or run.w0_s is None or run.w1_s is None:
        return CellResult(**base, status="invalid", reason=unmeasured or "no window")
    figs, extras, why = figures.cell_figures(
        run.records,
        run.w0_s,
        run.w1_s,
        run.samples,
        run.client_active,
        first=run.first,
        last=run.last,
        ready_after_s=run.ready_after_s,
    )
    extras = extras.model_copy(
        update={
            "window_start_s": run.w0_s - run.t0_s,
            "window_end_s": run.w1_s - run.t0_s,
            "launch_prefix_cache_hit_rate": launch_prefix_hit_rate(run),
        }
    )
    over = max((r.tokens for r in run.records), default=0)
    if max_tokens is not None and over > max_tokens:
        # The server's usage counts are not to be believed: neither are the figures, nor a
        # reason read from them (a stall is "no token in the last x s"), so this one comes
        # first, whatever else the window shows.
        over_why = (
            f"the server claimed {over} output tokens for one request, "
            f"more than its max_tokens {max_tokens}"
        )
        return CellResult(**base, status="invalid", reason=over_why, extras=extras)
    if figs is None:
        return CellResult(**base, status="invalid", reason=why, extras=extras)
    implausible = first_implausible(figs) or first_implausible(extras)
    if implausible is not None:  # a /metrics value of 1.5e308, say (issue 29, S7)
        return CellResult(**base, status="invalid", reason=implausible)
    # A cell whose gate never held, or that started on an undrained server, is
    # measured and flagged: its numbers are shown with the reason beside them.
    flag = "; ".join(x for x in (run.drain_note, run.not_ready) if x)
    if flag:
        return CellResult(**base, status="not_ready", reason=flag, figures=figs, extras=extras)
    return CellResult(**base, status="valid", figures=figs, extras=extras)


def _not_measured(run: CellRun) -> str | None:
    """Why the cell has nothing to measure: a wait past its bound ended it (bench.run.cell),
    a request failed (the first failure, with how many did), or it never had a window."""
    if run.stopped is not None:
        return run.stopped
    error = run.error
    if error is not None:
        failed = sum(r.error is not None for r in run.records)
        return f"{failed} request(s) failed, first: {error}"
    if run.w0_s is None or run.w1_s is None:
        return "no window"
    return None


def scout_sample(
    record: RequestRecord,
    label: str,
    trial: int,
    sized_tokens: int,
    drain_note: str | None = None,
) -> PrefillSample:
    """prefill tok/s = prompt tokens / TTFT of the cold max_tokens=1 request.

    The token's text may be swallowed by a reasoning parser (a <think> token): for the
    scout the first usage chunk with a token counts as the first token too. A scout sent
    while the server was still busy (`drain_note`: the barrier before it timed out)
    shared its prefill with other requests: no number from it.
    """
    if drain_note is not None:
        return PrefillSample(
            context_label=label,
            prompt_tokens=record.prompt_tokens or sized_tokens,
            trial=trial,
            status="invalid",
            reason=drain_note,
        )
    first = record.first_token_s
    if first is None and record.chunk_s:
        first = record.chunk_s[0]
    # A usage-only stream is what a swallowed first token looks like: not a failure here.
    failed = record.failure is not None and record.failure.kind is not ErrorKind.USAGE_ONLY
    if failed or first is None:
        return PrefillSample(
            context_label=label,
            prompt_tokens=record.prompt_tokens or sized_tokens,
            trial=trial,
            status="invalid",
            reason=record.error or "no token received",
        )
    ttft = first - record.ttft_from_s
    tokens = record.prompt_tokens or sized_tokens
    sample = PrefillSample(
        context_label=label,
        prompt_tokens=tokens,
        trial=trial,
        status="valid",
        ttft_s=ttft,
        prefill_tok_s=tokens / ttft if ttft > 0 else None,
    )
    implausible = first_implausible(sample)
    if implausible is not None:
        return sample.model_copy(
            update={"status": "invalid", "reason": implausible, "ttft_s": None,
                    "prefill_tok_s": None}
        )  # fmt: skip
    return sample


def first_implausible(model: BaseModel) -> str | None:
    """The first float of `model` (nested models too) that bench.bounds says no run can
    make, as a reason; None when all are plausible. A cell with one is invalid: results.json
    never holds a Valid cell whose figure is inf (it was written as null, and no command
    could read the file back)."""

    def walk(value: object, where: str) -> str | None:
        if isinstance(value, float):
            return bounds.figure_problem(value, where)
        if isinstance(value, BaseModel):
            value = dict(value)
        if isinstance(value, dict):
            for key, inner in value.items():
                if (why := walk(inner, key)) is not None:
                    return why
        return None

    return walk(model, "")


def aggregate(results: Results) -> tuple[CellAggregate, ...]:
    groups: dict[tuple[str, int], list[CellResult]] = {}
    for c in results.cells:
        if c.status == "valid" and c.figures is not None:
            groups.setdefault((c.context_label, c.concurrency), []).append(c)
    out = []
    for (label, conc), cells in groups.items():
        figs = [c.figures for c in cells if c.figures is not None]
        out.append(
            CellAggregate(
                context_label=label,
                concurrency=conc,
                trials=len(figs),
                total_tok_s=estimate([f.total_tok_s for f in figs]),
                per_request_tok_s=estimate([f.per_request_tok_s for f in figs]),
                ttft_s=estimate([f.ttft_s for f in figs]),
                tbt_s=estimate([f.tbt_s for f in figs]),
            )
        )
    return tuple(out)


def sample_line(
    phase: str,
    label: str,
    c: int,
    trial: int,
    record: RequestRecord,
    *,
    origin_s: float,
    anchor_s: float,
    anchor_unix_s: float,
) -> dict[str, object]:
    """One request's line of samples.jsonl: its times from `origin_s` (a cell's start, or
    the run's clock anchor for a scout), and that origin as Unix time."""
    return {
        "phase": phase,
        "context": label,
        "concurrency": c,
        "trial": trial,
        # Unix time of this row's time origin, to line raw times up with other logs.
        "origin_unix_s": round(anchor_unix_s + (origin_s - anchor_s), 6),
        **record.to_json(origin_s),
    }


def metrics_lines(run: CellRun, label: str, trial: int, anchor_s: float) -> list[dict[str, object]]:
    """The cell's /metrics scrapes as lines of metrics.jsonl (times from the run's anchor)."""
    snaps = [x for x in (run.first, *run.samples, run.last) if x is not None]
    return [
        {
            "phase": "decode",
            "context": label,
            "concurrency": run.concurrency,
            "trial": trial,
            "t_s": round(x.t_s - anchor_s, 6),
            "values": x.values,
        }
        for x in snaps
    ]


def with_token_source(result: CellResult, source: TokenSource) -> CellResult:
    """The cell's entry with how its output tokens were counted (in its extras, when it
    has figures)."""
    if result.extras is None:
        return result
    return result.model_copy(
        update={"extras": result.extras.model_copy(update={"token_source": source})}
    )
