"""A run of the history as a verdict reads it (bench.verdict.cells.RunFigures), so that the
history's page compares two recorded runs with `bench compare`'s own code; and which run is
a run's baseline.

A cell's status over its trials is the one bench.verdict.run_figures gives a bundle's: over
capacity or not run when a trial says so; valid trials beside invalid or interrupted ones
only: judged on the valid ones, "2 of 3 trials valid" and what the others were said; else
the worst untrusted status (interrupted, invalid, not ready) with its reasons, else
gpu_throttled when a valid trial carries that flag, else valid. The figures are the
history's (at server speed, as recorded); a prefill sample's `ttft_s` is the verdict's
`prefill_ttft_s`. The history keeps no spread inside a
run, so a single trial has no noise estimate of its own: its compare shows the raw Δ.

A workload's point is the verdict's cell of it (bench.verdict.workload_cells: the same key,
output tok/s and TTFT and TPOT at p50 and p99; an overloaded point or a late client
`invalid`, with its status said); a capacity run's searches are its capacity
(`RunFigures.capacity`, searched by what `workloads` records).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from bench import escape
from bench.errors import UsageError
from bench.history import trend
from bench.history import workload_rows as wl
from bench.history.database import Connection
from bench.verdict import run_figures
from bench.verdict.cells import (
    Cell,
    Key,
    Phase,
    RunFigures,
    Status,
    Trust,
    context_order,
    metrics_of,
)

MAX_TEXT = 80  # characters of a string from the database in what a verdict shows
MAX_CELLS = 400  # cells of one run read for a compare (a card has 55), smallest first
# "failed": a workload's point with more failed requests than its bound allows.
_UNTRUSTED_ORDER: tuple[Status, ...] = ("interrupted", "invalid", "not_ready", "failed")
_UNMEASURED: tuple[Status, ...] = ("over_capacity", "not_run")
# The history's figure name -> the verdict's metric name, per phase.
_METRIC = {
    "decode": {m.name: m.name for m in metrics_of("decode")},
    "prefill": {"prefill_tok_s": "prefill_tok_s", "ttft_s": "prefill_ttft_s"},
    wl.WORKLOAD_PHASE: {
        name: f"wl_{name}" for name in ("output_tok_s", "ttft_p50_s", "ttft_p99_s",
                                        "tpot_p50_s", "tpot_p99_s")
    },
}  # fmt: skip
# A point's status that is not one of a cell's, as compare names it (the point's own status
# said in the reason).
_POINT_STATUS = {"overloaded": "invalid", "late_client": "invalid"}
_CAPACITY = "SELECT capacity_by, capacity_slo FROM workloads WHERE manifest_sha256 = ?"
_RUN_COLUMNS = (
    "manifest_sha256", "run_id", "created_at", "host", "launch_profile", "settings_sha256",
    "settings_json", "trust", "trust_detail", "signer", "image_id", "engine_version",
    "engine_commit", "bench_version", "model", "weights_revision", "launch_flags", "gpu_model",
    "gpu_count", "driver_version", "speed_factor", "twin",
)  # fmt: skip
# The names are this module's constants; every value travels as a parameter.
_RUN = f"SELECT {', '.join(_RUN_COLUMNS)} FROM runs"  # noqa: S608
_CELLS = """
SELECT c.phase, c.context, c.concurrency, c.trial, c.status, c.reason, c.flags, f.figure, f.value
FROM cells c
LEFT JOIN figures f ON f.manifest_sha256 = c.manifest_sha256 AND f.phase = c.phase
    AND f.context = c.context AND f.concurrency = c.concurrency AND f.trial = c.trial
WHERE c.manifest_sha256 = ?
ORDER BY c.phase, c.context, c.concurrency, c.trial
"""


@dataclass(frozen=True)
class Run:
    """One row of `runs`: what the page needs to name a run and find its series."""

    manifest_sha256: str
    run_id: str
    created_at: str
    host: str | None
    profile: str | None
    settings_sha256: str
    row: dict[str, Any]

    @property
    def series(self) -> tuple[str | None, str | None, str]:
        return (self.host, self.profile, self.settings_sha256)


def _run(row: tuple[Any, ...]) -> Run:
    d = dict(zip(_RUN_COLUMNS, row, strict=True))
    return Run(
        str(d["manifest_sha256"]), str(d["run_id"]), str(d["created_at"]),
        None if d["host"] is None else str(d["host"]),
        None if d["launch_profile"] is None else str(d["launch_profile"]),
        str(d["settings_sha256"]), d,
    )  # fmt: skip


def all_runs(
    conn: Connection, *, host: str | None, profile: str | None, limit: int | None = None
) -> list[Run]:
    """The history's runs, oldest first (on --host and --profile when given); with LIMIT,
    the latest LIMIT of them only (read so: the database returns no more)."""
    sql, params = _RUN + " WHERE 1 = 1", list[str | int]()
    if host is not None:
        sql, params = sql + " AND host = ?", [*params, host]
    if profile is not None:
        sql, params = sql + " AND launch_profile = ?", [*params, profile]
    if limit is None:
        return [_run(r) for r in conn.query(sql + " ORDER BY created_at, manifest_sha256", params)]
    latest = conn.query(
        sql + " ORDER BY created_at DESC, manifest_sha256 DESC LIMIT ?", [*params, limit]
    )
    return [_run(r) for r in reversed(latest)]


def previous(runs: Sequence[Run], latest: Run) -> Run | None:
    """The run of LATEST's series (host, profile, settings) just before it."""
    before = [r for r in runs if r.series == latest.series and r is not latest]
    before = [r for r in before if (r.created_at, r.manifest_sha256)
              < (latest.created_at, latest.manifest_sha256)]  # fmt: skip
    return before[-1] if before else None


def chosen(runs: Sequence[Run], given: str) -> Run:
    """The run --baseline names: its run id, or its manifest's sha256 (or a prefix of 8+)."""
    found = [r for r in runs if given in (r.run_id, r.manifest_sha256)]
    if not found and len(given) >= 8:
        found = [r for r in runs if r.manifest_sha256.startswith(given.lower())]
    if len(found) == 1:
        return found[0]
    if not found:
        raise UsageError(
            f"--baseline {given!r}: no such run in the history",
            hint="give a run id or manifest sha256 that `bench history trend` lists",
        )
    raise UsageError(
        f"--baseline {given!r}: {len(found)} runs have that id",
        hint="give the run's manifest sha256 (or its first 8 characters or more) instead",
    )


def _clip(value: object) -> str:
    return escape.clipped(str(value), MAX_TEXT)


def _settings(text: Any) -> dict[str, str]:
    return {_clip(k): _clip(v) for k, v in trend.settings_of(text).items()}


def _weights(r: dict[str, Any]) -> str:
    """The verdict header's weights line, from what the history keeps (not whether pinned)."""
    if r["twin"]:
        return "weights: not applicable (twin)"
    if r["weights_revision"]:
        return _clip(f"weights: {r['model'] or 'the model'} at {r['weights_revision']}")
    return "weights: not recorded"


def _metadata(run: Run) -> dict[str, str]:
    r = run.row
    shown = {
        "host": r["host"], "launch profile": r["launch_profile"], "image digest": r["image_id"],
        "vLLM version": r["engine_version"], "engine commit": r["engine_commit"],
        "bench version": r["bench_version"], "server model": r["model"],
        "weights revision": r["weights_revision"], "launch flags": r["launch_flags"],
        "GPUs": f"{r['gpu_count']} x {r['gpu_model']}" if r["gpu_count"] else None,
        "driver": r["driver_version"], "speed factor": r["speed_factor"],
    }  # fmt: skip
    return {k: _clip(v) for k, v in shown.items() if v not in (None, "")}


@dataclass
class _Trials:
    statuses: dict[int, str]
    reasons: dict[int, str]
    flags: dict[int, str]
    values: dict[str, dict[int, float]]


def _cell(key: Key, t: _Trials) -> Cell:
    phase: Phase = "decode"
    if key[0] == "prefill" or key[0] == wl.WORKLOAD_PHASE:
        phase = "prefill" if key[0] == "prefill" else "workload"
    context, conc = key[1], key[2]
    statuses = set(t.statuses.values())
    reasons = "; ".join(sorted({_clip(t.reasons.get(i) or "no reason") for i in t.statuses}))
    unmeasured = next((s for s in _UNMEASURED if s in statuses), None)
    if unmeasured is not None:
        return Cell(phase, context, conc, unmeasured, reasons)
    good = sorted(i for i, s in t.statuses.items() if s == "valid")
    left = [i for i, s in t.statuses.items() if s in run_figures.LEFT_OUT]
    if good and left and len(good) + len(left) == len(t.statuses):
        # Judged on its valid trials, the others counted and said, as a bundle's cell is.
        cell = _cell(key, _Trials({i: "valid" for i in good}, t.reasons, t.flags, t.values))
        gone = run_figures.left_out_text(
            (t.statuses[i], _clip(t.reasons.get(i) or "no reason")) for i in left
        )
        if cell.status == "gpu_throttled":  # of all the trials it ran, not of the valid ones
            cell = replace(cell, detail=cell.detail and cell.detail.replace(
                f" of {len(good)} trials", f" of {len(t.statuses)} trials", 1))  # fmt: skip
        return replace(cell, trials_run=len(t.statuses), left_out=gone)
    trials = {m: tuple(v[i] for i in good if i in v) for m, v in t.values.items()}
    trials = {m: v for m, v in trials.items() if v}
    bad = next((s for s in _UNTRUSTED_ORDER if s in statuses), None)
    if bad is not None:
        n = sum(1 for s in t.statuses.values() if s == bad)
        said = sorted({_clip(t.reasons.get(i) or "no reason")
                       for i, s in t.statuses.items() if s == bad})  # fmt: skip
        why = f"{n} of {len(t.statuses)} trials {bad.replace('_', ' ')}: {'; '.join(said)}"
        return Cell(phase, context, conc, bad, why)
    if not trials:
        return Cell(phase, context, conc, "failed", reasons)
    throttled = [i for i in good if "gpu_throttled" in (t.flags.get(i) or "").split(",")]
    status: Status = "gpu_throttled" if throttled else "valid"
    detail = f"{len(throttled)} of {len(t.statuses)} trials GPU throttled" if throttled else None
    return Cell(phase, context, conc, status, detail, trials, runs=tuple(good))


def figures(conn: Connection, run: Run) -> RunFigures:
    """RUN's cells and figures as bench compare reads a bundle's."""
    found: dict[Key, _Trials] = {}
    capacity: dict[int, float] = {}
    estimate: dict[int, float] = {}
    searches: set[int] = set()
    for phase, context, conc, trial, recorded, said, flags, figure, value in conn.query(
        _CELLS, [run.manifest_sha256]
    ):
        if phase == wl.CAPACITY_PHASE:
            searches.add(int(trial))
            if recorded == "valid" and figure in ("capacity", "capacity_estimate"):
                (capacity if figure == "capacity" else estimate)[int(trial)] = float(value)
        if phase not in _METRIC:
            continue
        status, reason = recorded, said
        if phase == wl.WORKLOAD_PHASE and recorded in _POINT_STATUS:
            status, reason = _POINT_STATUS[str(recorded)], f"{recorded}: {said or 'no reason'}"
        key: Key = (str(phase), str(context), int(conc))
        t = found.setdefault(key, _Trials({}, {}, {}, {}))
        t.statuses[int(trial)] = str(status)
        if reason:
            t.reasons[int(trial)] = str(reason)
        if flags:
            t.flags[int(trial)] = str(flags)
        metric = _METRIC[str(phase)].get(str(figure))
        if metric is not None and value is not None:
            t.values.setdefault(metric, {})[int(trial)] = float(value)
    order = {c: i for i, c in enumerate(context_order(k[1] for k in found))}
    phases = ("prefill", "decode", wl.WORKLOAD_PHASE)
    keys = sorted(found, key=lambda k: (phases.index(k[0]), order[k[1]], k[2]))
    cells = {key: _cell(key, found[key]) for key in keys[:MAX_CELLS]}
    r = run.row
    trust: Trust = "signed" if r["trust"] == "signed" else "unverified"
    how = f"signed by {r['signer']}" if trust == "signed" else f"unverified: {r['trust_detail']}"
    return RunFigures(
        name=_clip(run.run_id),
        kind="run",
        speed_factor=float(r["speed_factor"] or 1.0),
        metadata=_metadata(run),
        cells=cells,
        contexts=context_order(k[1] for k in cells),
        concurrencies=tuple(sorted({k[2] for k in cells if k[0] == "decode"})),
        trust=trust,
        provenance=_clip(f"{run.run_id} (history, {run.created_at}): {how}"),
        settings=_settings(r["settings_json"]),
        twin=bool(r["twin"]),
        image_id=None if r["image_id"] is None else _clip(r["image_id"]),
        model_revision=None if r["weights_revision"] is None else _clip(r["weights_revision"]),
        weights=_weights(r),
        identities=frozenset({f"manifest sha256 {run.manifest_sha256[:16]}"}),
        **_capacity(conn, run, capacity, estimate, len(searches)),
    )


def _capacity(
    conn: Connection, run: Run, found: dict[int, float], estimate: dict[int, float], searches: int
) -> dict[str, Any]:
    """RunFigures' capacity of a capacity run (what was searched, each search's bound and
    point estimate in trial order, how many searches), as
    bench.verdict.workload_cells.capacity_of gives a bundle's. A run recorded before the
    estimate was kept has none: compare then judges the bounds."""
    searched = conn.query(_CAPACITY, [run.manifest_sha256])
    if not searched or searched[0][0] is None:
        return {}
    by, slo = searched[0]
    return {
        "capacity_of": _clip(f"{by} at {slo}"),
        "capacity": tuple(found[t] for t in sorted(found)),
        "capacity_estimate": tuple(estimate[t] for t in sorted(estimate)),
        "capacity_searches": searches,
    }
