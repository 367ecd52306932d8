"""The card's three tables, in its order, wording and number format.

Rendered at server speed (see bench.results on the speed convention). With several
trials, each cell shows the mean of its valid trials; one with trials that were not valid
says how many of its trials are valid ("2 of 3 trials valid") wherever it is shown, and the
status column what the others were.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench import escape
from bench.results import CellFigures, CellResult, PrefillSample, Results
from bench.run import decode_notes
from bench.workload import tables as workload_tables

DASH = "—"
OVER = "Over capacity"
OVER_NOTE = (
    "Over capacity: not run because this many requests at this context would exceed "
    "the server's KV cache."
)
TTFT_NOTE = (
    "TTFT is measured after the benchmark warms the server's prompt cache, so it mostly "
    "excludes prefill."
)
ALL_NOTE = "Latencies are medians. Total tok/s is output across all simultaneous requests."
TRIALS_NOTE = (
    'A cell whose trials were not all valid says how many were ("2 of 3 trials valid"): its '
    "figures are theirs alone; All measurements says what the others were."
)
ALL_COLUMNS = (
    "Phase",
    "Context",
    "Requests at once",
    "Status",
    "Total tok/s",
    "Per request tok/s",
    "TTFT",
    "Time between tokens",
    "Average active requests",
    "Completed requests",
    "Output tokens",
    "Measured for",
)


def rate(x: float) -> str:
    return f"{x:,.1f}"


def ms(seconds: float) -> str:
    return f"{round(seconds * 1000):,} ms"


def ms1(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


def secs(seconds: float) -> str:
    return f"{seconds:,.1f} s"


def _row(cells: Sequence[str]) -> str:
    # A reason quotes the server (an error body): it must never end the row (issue 29, H10).
    return "| " + " | ".join(escape.md_cell(c) for c in cells) + " |"


def _mean_figures(cells: Sequence[CellResult], speed: float) -> CellFigures | None:
    figs = [c.figures.at_server_speed(speed) for c in cells if c.figures is not None]
    if not figs:
        return None
    if len(figs) == 1:
        return figs[0]
    n = len(figs)
    return figs[0].model_copy(
        update={
            "total_tok_s": sum(f.total_tok_s for f in figs) / n,
            "per_request_tok_s": sum(f.per_request_tok_s for f in figs) / n,
            "ttft_s": sum(f.ttft_s for f in figs) / n,
            "tbt_s": sum(f.tbt_s for f in figs) / n,
            "average_active": sum(f.average_active for f in figs) / n,
            "completed_requests": round(sum(f.completed_requests for f in figs) / n),
            "output_tokens": round(sum(f.output_tokens for f in figs) / n),
            "measured_for_s": sum(f.measured_for_s for f in figs) / n,
        }
    )


def _prefill(results: Results) -> list[tuple[str, PrefillSample | None, str]]:
    """(label, sample at server speed averaged over trials, status) per context."""
    out: list[tuple[str, PrefillSample | None, str]] = []
    for ctx in results.plan.contexts:
        samples = [p for p in results.prefill if p.context_label == ctx.label]
        valid = [p.at_server_speed(results.speed_factor) for p in samples if p.status == "valid"]
        if valid and all(p.ttft_s is not None for p in valid):
            n = len(valid)
            mean = valid[0].model_copy(
                update={
                    "ttft_s": sum(p.ttft_s or 0.0 for p in valid) / n,
                    "prefill_tok_s": sum(p.prefill_tok_s or 0.0 for p in valid) / n,
                }
            )
            out.append((ctx.label, mean, "Valid" + _trials_status(samples)))
        elif samples:
            bad = samples[-1]
            out.append((ctx.label, None, _status_text(bad.status, bad.reason)))
        elif ctx.scout_reason is not None:
            out.append((ctx.label, None, OVER))
    return out


def trials_valid(items: Sequence[CellResult] | Sequence[PrefillSample]) -> str | None:
    """For a cell of several trials that were not all valid, how many were: "2 of 3 trials
    valid"; None else (one trial's status says it)."""
    valid = sum(1 for x in items if x.status == "valid")
    if len(items) < 2 or valid == len(items):
        return None
    return f"{valid} of {len(items)} trials valid"


def _trials_status(items: Sequence[CellResult] | Sequence[PrefillSample]) -> str:
    """What the status column adds for such a cell: "; 2 of 3 trials valid (1 invalid: why)"."""
    count = trials_valid(items)
    if count is None:
        return ""
    others = []
    for status in ("not_ready", "invalid", "interrupted"):
        found = sorted({x.reason or "no reason" for x in items if x.status == status})
        if found:
            n = sum(1 for x in items if x.status == status)
            others.append(f"{n} {status.replace('_', ' ')}: {'; '.join(found)}")
    return f"; {count} ({'; '.join(others)})"


def _status_text(status: str, reason: str | None) -> str:
    words = {
        "valid": "Valid",
        "invalid": "Invalid",
        "over_capacity": OVER,
        "not_ready": "Not ready",
        "interrupted": "Interrupted",
    }[status]
    return f"{words}: {reason}" if reason and status not in ("over_capacity", "valid") else words


def _cell_groups(results: Results) -> dict[tuple[str, int], list[CellResult]]:
    groups: dict[tuple[str, int], list[CellResult]] = {}
    for c in results.cells:
        groups.setdefault((c.context_label, c.concurrency), []).append(c)
    return groups


def render(results: Results) -> str:
    if results.workload is not None:  # a workload run: its points, not the card's matrix
        return workload_tables.render(results.workload, results.speed_factor)
    speed = results.speed_factor
    groups = _cell_groups(results)
    decode = [c for c in results.plan.contexts if c.decode]
    concurrencies = list(results.settings.concurrencies)
    lines = ["## Prefill", "", "prompt tok/s by context length", ""]
    lines += [_row(["Context", "prompt tok/s", "TTFT"]), "|" + "---|" * 3]
    for label, sample, status in _prefill(results):
        if sample is not None and sample.prefill_tok_s is not None and sample.ttft_s is not None:
            samples = [p for p in results.prefill if p.context_label == label]
            count = trials_valid(samples)
            lines.append(
                _row(
                    [
                        f"{label} context",
                        f"{sample.prefill_tok_s:,.0f}",
                        f"{ms(sample.ttft_s)} TTFT" + (f"<br>{count}" if count else ""),
                    ]
                )
            )
        else:
            lines.append(_row([f"{label} context", status, DASH]))

    lines += ["", "## Sustained decode", ""]
    lines += ["total tok/s · rows are context length, columns are simultaneous requests", ""]
    lines += [_row(["Context", *map(str, concurrencies)]), "|" + "---|" * (1 + len(concurrencies))]
    for ctx in decode:
        row = [ctx.label]
        for c in concurrencies:
            cells = groups.get((ctx.label, c), [])
            row.append(_matrix_cell(cells, speed, results, ctx.label, c))
        lines.append(_row(row))
    lines += ["", OVER_NOTE, "", TTFT_NOTE, ""]

    lines += ["## All measurements", "", ALL_NOTE, ""]
    lines += [_row(ALL_COLUMNS), "|" + "---|" * len(ALL_COLUMNS)]
    for label, sample, status in _prefill(results):
        if sample is not None and sample.prefill_tok_s is not None and sample.ttft_s is not None:
            values = [rate(sample.prefill_tok_s), DASH, ms(sample.ttft_s)] + [DASH] * 2 + ["1"]
            lines.append(_row(["Prefill", label, "1", status, *values, DASH, DASH]))
        else:
            lines.append(_row(["Prefill", label, "1", status, *[DASH] * 8]))
    for ctx in decode:
        for c in concurrencies:
            cells = groups.get((ctx.label, c), [])
            lines.append(_row(["Sustained decode", ctx.label, str(c), *_all_cells(cells, speed)]))
    lines += ["", OVER_NOTE, ""]
    lines += [x for note in decode_notes.notes(results) for x in (note, "")]
    if results.settings.trials > 1 and results.aggregates:
        lines += _trials(results)
    return "\n".join(lines)


def _matrix_cell(
    cells: list[CellResult], speed: float, results: Results, label: str, c: int
) -> str:
    if not cells:
        planned = [p for p in results.plan.cells if (p.context_label, p.concurrency) == (label, c)]
        return OVER if planned and not planned[0].run else DASH
    if cells[0].status == "over_capacity":
        return OVER
    fig = _mean_figures([x for x in cells if x.status in ("valid", "not_ready")], speed)
    if fig is None:
        return _status_text(cells[-1].status, None)
    # A cell whose readiness gate never held has numbers, but not the card's kind: marked
    # in the matrix too, so nobody reads them as a clean measurement.
    marks = "<br>Not ready" if any(x.status == "not_ready" for x in cells) else ""
    if any("gpu_throttled" in x.flags for x in cells):  # the same for a throttled GPU
        marks += "<br>GPU throttled"
    if count := trials_valid(cells):  # the mean of fewer trials than the cell ran
        marks += f"<br>{count}"
    return f"{rate(fig.total_tok_s)}<br>{ms(fig.ttft_s)} TTFT{marks}"


def _all_cells(cells: list[CellResult], speed: float) -> list[str]:
    if not cells:
        return ["Not run", *[DASH] * 8]
    if cells[0].status == "over_capacity":
        return [OVER, *[DASH] * 8]
    measured = [x for x in cells if x.status in ("valid", "not_ready")]
    fig = _mean_figures(measured, speed)
    shown = measured[0] if measured else cells[-1]
    status = _status_text(shown.status, shown.reason)
    throttled = sorted({x.flags["gpu_throttled"] for x in cells if "gpu_throttled" in x.flags})
    if throttled:
        status += f"; GPU throttled: {'; '.join(throttled)}"
    if fig is None:
        return [status, *[DASH] * 8]
    status += _trials_status(cells)
    return [
        status,
        rate(fig.total_tok_s),
        rate(fig.per_request_tok_s),
        ms(fig.ttft_s),
        ms1(fig.tbt_s),
        rate(fig.average_active),
        f"{fig.completed_requests:,}",
        f"{fig.output_tokens:,}",
        secs(fig.measured_for_s),
    ]


def _trials(results: Results) -> list[str]:
    speed = results.speed_factor
    groups = _cell_groups(results)
    rows, fewer = [], False
    for a in results.aggregates:
        ran = len(groups.get((a.context_label, a.concurrency), []))
        # The figures are the valid trials': a cell that ran more says how many they are.
        trials = f"{a.trials} of {ran} trials valid" if ran > a.trials else str(a.trials)
        fewer = fewer or ran > a.trials

        def pm(mean: float, ci: float | None, fmt: str) -> str:
            return f"{mean:{fmt}}" + ("" if ci is None else f" ± {ci:{fmt}}")

        rows.append(
            _row(
                [
                    a.context_label,
                    str(a.concurrency),
                    trials,
                    pm(a.total_tok_s.mean / speed, _div(a.total_tok_s.ci95, speed), ",.1f"),
                    pm(a.ttft_s.mean * speed * 1000, _mul(a.ttft_s.ci95, speed * 1000), ",.0f")
                    + " ms",
                    pm(a.tbt_s.mean * speed * 1000, _mul(a.tbt_s.ci95, speed * 1000), ",.1f")
                    + " ms",
                ]
            )
        )
    out = ["## Repeated trials", "", "Mean and 95 % confidence interval over valid trials.", ""]
    if fewer:
        out += [TRIALS_NOTE, ""]
    out += [_row(["Context", "Requests at once", "Trials", "Total tok/s", "TTFT", "TBT"])]
    out += ["|" + "---|" * 6, *rows]
    return [*out, ""]


def _div(x: float | None, n: float) -> float | None:
    return None if x is None else x / n


def _mul(x: float | None, n: float) -> float | None:
    return None if x is None else x * n
