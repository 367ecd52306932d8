"""The plan of a run, decided and printed before anything is sent.

Every prefill context and decode cell, the KV capacity and where it came from, each
over-capacity cell with its reason, and an estimated duration.
"""

from __future__ import annotations

import math

from bench.errors import UsageError
from bench.results import KvCapacity, Plan, PlannedCell, PlannedContext, RunSettings, ServerInfo
from bench.run.capacity import kv_needed, over_capacity_reason
from bench.run.prompts import context_label, fit
from bench.workload_points import WorkloadRun

# The published card's matrix: `bench run`'s defaults (K = 1024 tokens).
PUBLISHED_CONTEXTS = ("8K", "16K", "32K", "64K", "128K", "256K")
PUBLISHED_PREFILL_ONLY = ("256K",)
PUBLISHED_CONCURRENCIES = ("1", "2", "4", "8", "16", "32", "64", "128")

# Rough figures for the estimate only (server time): prefill speed, per-stream warm-up.
_PREFILL_TOK_S = 5000.0
_RAMP_S_PER_STREAM = 0.2
_DRAIN_S = 2.0


def make_plan(
    settings: RunSettings, server: ServerInfo, kv: KvCapacity, *, prompt_sizing: str
) -> Plan:
    contexts: list[PlannedContext] = []
    seen: set[str] = set()
    rows = [(n, True) for n in settings.contexts]
    rows += [(n, False) for n in settings.prefill_only_contexts]
    for nominal, decode in rows:
        max_tokens = settings.max_tokens if decode else 1
        prompt = fit(nominal, server.max_model_len, max_tokens)
        if prompt <= 0:
            raise UsageError(
                f"context {nominal} leaves no room: max_model_len is {server.max_model_len}",
                hint="lower --max-tokens",
            )
        label = context_label(nominal, prompt)
        if (
            decode
            and settings.cells
            and not any(_names(w, label, nominal) for w, _ in settings.cells)
        ):
            continue  # --cells names none of this row's cells
        if (label, decode) in {(c.label, c.decode) for c in contexts} or (
            not decode and label in seen and _same_size(contexts, label, prompt)
        ):
            continue  # trimmed onto a context already planned
        seen.add(label)
        contexts.append(
            PlannedContext(
                label=label,
                nominal_tokens=nominal,
                prompt_tokens=prompt,
                trimmed=prompt < nominal,
                decode=decode,
                max_tokens=max_tokens,
                scout_reason=over_capacity_reason(kv_needed(1, prompt, 1), kv),
            )
        )
    cells: list[PlannedCell] = []
    for ctx in contexts:
        if not ctx.decode:
            continue
        for c in settings.concurrencies:
            if settings.cells and not any(
                _names(w, ctx.label, ctx.nominal_tokens) and c == x for w, x in settings.cells
            ):
                continue
            needed = kv_needed(c, ctx.prompt_tokens, ctx.max_tokens)
            reason = over_capacity_reason(needed, kv)
            cells.append(
                PlannedCell(
                    context_label=ctx.label,
                    prompt_tokens=ctx.prompt_tokens,
                    concurrency=c,
                    kv_needed_tokens=needed,
                    run=reason is None,
                    reason=reason,
                )
            )
    unplanned = [
        f"{w}:{c}"
        for w, c in settings.cells
        if not any(_names(w, p.context_label, _nominal(contexts, p.context_label)) and
                   p.concurrency == c for p in cells)
    ]  # fmt: skip
    if unplanned:
        raise UsageError(
            f"--cells {' '.join(unplanned)} names no cell of this sweep",
            hint="give cells of --contexts x --concurrencies, by label (251K) or size (256K)",
        )
    estimate = _estimate_s(settings, contexts, cells) / server.speed_factor
    return Plan(
        contexts=tuple(contexts),
        cells=tuple(cells),
        kv=kv,
        trials=settings.trials,
        estimated_duration_s=estimate,
        prompt_sizing="tokenize" if prompt_sizing == "tokenize" else "usage_calibrated",
    )


def _names(word: str, label: str, nominal: int) -> bool:
    """Does a context as given to --cells (its label, or its nominal size) name this row?"""
    return word.upper() == label.upper() or _tokens(word) == nominal


def _tokens(word: str) -> int | None:
    text = word.strip().upper()
    scale = {"K": 1024, "M": 1024 * 1024}.get(text[-1:], 1)
    digits = text[:-1] if scale != 1 else text
    return int(digits) * scale if digits.isdigit() else None


def _nominal(contexts: list[PlannedContext], label: str) -> int:
    return next(c.nominal_tokens for c in contexts if c.decode and c.label == label)


def _same_size(contexts: list[PlannedContext], label: str, prompt: int) -> bool:
    return any(c.label == label and c.prompt_tokens == prompt for c in contexts)


def _estimate_s(
    settings: RunSettings, contexts: list[PlannedContext], cells: list[PlannedCell]
) -> float:
    per_trial = sum(c.prompt_tokens / _PREFILL_TOK_S for c in contexts if c.scout_reason is None)
    for cell in cells:
        if cell.run:
            per_trial += (
                _DRAIN_S
                + cell.concurrency * _RAMP_S_PER_STREAM
                + settings.readiness_hold_s
                + settings.duration_s
            )
    return per_trial * settings.trials


def _duration(seconds: float) -> str:
    m, s = divmod(round(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else f"{m}m{s:02d}s"


def _engine_lines(server: ServerInfo) -> list[str]:
    """Which engine, and where its facts come from (server.facts_source, docs/engines.md)."""
    if server.engine is None:
        return []
    facts = dict(server.facts_source)
    how = facts.pop("engine", "")
    facts.pop("kv_capacity", None)  # the KV capacity line says it
    shown = "; ".join(f"{k} {v}" for k, v in facts.items())
    return [f"Engine: {server.engine} ({how})"] + ([f"Facts from: {shown}"] if shown else [])


def _workload_lines(run: WorkloadRun, settings: RunSettings) -> list[str]:
    w, a = run.workload, run.workload.arrivals
    if a.kind == "rate":
        rates = ", ".join("inf" if math.isinf(r) else f"{r:g}" for r in a.rates)
        points = f"open loop ({a.process}) at {rates} requests/s, {a.requests} requests a point"
    elif a.kind == "trace":
        points = f"a trace's arrivals ({a.path}, timestamps / {a.speedup:g})"
    else:
        cs = ", ".join(str(c) for c in a.concurrencies)
        points = f"closed loop at C = {cs}, {a.requests_per_stream} x C prompts a point"
    return [
        f"Workload: {w.name} from {run.source} (sha256 {run.sha256[:12]}): {points}, "
        f"{settings.trials} trial(s); request time-out {settings.request_timeout_s:g} s",
    ]


def render(
    plan: Plan, server: ServerInfo, settings: RunSettings, workload: WorkloadRun | None = None
) -> str:
    head = [
        f"Plan: {server.model} at {server.url} (max_model_len {server.max_model_len:,}, "
        f"{settings.api} API, speed factor {server.speed_factor:g} from {server.speed_source})",
        *_engine_lines(server),
    ]
    if workload is not None:  # its points, not the matrix
        return "\n".join([*head, *_workload_lines(workload, settings)])
    out = [
        f"Plan: {server.model} at {server.url} (max_model_len {server.max_model_len:,}, "
        f"{settings.api} API, speed factor {server.speed_factor:g} from {server.speed_source})",
        *_engine_lines(server),
        "KV capacity: "
        + (f"{plan.kv.tokens:,} tokens" if plan.kv.tokens is not None else "unknown")
        + f" ({plan.kv.source}: {plan.kv.detail})",
        f"Prompt sizes: {plan.prompt_sizing}; window {settings.duration_s:g} s, "
        f"max {settings.max_tokens:,} tokens, {settings.trials} trial(s)",
        "Prefill (cold scout, max_tokens=1): "
        + ", ".join(
            f"{c.label} ({c.prompt_tokens:,} tokens{', trimmed' if c.trimmed else ''})"
            for c in plan.contexts
        ),
    ]
    out += [
        f"  prefill {c.label}: over capacity ({c.scout_reason})"
        for c in plan.contexts
        if c.scout_reason is not None
    ]
    for ctx in plan.contexts:
        if not ctx.decode:
            continue
        row = [c for c in plan.cells if c.context_label == ctx.label]
        run = " ".join(str(c.concurrency) for c in row if c.run) or "none"
        out.append(f"Decode {ctx.label}: C = {run}")
        out += [
            f"  {ctx.label} x {c.concurrency}: over capacity ({c.reason})" for c in row if not c.run
        ]
    n_run = sum(c.run for c in plan.cells)
    n_over = len(plan.cells) - n_run
    out.append(
        f"{n_run} decode cells to run, {n_over} over capacity; "
        f"estimated duration {_duration(plan.estimated_duration_s)}"
    )
    return "\n".join(out)
