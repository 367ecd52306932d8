"""What the history keeps of one bundle: its run row, a row per cell and trial, a row per
figure; made from the bundle's files alone, no database here.

The run row: the run (id, when, state), its trust (signed, by whom; or unverified and why),
its provenance (bench's commit and whether its tree was dirty, the image, the engine's
version and commit, the weights' revision, the launch profile and flags with their sha256,
the host, GPU model and count, the driver) and `settings`: what two runs must share for
their figures to stand on one line of a trend (bench.verdict.settings' COMPARE_NAMES, the
GPUs and launch flags left out on a twin as compare leaves them, and whether it is a twin),
as JSON with its sha256.

Cells and figures are bench.export.rows' figure rows (at server speed, the bounds of every
number from outside applied: a figure out of range makes its cell invalid with the reason),
so the history and an export of the same bundle hold the same numbers. A workload run adds
its `workloads` row and its points (or a capacity run's searches) as cells and figures of
their own phases (bench.history.workload_rows).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from bench import is_dirty
from bench.bundle import provenance as prov
from bench.bundle.recipe import Recipe, launch_profile
from bench.export import rows as export_rows
from bench.history import workload_rows
from bench.results import Results
from bench.verdict import settings as comparable

RUN_COLUMNS = (
    "manifest_sha256", "run_id", "created_at", "ingested_at", "trust", "trust_detail",
    "signer", "signer_fingerprint", "state", "bench_version", "bench_commit", "bench_dirty",
    "image_id", "engine", "engine_version", "engine_commit", "model", "weights_revision",
    "launch_profile", "launch_flags", "launch_flags_sha256", "host", "gpu_model", "gpu_count",
    "driver_version", "twin", "speed_factor", "settings_json", "settings_sha256",
)  # fmt: skip
CELL_COLUMNS = (
    "manifest_sha256", "phase", "context", "prompt_tokens", "concurrency", "trial", "status",
    "reason", "flags",
)  # fmt: skip
FIGURE_COLUMNS = (
    "manifest_sha256", "phase", "context", "concurrency", "trial", "figure", "value", "unit",
)  # fmt: skip


@dataclass(frozen=True)
class Trust:
    """How the bundle was checked: signed (by whom) or unverified (and why)."""

    trust: str  # "signed" | "unverified"
    detail: str
    signer: str | None = None
    fingerprint: str | None = None


@dataclass(frozen=True)
class Record:
    run: dict[str, Any]
    cells: tuple[tuple[Any, ...], ...]  # in CELL_COLUMNS order
    figures: tuple[tuple[Any, ...], ...]  # in FIGURE_COLUMNS order
    # A workload run's `workloads` row (workload_rows.WORKLOAD_COLUMNS order); None else.
    workload: tuple[Any, ...] | None = None

    def of_workload(self) -> Record:
        """This record's rows of its workload alone (its points or capacity searches)."""
        return Record(
            self.run,
            tuple(c for c in self.cells if workload_rows.is_point(c[1])),
            tuple(f for f in self.figures if workload_rows.is_point(f[1])),
            self.workload,
        )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _text(value: Any) -> str | None:
    return str(value) if value not in (None, "") else None


def comparable_settings(results: Results, env: Any) -> dict[str, str]:
    """The settings a trend's runs must share to be one series."""
    found = comparable.from_run(results, env)
    twin = comparable.is_twin(results)
    names = [n for n in comparable.COMPARE_NAMES if not (twin and n in comparable.TWIN_SIMULATED)]
    out = {n: found[n] for n in names if n in found}
    out["server"] = "twin" if twin else "engine"
    return out


@dataclass(frozen=True)
class Bundle:
    """What a verified bundle gives the history: its files as read, and how it was checked."""

    results: Results
    env: Any  # environment.json as plain JSON (None when it has none)
    recipe: Recipe | None
    manifest_sha256: str
    trust: Trust
    ingested_at: str  # ISO 8601 UTC


def run_row(b: Bundle) -> dict[str, Any]:
    results, env, trust = b.results, b.env, b.trust
    settings = comparable_settings(results, env)
    found = comparable.from_run(results, env)
    flags = found.get("launch_flags")
    gpu = _dict(_dict(env).get("gpu"))
    gpus = [g for g in gpu.get("gpus") or [] if isinstance(g, dict)]
    settings_json = json.dumps(settings, sort_keys=True, separators=(",", ":"))
    row = {
        "manifest_sha256": b.manifest_sha256,
        "run_id": results.run_id,
        "created_at": results.created_at,
        "ingested_at": b.ingested_at,
        "trust": trust.trust,
        "trust_detail": trust.detail,
        "signer": trust.signer,
        "signer_fingerprint": trust.fingerprint,
        "state": results.state,
        "bench_version": results.bench_version,
        "bench_commit": prov.bench_commit(results.bench_version),
        "bench_dirty": int(is_dirty(results.bench_version)),
        "image_id": prov.image_id(env),
        "engine": results.server.engine,
        "engine_version": results.server.version or _text(_dict(env).get("vllm_version")),
        "engine_commit": found.get("engine_commit"),
        "model": results.server.model,
        "weights_revision": prov.model_revision(env),
        "launch_profile": launch_profile(b.recipe),
        "launch_flags": flags,
        "launch_flags_sha256": _sha256(flags) if flags is not None else None,
        "host": _text(_dict(_dict(env).get("host")).get("hostname")),
        "gpu_model": found.get("gpu_model"),
        "gpu_count": len(gpus) if gpus else None,
        "driver_version": _text(gpu.get("driver_version")),
        "twin": int(comparable.is_twin(results)),
        "speed_factor": results.speed_factor,
        "settings_json": settings_json,
        "settings_sha256": _sha256(settings_json),
    }
    assert tuple(row) == RUN_COLUMNS
    return row


def _flags(results: Results, phase: str, context: str, concurrency: int, trial: int) -> str | None:
    if phase != "decode":
        return None
    cell = results.cell(context, concurrency, trial)
    if cell is None or not cell.flags:
        return None
    return ",".join(sorted(cell.flags))


def record(b: Bundle) -> Record:
    """The rows of one bundle."""
    results, manifest_sha256 = b.results, b.manifest_sha256
    cells: dict[tuple[str, str, int, int], tuple[Any, ...]] = {}
    figures: list[tuple[Any, ...]] = []
    for row in export_rows.figure_rows(results, b.env):
        key = (row["phase"], row["context"], row["concurrency"], row["trial"])
        if key not in cells:
            cells[key] = (
                manifest_sha256, *key[:2], row["prompt_tokens"], *key[2:], row["status"],
                row["reason"], _flags(results, *key),
            )  # fmt: skip
        if row["value"] is not None:
            figures.append((manifest_sha256, *key, row["figure"], float(row["value"]), row["unit"]))
    point_cells, point_figures = workload_rows.rows_of(results, manifest_sha256)
    return Record(
        run_row(b),
        (*cells.values(), *point_cells),
        (*figures, *point_figures),
        workload_rows.workload_row(results, manifest_sha256),
    )
