"""results.json content made from a card's figures, for verdict unit tests.

Figures are written on the client clock of a twin running `speed` times faster, as
`bench run` records them; `scale(ctx, conc)` multiplies a cell's throughput (and divides
its latencies), `noise` is the relative spread of each trial (seeded).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable

from bench.card.figures import context_tokens
from bench.card.model import Card
from bench.results import (
    CellExtras,
    CellFigures,
    CellResult,
    Distribution,
    KvCapacity,
    Plan,
    PlannedCell,
    PlannedContext,
    PrefillSample,
    Results,
    RunSettings,
    ServerInfo,
)
from bench.run import outcome

Scale = Callable[[str, int], float]


def _dist(n: int, center: float, rel_spread: float) -> Distribution:
    return Distribution(
        n=n,
        mean=center,
        p50=center,
        p90=center * (1 + 1.2816 * rel_spread),
        p99=center * (1 + 2.3 * rel_spread),
        min=center * (1 - 2 * rel_spread),
        max=center * (1 + 3 * rel_spread),
    )


def make_results(
    card: Card,
    *,
    speed: float = 1.0,
    trials: int = 1,
    noise: float = 0.0,
    seed: int = 0,
    scale: Scale | None = None,
    over_capacity: set[tuple[str, int]] | None = None,
    contexts: set[str] | None = None,
    version: str = "0.30.1rc1.dev452+g73a583112",
) -> Results:
    rng = random.Random(seed)
    scale = scale or (lambda ctx, conc: 1.0)
    oc = over_capacity
    cells: list[CellResult] = []
    planned: list[PlannedCell] = []
    clock = 5.0 / speed  # client seconds since the run's anchor: each cell starts, gates 10
    # server seconds, measures the 30 s window, then 1 s passes before the next
    for row in card.measurements:
        m = row
        if m.phase != "decode" or (contexts is not None and m.context not in contexts):
            continue
        tokens = context_tokens(m.context)
        is_oc = m.over_capacity if oc is None else (m.context, m.concurrency) in oc
        planned.append(
            PlannedCell(
                context_label=m.context,
                prompt_tokens=tokens,
                concurrency=m.concurrency,
                kv_needed_tokens=m.concurrency * (tokens + 4096),
                run=not is_oc,
                reason="needs more KV tokens than the server has" if is_oc else None,
            )
        )
        context, concurrency = m.context, m.concurrency
        for trial in range(trials):
            m = row
            if is_oc:
                cells.append(
                    CellResult(
                        context_label=m.context,
                        prompt_tokens=tokens,
                        concurrency=m.concurrency,
                        trial=trial,
                        status="over_capacity",
                        reason="over capacity",
                    )
                )
                continue
            if m.total_tokens_per_s is None:  # over capacity on the card: borrow a neighbour
                m = max(
                    (
                        r
                        for r in card.measurements
                        if r.phase == "decode" and r.context == m.context and r.tbt_s is not None
                    ),
                    key=lambda r: r.concurrency,
                )
            assert m.total_tokens_per_s is not None and m.ttft_s is not None
            assert m.tbt_s is not None
            k = scale(context, concurrency) * (1 + rng.gauss(0, noise))
            tbt = m.tbt_s / k
            figures = CellFigures(
                total_tok_s=m.total_tokens_per_s * k * speed,
                per_request_tok_s=1.0 / tbt * speed,
                ttft_s=m.ttft_s / k / speed,
                tbt_s=tbt / speed,
                average_active=float(m.concurrency),
                active_source="server_metrics",
                completed_requests=0,
                output_tokens=round(m.total_tokens_per_s * k * 30.0),
                measured_for_s=30.0 / speed,
            )
            extras = CellExtras(
                ttft=_dist(m.concurrency, m.ttft_s / k / speed, 0.05),
                tbt=_dist(m.concurrency, tbt / speed, 0.03),
                chunk_gap=_dist(2000, tbt * 1.9 / speed, 0.4),
                window_start_s=10.0 / speed,
                window_end_s=40.0 / speed,
            )
            started, clock = clock, clock + 41.0 / speed
            cells.append(
                CellResult(
                    context_label=context,
                    prompt_tokens=tokens,
                    concurrency=concurrency,
                    trial=trial,
                    status="valid",
                    figures=figures,
                    extras=extras,
                    started_at_s=started,
                )
            )
    prefill = [
        PrefillSample(
            context_label=p.context,
            prompt_tokens=context_tokens(p.context),
            trial=t,
            status="valid",
            ttft_s=p.ttft_s / speed,
            prefill_tok_s=p.tokens_per_s * speed,
        )
        for p in card.prefill
        for t in range(trials)
        if contexts is None or p.context in contexts
    ]
    labels = sorted(
        {c.context_label for c in planned} | {p.context_label for p in prefill}, key=context_tokens
    )
    return Results(
        bench_version="0.1.0",
        run_id=f"run-test-{uuid.uuid4().hex[:12]}",  # two calls are two runs (refuse_repeats)
        created_at="2026-12-02T12:00:00Z",
        state="complete",
        settings=RunSettings(
            url="http://127.0.0.1:8000",
            contexts=tuple(context_tokens(x) for x in labels),
            concurrencies=tuple(sorted({c.concurrency for c in planned})),
            duration_s=30.0,
            max_tokens=4096,
            trials=trials,
        ),
        server=ServerInfo(
            url="http://127.0.0.1:8000",
            model="qwen",
            max_model_len=262144,
            version=version,
            speed_factor=speed,
            speed_source="version",
        ),
        plan=Plan(
            contexts=tuple(
                PlannedContext(
                    label=x,
                    nominal_tokens=context_tokens(x),
                    prompt_tokens=context_tokens(x),
                    trimmed=False,
                    decode=True,
                    max_tokens=4096,
                )
                for x in labels
            ),
            cells=tuple(planned),
            kv=KvCapacity(tokens=1_000_000, source="kv_cache_size_tokens", detail="test"),
            trials=trials,
            estimated_duration_s=100.0,
        ),
        prefill=tuple(prefill),
        cells=tuple(cells),
    )


def with_failed_trial(
    results: Results,
    context: str,
    concurrency: int,
    trial: int,
    *,
    status: str = "invalid",
    reason: str = "stream cut",
) -> Results:
    """RESULTS with that trial of a decode cell failed as `bench run` records one (no
    figures, its reason), and the aggregates recomputed as the sweep does at its end."""
    cells = tuple(
        c.model_copy(update={"status": status, "reason": reason, "figures": None, "extras": None})
        if (c.context_label, c.concurrency, c.trial) == (context, concurrency, trial)
        else c
        for c in results.cells
    )
    changed = results.model_copy(update={"cells": cells})
    return changed.model_copy(update={"aggregates": outcome.aggregate(changed)})


def with_failed_scout(
    results: Results, context: str, trial: int, *, reason: str = "HTTP 500"
) -> Results:
    """RESULTS with that trial's prefill scout of CONTEXT invalid (no figures, its reason)."""
    prefill = tuple(
        p.model_copy(
            update={"status": "invalid", "reason": reason, "ttft_s": None, "prefill_tok_s": None}
        )
        if (p.context_label, p.trial) == (context, trial)
        else p
        for p in results.prefill
    )
    return results.model_copy(update={"prefill": prefill})
