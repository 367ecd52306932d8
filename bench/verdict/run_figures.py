"""A run's results.json (and environment.json) as `RunFigures`, at server speed.

A twin runs N times faster than real time and records N (`server.speed_factor`);
`results.json` holds client-clock figures, so rates are divided by N and durations
multiplied by N (`CellFigures.at_server_speed`) before any comparison. A cell whose
trials are valid save some with no figures (`invalid`: a request failed; `interrupted`: the
run stopped) is its valid trials: judged on them alone, it carries how many it ran and what
the others were (`Cell.trials_note`: "2 of 3 trials valid; 1 invalid: stream cut"). Else a
cell with a trial that is not valid is named by the worst (`interrupted`, `invalid`,
`not_ready`), never judged; then a cell with a trial flagged `gpu_throttled` is that, with
all its figures (judged only when the flag is accepted, `cells.accepting`); a single trial
carries the run's own spread of its figures (see `cells`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from bench.bundle import provenance
from bench.results import CellResult, PrefillSample, Results
from bench.verdict import settings as run_settings
from bench.verdict import workload_cells
from bench.verdict.cells import (
    Cell,
    Key,
    RunFigures,
    Status,
    context_order,
    mean_rse,
    median_rse,
)


def _cell_rse(cell: CellResult) -> dict[str, float]:
    ex = cell.extras
    out: dict[str, float] = {}
    if ex is None:
        return out
    if ex.tbt is not None:
        tbt = median_rse(ex.tbt.n, ex.tbt.p50, ex.tbt.p90)
        if tbt is not None:
            out["tbt_s"] = out["per_request_tok_s"] = tbt
        total = mean_rse(ex.tbt.n, ex.tbt.mean, ex.tbt.p50, ex.tbt.p90)
        if total is None and ex.chunk_gap is not None:
            gap = ex.chunk_gap
            total = mean_rse(gap.n, gap.mean, gap.p50, gap.p90)
        if total is not None:
            out["total_tok_s"] = total
    if ex.ttft is not None:
        ttft = median_rse(ex.ttft.n, ex.ttft.p50, ex.ttft.p90)
        if ttft is not None:
            out["ttft_s"] = ttft
    return out


# A cell with a trial in one of these is that, whatever its other trials say; the first
# found in this order names it.
_UNTRUSTED_ORDER: tuple[Status, ...] = ("interrupted", "invalid", "not_ready")


# Trials with no figures: among valid trials of a cell they are left out, and said.
LEFT_OUT: tuple[Status, ...] = ("invalid", "interrupted")


def _reasons(items: list[CellResult] | list[PrefillSample], status: str) -> str:
    found = sorted({r.reason or "no reason" for r in items if r.status == status})
    trials = sum(1 for r in items if r.status == status)
    return f"{trials} of {len(items)} trials {status.replace('_', ' ')}: {'; '.join(found)}"


def left_out_text(trials: Iterable[tuple[str, str | None]]) -> str | None:
    """What a cell's trials (status, reason) with no figures were: "1 invalid: stream cut";
    None when none. The history says it in the same words."""
    pairs = list(trials)
    parts = []
    for status in LEFT_OUT:
        found = sorted({reason or "no reason" for s, reason in pairs if s == status})
        if found:
            count = sum(1 for s, _ in pairs if s == status)
            parts.append(f"{count} {status}: {'; '.join(found)}")
    return "; ".join(parts) or None


def _left_out(items: list[CellResult] | list[PrefillSample]) -> str | None:
    return left_out_text((r.status, r.reason) for r in items)


def _judged_on_valid(cell: Cell, items: list[CellResult] | list[PrefillSample]) -> Cell:
    """CELL, made of ITEMS' valid trials, with all its trials counted and the rest said."""
    return replace(cell, trials_run=len(items), left_out=_left_out(items))


def _decode_cell(label: str, concurrency: int, results: list[CellResult], n: float) -> Cell:
    statuses = {r.status for r in results}
    if "over_capacity" in statuses:
        reason = next((r.reason for r in results if r.reason), None)
        return Cell("decode", label, concurrency, "over_capacity", reason)
    valid = [r for r in results if r.status == "valid"]
    if valid and all(r.status in ("valid", *LEFT_OUT) for r in results) and valid != results:
        cell = _decode_cell(label, concurrency, valid, n)
        if cell.status == "gpu_throttled":  # of all the trials it ran, not of the valid ones
            cell = replace(cell, detail=_throttled(valid, len(results)))
        return _judged_on_valid(cell, results)
    figures = [r.figures.at_server_speed(n) for r in results if r.figures is not None]
    bad = next((s for s in _UNTRUSTED_ORDER if s in statuses), None)
    if bad is not None:
        # Never "valid": a not_ready cell carries figures, shown but never judged equal.
        shown = {
            "total_tok_s": tuple(f.total_tok_s for f in figures),
            "per_request_tok_s": tuple(f.per_request_tok_s for f in figures),
            "ttft_s": tuple(f.ttft_s for f in figures),
            "tbt_s": tuple(f.tbt_s for f in figures),
        }
        cell = Cell("decode", label, concurrency, bad, _reasons(results, bad), shown)
        # Every trial without figures: a merged side may take its other runs' trials alone.
        return _judged_on_valid(cell, results) if statuses <= set(LEFT_OUT) else cell
    if not figures:
        reasons = "; ".join(sorted({f"{r.status}: {r.reason or 'no reason'}" for r in results}))
        return Cell("decode", label, concurrency, "failed", reasons)
    trials = {
        "total_tok_s": tuple(f.total_tok_s for f in figures),
        "per_request_tok_s": tuple(f.per_request_tok_s for f in figures),
        "ttft_s": tuple(f.ttft_s for f in figures),
        "tbt_s": tuple(f.tbt_s for f in figures),
    }
    flagged = sorted({r.status for r in results} - {"valid"})
    detail = f"trials also {', '.join(flagged)}" if flagged else None
    # The run's own spread is only needed for a single trial (see cells.py).
    rse = _cell_rse(results[0]) if len(figures) == 1 else {}
    runs = tuple(r.trial for r in results if r.figures is not None)
    if any("gpu_throttled" in r.flags for r in results):
        detail = _throttled(results, len(results))
        return Cell("decode", label, concurrency, "gpu_throttled", detail, trials, rse, runs)
    return Cell("decode", label, concurrency, "valid", detail, trials, rse, runs)


def _throttled(results: list[CellResult], ran: int) -> str:
    why = sorted({r.flags["gpu_throttled"] for r in results if "gpu_throttled" in r.flags})
    throttled = sum(1 for r in results if "gpu_throttled" in r.flags)
    return f"{throttled} of {ran} trials GPU throttled: {'; '.join(why)}"


def _prefill_cell(label: str, samples: list[PrefillSample], n: float) -> Cell:
    statuses = {s.status for s in samples}
    valid = [s for s in samples if s.status == "valid"]
    if valid and all(s.status in ("valid", *LEFT_OUT) for s in samples) and valid != samples:
        return _judged_on_valid(_prefill_cell(label, valid, n), samples)
    bad = next((s for s in _UNTRUSTED_ORDER if s in statuses), None)
    if bad is not None:
        cell = Cell("prefill", label, 1, bad, _reasons(samples, bad))
        return _judged_on_valid(cell, samples) if statuses <= set(LEFT_OUT) else cell
    good = [s.at_server_speed(n) for s in samples if s.status == "valid"]
    if not good:
        reasons = "; ".join(sorted({f"{s.status}: {s.reason or 'no reason'}" for s in samples}))
        return Cell("prefill", label, 1, "failed", reasons)
    trials = {
        "prefill_tok_s": tuple(s.prefill_tok_s for s in good if s.prefill_tok_s is not None),
        "prefill_ttft_s": tuple(s.ttft_s for s in good if s.ttft_s is not None),
    }
    return Cell("prefill", label, 1, "valid", None, trials, runs=tuple(s.trial for s in good))


def _metadata(results: Results, env: Any) -> dict[str, str]:
    s = results.settings
    out = {
        "server model": results.server.model,
        "server version": results.server.version or "—",
        "max_model_len": str(results.server.max_model_len),
        "speed factor": f"{results.server.speed_factor:g}",
        "KV capacity tokens": str(results.plan.kv.tokens),
        "window s (server time)": f"{s.duration_s:g}",
        "max tokens": str(s.max_tokens),
        "trials": str(s.trials),
        "bench version": results.bench_version,
        "run state": results.state,
    }
    for key, value in sorted(results.server.version_payload.items()):
        if key != "version":  # e.g. the twin's profile, speed and seed
            out[f"server /version {key}"] = json.dumps(value, sort_keys=True)
    if isinstance(env, dict):
        gpu = env.get("gpu") or {}
        gpus = [str(g.get("name", "?")) for g in gpu.get("gpus", [])]
        extra = {
            "image digest": (env.get("image") or {}).get("digest"),
            "vLLM version": env.get("vllm_version"),
            "launch flags": " ".join((env.get("launch") or {}).get("argv", [])) or None,
            "GPUs": f"{len(gpus)} x {', '.join(sorted(set(gpus)))}" if gpus else "none",
            "driver": gpu.get("driver_version"),
            "CUDA": gpu.get("cuda_version"),
            "host": (env.get("host") or {}).get("hostname"),
        }
        out.update({k: str(v) for k, v in extra.items() if v is not None})
        # What the image was built from (bench.vllm.commit, bench.version, ...): the
        # orchestrator records the image's labels, and two builds differ by them.
        labels = (env.get("image") or {}).get("labels") or {}
        out.update(
            {f"image label {k}": str(v) for k, v in labels.items() if k.startswith("bench.")}
        )
    return out


def sweep_server_s(results: Results) -> float | None:
    """Server seconds of the run's sweep: from its clock anchor to the end of its last
    measured window (decode cells carry their start and window end), times the speed
    factor; None when no cell recorded when it ran."""
    ends = [
        r.started_at_s + r.extras.window_end_s
        for r in results.cells
        if r.started_at_s is not None and r.extras is not None and r.extras.window_end_s is not None
    ]
    return max(ends) * results.server.speed_factor if ends else None


# A start recorded as longer than a day is no start this code should plan with.
_START_MAX_S = 86_400.0


def server_start_s(env: Any) -> float | None:
    """Launch to healthy in seconds, as the orchestrator (or tools/noise_corpus.py) records
    it in environment.json; None when absent or not a plausible number."""
    start = env.get("server_start") if isinstance(env, dict) else None
    value = start.get("ready_after_s") if isinstance(start, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0.0 <= value <= _START_MAX_S else None


def from_results(results: Results, env: Any = None, *, name: str = "run") -> RunFigures:
    n = results.server.speed_factor
    by_cell: dict[tuple[str, int], list[CellResult]] = {}
    for r in results.cells:
        by_cell.setdefault((r.context_label, r.concurrency), []).append(r)
    cells: dict[Key, Cell] = {}
    for (label, conc), rs in by_cell.items():
        cells[("decode", label, conc)] = _decode_cell(label, conc, rs, n)
    for planned in results.plan.cells:
        key: Key = ("decode", planned.context_label, planned.concurrency)
        if not planned.run and key not in cells:
            status: Status = "over_capacity"
            cells[key] = Cell(
                "decode", planned.context_label, planned.concurrency, status, planned.reason
            )
    by_context: dict[str, list[PrefillSample]] = {}
    for p in results.prefill:
        by_context.setdefault(p.context_label, []).append(p)
    for label, samples in by_context.items():
        cells[("prefill", label, 1)] = _prefill_cell(label, samples, n)
    if results.workload is not None:
        cells.update(workload_cells.cells(results.workload, n))
    twin = run_settings.is_twin(results)
    return RunFigures(
        settings=run_settings.from_run(results, env),
        twin=twin,
        weights=provenance.weights_line(env, twin=twin),
        model_revision=provenance.model_revision(env),
        image_id=provenance.image_id(env),
        packages=provenance.server_packages(env, twin=twin),
        name=name,
        kind="run",
        speed_factor=n,
        identities=frozenset({f"run id {results.run_id}"}),
        fingerprints=(results.fingerprint,),
        metadata=_metadata(results, env),
        cells=cells,
        contexts=context_order(k[1] for k in cells),
        concurrencies=tuple(sorted({k[2] for k in cells if k[0] == "decode"})),
        server_s=() if (spent := sweep_server_s(results)) is None else (spent,),
        start_s=() if (start := server_start_s(env)) is None else (start,),
        **workload_cells.capacity_of(results),
        planned=frozenset(
            [("decode", c.context_label, c.concurrency) for c in results.plan.cells]
            + [("prefill", c.label, 1) for c in results.plan.contexts]
            + [k for k in cells if k[0] == "workload"]
        ),
    )
