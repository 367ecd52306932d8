"""The verdict tables as data (text + a class per cell), rendered to Markdown here and to
HTML in `page`: one source for the terminal and the page, so they cannot disagree."""

from __future__ import annotations

from dataclasses import dataclass

from bench import dirty_note
from bench.bundle import provenance
from bench.verdict import budget, capacity_delta, headline
from bench.verdict.cells import Key, MetricSpec, RunFigures, metrics_of
from bench.verdict.compare import CellDelta, Comparison, FigureDelta, mde_shown
from bench.verdict.reproduce import (
    NEITHER,
    NOT_VALID_HERE,
    CellCheck,
    FigureCheck,
    Reproduction,
)

# css classes: ok, bad, oc (over capacity on both), warn (one-sided), na (nothing to judge),
# better, worse (compare), "" (plain)


@dataclass(frozen=True)
class TCell:
    text: str
    css: str = ""


@dataclass(frozen=True)
class VerdictTable:
    title: str
    header: list[str]
    rows: list[list[TCell]]


_PHASES = (("prefill", "Prefill"), ("decode", "Sustained decode"), ("workload", "Workload points"))


def _key_header(phase: str) -> list[str]:
    if phase == "workload":
        return ["Point", "Streams"]
    return ["Context"] + (["Requests"] if phase == "decode" else [])


def key_cells(key: Key) -> list[TCell]:
    """Where a row of a cell's table starts: its context, and a decode cell's concurrency
    (a workload point: its offered rate or "closed", and its streams, "-" for open loop)."""
    if key[0] == "workload":
        return [TCell(key[1]), TCell(str(key[2]) if key[2] else "-")]
    return [TCell(key[1])] + ([TCell(str(key[2]))] if key[0] == "decode" else [])


def pct(d: float | None) -> str:
    if d is None:
        return "—"
    if round(d, 1) == 0:
        return "0.0 %"
    return f"{d:+.1f} %".replace("-", "−")


def _repro_figure(f: FigureCheck | None, metric: MetricSpec, status: str | None) -> list[TCell]:
    if f is None:
        return [TCell("—", "na"), TCell("—", "na")]
    values = f"{metric.show(f.ours)} / {metric.show(f.card)}"
    if status is not None:  # measured, but not valid here: shown, marked, never judged
        return [TCell(f"{values} ⚠ {status}", "bad"), TCell(pct(f.delta_pct) + " ⚠", "bad")]
    if f.outcome is None:
        return [TCell(values, "na"), TCell(pct(f.delta_pct), "na")]
    text = pct(f.delta_pct)
    if f.ci_pct is not None:
        text += f" [{f.ci_pct[0]:+.1f}, {f.ci_pct[1]:+.1f}]".replace("-", "−")
    mark = {"pass": "", "fail": " ✗", "inconclusive": " ?"}[f.outcome]
    css = {"pass": "ok", "fail": "bad", "inconclusive": "warn"}[f.outcome]
    return [TCell(values), TCell(text + mark, css)]


def _verdict_css(check: CellCheck) -> str:
    if check.verdict == "pass":
        return "ok"
    if check.verdict == "inconclusive":
        return "warn"
    if check.verdict == "both over capacity":
        return "oc"
    if check.verdict in ("not measured here", "not run on card", "not run on either side"):
        return "na"
    if "over capacity" in check.verdict:
        return "warn"
    return "bad"


def reproduce_tables(r: Reproduction) -> list[VerdictTable]:
    out = []
    for phase, title in _PHASES:
        metrics = metrics_of(phase)
        header = _key_header(phase)
        for m in metrics:
            header += [f"{m.label} (ours / card)", "Δ"]
        header.append("Verdict")
        rows = []
        for check in (c for c in r.cells if c.key[0] == phase):
            row = key_cells(check.key)
            by_metric = {f.metric.name: f for f in check.figures}
            bad = check.verdict.removesuffix(" here") if check.verdict in NOT_VALID_HERE else None
            for m in metrics:
                if check.verdict in NEITHER:
                    text = "Over capacity" if check.verdict == "both over capacity" else "Not run"
                    row += [TCell(text, "oc"), TCell("", "oc")]
                else:
                    row += _repro_figure(by_metric.get(m.name), m, bad)
            note = f" ({check.note})" if check.note else ""
            row.append(TCell(check.verdict + note, _verdict_css(check)))
            rows.append(row)
        if rows:
            out.append(VerdictTable(title, header, rows))
    return out


def _cmp_figure(f: FigureDelta | None) -> TCell:
    if f is None or f.delta_pct is None:
        return TCell("—", "na")
    text = pct(f.delta_pct)
    if f.own_pct is not None:
        text += f"; own {pct(f.own_pct)}"
    if f.ci_pct is not None:
        text += f" [{f.ci_pct[0]:+.1f}, {f.ci_pct[1]:+.1f}]".replace("-", "−")
    if f.p_value is not None:
        text += f" p={f.p_value:.2g}"
    if f.mark == "unchanged" and (e := f.equivalence) is not None and e.equivalent:
        band = f"[{e.low_pct:+.1f}, {e.high_pct:+.1f}]".replace("-", "−")
        text += f"; equivalent within ±{e.margin_pct:g} % {band}"
    elif f.mark == "unchanged":
        mde = f"; MDE {mde_shown(f.mde_pct)}{f.mde_note}" if f.mde_pct is not None else ""
        text += f"; not resolved{mde}"
    if f.mark == "raw":
        text += " (raw, no noise estimate)"
    css = {"improved": "better", "regressed": "worse"}.get(f.mark, "")
    if f.mark in ("improved", "regressed"):
        text += " ▲" if f.mark == "improved" else " ▼"
    return TCell(text, css)


def _status_text(cell: CellDelta) -> str:
    if cell.mark == "cannot compare" and cell.reason:
        return f"⚠ {cell.reason}"
    if cell.a is None or cell.b is None:
        return "only in B" if cell.a is None else "only in A"
    a, b = cell.a.status, cell.b.status
    return a.replace("_", " ") if a == b else f"{a} → {b}".replace("_", " ")


def trials_counts(cell: CellDelta, *, why: bool = False) -> str | None:
    """Each side's count of the cell's trials when some had no figures ("B 2 of 3 trials
    valid"; with WHY what the others were); None when every trial of both is in it."""
    parts = [
        f"{side} {note}"
        for side, run in (("A", cell.a), ("B", cell.b))
        if run is not None and (note := run.trials_note if why else run.trials_count)
    ]
    return "; ".join(parts) or None


def fewer_trials_lines(c: Comparison) -> list[str]:
    """The cells compared on fewer trials than a side ran, and why (above the tables)."""
    found = [(x, note) for x in c.cells if (note := trials_counts(x, why=True)) is not None]
    if not found:
        return []
    return [
        f"Judged on their valid trials only ({len(found)} cells; their other trials had no "
        "figures):",
        *(f"- {x.key[0]} {x.key[1]} x {x.key[2]}: {note}" for x, note in found),
    ]


def compare_tables(c: Comparison) -> list[VerdictTable]:
    out = []
    for phase, title in _PHASES:
        metrics = metrics_of(phase)
        header = _key_header(phase)
        header += [f"{m.label} Δ" for m in metrics] + ["Cell"]
        rows = []
        for cell in (x for x in c.cells if x.key[0] == phase):
            row = key_cells(cell.key)
            by_metric = {f.metric.name: f for f in cell.figures}
            if not cell.figures:
                status = _status_text(cell)
                css = "oc"
                if cell.mark in ("status changed", "cannot compare"):
                    css = "warn"
                row += [TCell(status, css) for _ in metrics]
            else:
                row += [_cmp_figure(by_metric.get(m.name)) for m in metrics]
            css = {"improved": "better", "regressed": "worse", "mixed": "warn",
                   "status changed": "warn"}.get(cell.mark, "")  # fmt: skip
            shown: str = (cell.outcome if cell.mark == "unchanged" else cell.mark) or cell.mark
            if counts := trials_counts(cell):  # judged on fewer trials than a side ran
                shown, css = f"{shown}; {counts}", css or "warn"
            row.append(TCell(shown, css))
            rows.append(row)
        if rows:
            out.append(VerdictTable(title, header, rows))
    return out


def markdown(table: VerdictTable) -> str:
    def esc(text: str) -> str:
        return text.replace("|", "\\|")

    lines = [f"### {table.title}", ""]
    lines.append("| " + " | ".join(esc(h) for h in table.header) + " |")
    lines.append("|" + "---|" * len(table.header))
    for row in table.rows:
        lines.append("| " + " | ".join(esc(c.text) for c in row) + " |")
    return "\n".join(lines)


def trust_lines(runs: list[RunFigures]) -> list[str]:
    """The verdict's opening lines: UNVERIFIED first when any input is, then each input's
    provenance (signed by whom, unsigned directory, unverified and why)."""
    out = []
    unverified = [r.name for r in runs if r.trust == "unverified"]
    if unverified:
        out.append(
            f"UNVERIFIED: {', '.join(unverified)} did not verify; read with --unverified",
        )
        out.append("")
    out += [f"- input {r.provenance}" for r in runs if r.provenance]
    if any(r.provenance for r in runs):
        out.append("")
    return out


def server_time_line(runs: list[RunFigures]) -> str | None:
    """What the verdict cost in server time, per side: the sum of its runs' sweeps."""
    parts = [
        f"{r.name} {sum(r.server_s) / 3600:.2f} h over {len(r.server_s)} "
        f"run{'s' if len(r.server_s) != 1 else ''}"
        for r in runs
        if r.server_s
    ]
    if not parts:
        return None
    total = sum(sum(r.server_s) for r in runs)
    return (
        f"Server time of this verdict: {'; '.join(parts)}; {total / 3600:.2f} h in all "
        "(each run from its start to the end of its last window, in server time; server "
        "starts not included)."
    )


def _image(run: RunFigures) -> str:
    return f"image {run.image_id}" if run.image_id else "image not recorded"


def provenance_lines(c: Comparison) -> list[str]:
    """Above the tables: each side's weights, a model revision that differs, and the
    server packages whose versions differ between the sides' images (from the package
    freeze each bundle's environment.json carries)."""
    a, b = c.a, c.b
    out = ["Provenance:"]
    out += [f"- {side} ({run.name}): {run.weights or 'weights: not recorded'}; {_image(run)}"
            for side, run in (("A", a), ("B", b))]  # fmt: skip
    if a.model_revision and b.model_revision and a.model_revision != b.model_revision:
        out.append(f"- model revision differs: {a.model_revision} (A) → {b.model_revision} (B)")
    if a.packages is None or b.packages is None:
        missing = " and ".join(s for s, run in (("A", a), ("B", b)) if run.packages is None)
        out.append(f"- server packages: not recorded for {missing} (no package freeze)")
    else:
        changes = provenance.package_changes(a.packages, b.packages)
        images = f"{_image(a)} (A) → {_image(b)} (B)"
        if not changes:
            out.append(f"- server packages: the same {len(a.packages)} on both sides ({images})")
        else:
            out.append(f"- server packages that differ, {images}: {len(changes)}")
            out += [f"  - {name}: {va} → {vb}" for name, va, vb in changes]
    return out


def reproduce_markdown(r: Reproduction) -> str:
    head = trust_lines([r.ours])
    settings = r.settings.lines("ours", "card")
    if settings:
        head += [*settings, ""]
    head += [f"## Reproduce: {r.ours.name} against {r.card.name}", ""]
    head += [*r.answers_lines(), ""]
    if r.not_valid:
        head.append(f"Not valid here ({len(r.not_valid)} cells, never counted as reproduced):")
        head += [
            f"- {k.key[0]} {k.key[1]} x {k.key[2]}: {k.verdict} ({k.note or 'no reason'})"
            for k in r.not_valid
        ]
        head.append("")
    if r.fewer_trials:
        head += [*r.fewer_trials_lines(), ""]
    if r.ours.speed_factor != 1.0:
        n = f"{r.ours.speed_factor:g}"
        head.append(
            f"Twin speed factor {n}: our rates divided by {n}, our latencies multiplied by {n}."
        )
    state = r.ours.metadata.get("run state", "complete")
    if state != "complete":
        head.append(f"The run is {state}: cells it did not finish are not measured here.")
    if dirty := dirty_note(r.ours.metadata.get("bench version", "")):
        head.append(dirty)
    if spent := server_time_line([r.ours]):
        head.append(spent)
    head.append(f"The run's {r.ours.weights or 'weights: not recorded'}.")
    head.append(
        f"Tolerances: throughput ±{r.tolerances.throughput_pct:g} %, "
        f"latency ±{r.tolerances.latency_pct:g} %. Δ = (ours − card) / card."
    )
    if r.noise:
        head.append(
            "With trials, a cell reproduces when the 95 % interval of our mean lies inside "
            "the band, is inconclusive when it straddles an edge, fails when outside. Noise:"
        )
        head += r.noise_lines()
    body = [markdown(t) for t in reproduce_tables(r)]
    return "\n".join(head) + "\n\n" + "\n\n".join(body) + "\n\n" + r.summary() + "\n"


def _method_lines(c: Comparison) -> list[str]:
    p = c.policy
    if c.whole is None:
        return [
            f"Changed = rejected by Benjamini–Hochberg at FDR {p.alpha:g} over all {c.tests} "
            "cells × figures, p from Welch's t on log per-trial values (trials independent, "
            "log-normal noise), pooled per figure where sound. Δ = (B − A) / A on geometric "
            "means; [95 % CI]; MDE at 80 % power for one change among them."
        ]
    w = c.whole
    ci = f"[{w.ci_pct[0]:+.1f}, {w.ci_pct[1]:+.1f}]".replace("-", "−")
    said = (
        "CHANGED"
        if w.changed
        else f"not shown changed (a change under {mde_shown(w.mde_pct)} can go unseen)"
    )
    test = (
        f"t on the history's run-level sd {w.sd_log * 100:.2f} %" if w.from_prior else "Welch's t"
    )
    return [
        "Run-level model: every cell of a run shares that run's level (its median over the "
        "run's figures), so a change everywhere is tested on the runs' levels and a change in "
        "one cell on its values with their run's level divided out.",
        f"- Whole run: B {'slower' if w.delta_pct > 0 else 'faster'} by "
        f"{abs(w.delta_pct):.1f} % {ci}, p={w.p_value:.2g} ({test} on {w.runs[0]} + "
        f"{w.runs[1]} run levels, {w.df:.1f} df, at FDR {p.alpha / 2:g}): "
        f"{said}.",
        f"- Each cell: Δ = (B − A) / A on geometric means as measured; own = its change "
        f"beyond the whole run's, which [95 % CI], p and the MDE are about; Benjamini–Hochberg "
        f"at FDR {p.alpha / 2:g} over all {c.tests} cells × figures, Welch's t on log values "
        "(pooled per figure where sound).",
    ]


def one_start_lines(c: Comparison) -> list[str]:
    """A side that is one bundle with several trials: its trials share one server start."""
    single = [
        side
        for side, figures in (("A", c.a), ("B", c.b))
        if figures.kind == "run" and figures.metadata.get("runs", "1") == "1"
    ]
    if not single:
        return []
    who = (
        "A and B are one server start each"
        if len(single) == 2
        else f"{single[0]} is one server start"
    )
    return [
        f"- {who}: the trials of a start share it, so a shift between two starts "
        "of one setup is not in the noise above and can read as a change; for a verdict "
        "that holds across starts, compare 2 or more bundles a side (A1 A2 --vs B1 B2)."
    ]


def compare_markdown(c: Comparison) -> str:
    lines = trust_lines([c.a, c.b])
    lines += [f"## Compare: {c.b.name} against {c.a.name}", ""]
    for side, figures in (("A", c.a), ("B", c.b)):
        if dirty := dirty_note(
            figures.metadata.get("bench version", ""), f"{side} ({figures.name})"
        ):
            lines += [dirty, ""]
    if c.metadata_diff:
        lines += ["What differs:", ""]
        lines += [f"- {name}: {a} → {b}" for name, a, b in c.metadata_diff]
        lines.append("")
    settings = c.settings.lines("A", "B")
    if settings:
        lines += [*settings, ""]
    if spent := server_time_line([c.a, c.b]):
        lines += [spent, ""]
    lines += [*provenance_lines(c), ""]
    # What the runs answered comes before what their figures say (bench.verdict.answers).
    lines += [*c.answers.lines(), ""]
    if c.answers.refused:
        return "\n".join(lines) + f"\n{headline.verdict(c)}\n"
    if c.raw_only:
        lines.append(
            "One trial a side: run-to-run noise is unknown, so noise cannot be told from change."
            " Only the raw Δ is shown; run 3 trials a side (separate bundles) for a verdict."
        )
        # --noise-from's history, and why it could not stand in for the missing noise
        lines += [] if c.prior is None else c.prior.lines()
    else:
        lines += _method_lines(c)
        lines += one_start_lines(c)
        lines += c.noise_lines()
        lines += budget.lines(c)
    if c.unmeasured:
        lines.append(
            f"Not measured by either side: {len(c.unmeasured)} cells (over capacity or not run "
            "on both sides), not counted among the compared cells."
        )
    if c.cannot_compare:
        lines.append(f"Cannot compare {len(c.cannot_compare)} cells:")
        lines += [f"- {x.key[0]} {x.key[1]} x {x.key[2]}: {x.reason}" for x in c.cannot_compare]
    lines += fewer_trials_lines(c)
    lines.append("")
    lines += c.summaries()
    if c.capacity is not None:
        lines += ["", *capacity_delta.lines(c.capacity, c.policy.alpha)]
    body = [markdown(t) for t in compare_tables(c)]
    return "\n".join(lines) + "\n\n" + "\n\n".join(body) + f"\n\n{headline.verdict(c)}\n"
