"""What the plots show, taken from results.json at server speed (see bench.results)."""

from __future__ import annotations

from dataclasses import dataclass

from bench.results import Results


@dataclass(frozen=True)
class CellPoint:
    context_label: str
    prompt_tokens: int
    concurrency: int
    status: str  # valid, not_ready, over_capacity, invalid, interrupted, not_run
    total_tok_s: float | None = None
    per_request_tok_s: float | None = None
    ttft_s: float | None = None
    tbt_s: float | None = None


@dataclass(frozen=True)
class PrefillPoint:
    context_label: str
    prompt_tokens: int
    prefill_tok_s: float
    ttft_s: float


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def decode_cells(results: Results) -> list[CellPoint]:
    """One point per planned decode cell; trials averaged like the tables do."""
    speed = results.speed_factor
    points = []
    for ctx in (c for c in results.plan.contexts if c.decode):
        for concurrency in results.settings.concurrencies:
            cells = [
                c
                for c in results.cells
                if (c.context_label, c.concurrency) == (ctx.label, concurrency)
            ]
            figs = [
                c.figures.at_server_speed(speed)
                for c in cells
                if c.figures is not None and c.status in ("valid", "not_ready")
            ]
            if figs:
                status = "not_ready" if any(c.status == "not_ready" for c in cells) else "valid"
                points.append(
                    CellPoint(
                        ctx.label,
                        ctx.prompt_tokens,
                        concurrency,
                        status,
                        total_tok_s=_mean([f.total_tok_s for f in figs]),
                        per_request_tok_s=_mean([f.per_request_tok_s for f in figs]),
                        ttft_s=_mean([f.ttft_s for f in figs]),
                        tbt_s=_mean([f.tbt_s for f in figs]),
                    )
                )
                continue
            planned = [
                p
                for p in results.plan.cells
                if (p.context_label, p.concurrency) == (ctx.label, concurrency)
            ]
            if cells:
                status = cells[-1].status
            elif planned and not planned[0].run:
                status = "over_capacity"
            else:
                status = "not_run"
            points.append(CellPoint(ctx.label, ctx.prompt_tokens, concurrency, status))
    return points


def prefill_points(results: Results) -> list[PrefillPoint]:
    speed = results.speed_factor
    points = []
    for ctx in results.plan.contexts:
        valid = [
            p.at_server_speed(speed)
            for p in results.prefill
            if p.context_label == ctx.label and p.status == "valid"
        ]
        rates = [p.prefill_tok_s for p in valid if p.prefill_tok_s is not None]
        ttfts = [p.ttft_s for p in valid if p.ttft_s is not None]
        if rates and ttfts:
            points.append(PrefillPoint(ctx.label, ctx.prompt_tokens, _mean(rates), _mean(ttfts)))
    return points
