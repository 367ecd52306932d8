"""A run's results (a bundle .tar.gz, a bundle or run directory, or results.json) as
`RunFigures`, at server speed.

A twin runs N times faster than real time and records N (`server.speed_factor`);
`results.json` holds client-clock figures, so rates are divided by N and durations
multiplied by N (`CellFigures.at_server_speed`) before any comparison.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench.bundle.manifest import MANIFEST_NAME
from bench.bundle.pack import open_bundle
from bench.bundle.verify import verify_dir
from bench.errors import BenchError, UsageError, VerifyFailed
from bench.provenance import sources as provenance
from bench.results import CellResult, PrefillSample, Results
from bench.run import layout
from bench.verdict import settings as run_settings
from bench.verdict.cells import (
    Cell,
    Key,
    RunFigures,
    Status,
    Trust,
    context_order,
    mean_rse,
    median_rse,
)

T = TypeVar("T")
# The allowed-signers files this machine maintains: `bench local` trusts its own key in
# the first, the orchestrator (`provisioning`) trusts each GPU host's key in the second.
DEFAULT_ALLOWED_SIGNERS = (
    Path.home() / ".config" / "bench" / "allowed_signers",
    Path.home() / ".config" / "vllm-bench" / "allowed_signers",
)


def add_verification_args(p: argparse.ArgumentParser, signers_of: str = "the bundles") -> None:
    """--allowed-signers (repeatable, with the default files named) and --unverified."""
    defaults = " or ".join(str(x) for x in DEFAULT_ALLOWED_SIGNERS)
    p.add_argument(
        "--allowed-signers",
        type=Path,
        action="append",
        default=[],
        metavar="FILE",
        help=f"trusted signers of {signers_of} (repeatable); default {defaults}",
    )
    p.add_argument(
        "--unverified",
        action="store_true",
        help="read a bundle that does not verify anyway; the output says UNVERIFIED first",
    )


@dataclass(frozen=True)
class Verification:
    """How a verdict checks its inputs: the allowed-signers files a bundle's signature
    must match (any one), or `unverified` to read a bundle that does not verify anyway."""

    allowed_signers: tuple[Path, ...] = ()
    unverified: bool = False

    def files(self) -> tuple[Path, ...]:
        return self.allowed_signers or tuple(p for p in DEFAULT_ALLOWED_SIGNERS if p.is_file())


def check(directory: Path, shown: Path, how: Verification) -> tuple[Trust, str]:
    """Verify the bundle in `directory` (signature, hashes, schema): (trust, what to say).

    A run directory without manifest.json is no bundle: accepted, and called unsigned.
    A bundle that does not verify is VerifyFailed (exit 5), unless `how.unverified`.
    """
    if shown.is_dir() and not (directory / MANIFEST_NAME).is_file():
        return "unsigned", f"{shown.name}: unsigned (a run directory, not a signed bundle)"
    files = how.files()
    reasons: list[str] = []
    if not files:
        looked = ", ".join(str(p) for p in DEFAULT_ALLOWED_SIGNERS)
        reasons.append(f"no allowed-signers file (looked for {looked})")
    for allowed in files:
        try:
            ok = verify_dir(directory, allowed)
        except BenchError as exc:  # VerifyFailed; UsageError for a missing allowed-signers
            reasons.append(exc.one_line())
            continue
        signer = ok.signer
        return "signed", (
            f"{shown.name}: verified, signed by {signer.principal} ({signer.fingerprint})"
        )
    reason = "; ".join(dict.fromkeys(reasons))
    if how.unverified:
        return "unverified", f"{shown.name}: UNVERIFIED ({reason})"
    raise VerifyFailed(
        f"{shown}: does not verify: {reason}",
        hint="give --allowed-signers FILE that trusts its signer; "
        "--unverified reads it anyway and says so",
    )


@contextlib.contextmanager
def opened(path: Path) -> Iterator[Path]:
    """The directory holding results.json: a bundle archive is opened safely into a
    temporary directory that is removed afterwards."""
    if path.is_dir():
        yield path
    elif path.name.endswith((".tar.gz", ".tgz")):
        with tempfile.TemporaryDirectory(prefix="bench-verdict-") as tmp:
            yield open_bundle(path, Path(tmp) / "bundle")
    elif path.is_file() and path.name.endswith(".json"):
        yield path.parent
    else:
        raise UsageError(
            f"{path}: not a bundle (.tar.gz), a run directory or a results.json",
            hint="give the bundle `bench run` wrote",
        )


def load_run(path: Path, how: Verification | None = None) -> RunFigures:
    """A run's figures, after its bundle was verified (see `check`)."""
    return load_run_with(path, how, lambda directory: None)[0]


def load_run_with(
    path: Path, how: Verification | None, read: Callable[[Path], T]
) -> tuple[RunFigures, T]:
    """`load_run`, and what `read` takes from the bundle's directory after it verified,
    while it is open (an archive's temporary directory is gone afterwards)."""
    with opened(path) as directory:
        shown = directory if path.is_file() and path.name.endswith(".json") else path
        trust, provenance = check(directory, shown, how or Verification())
        results = layout.load_results(directory)
        env = read_environment(directory)
        extra = read(directory)
    figures = from_results(results, env, name=path.name)
    return dataclasses.replace(figures, trust=trust, provenance=provenance), extra


def read_environment(directory: Path) -> Any:
    """environment.json as plain JSON, None when the bundle has none; parts of the wrong
    shape are left out (see `shaped`)."""
    env_path = directory / layout.ENVIRONMENT
    return shaped(layout.read_json(env_path)) if env_path.is_file() else None


# The parts of environment.json the verdicts index into, and the type each must have.
_SHAPES: dict[str, type] = {
    "image": dict, "gpu": dict, "host": dict, "launch": dict, "weights": dict, "bench": dict,
}  # fmt: skip
_INNER: dict[tuple[str, str], type] = {
    ("image", "labels"): dict, ("image", "selftest"): dict, ("gpu", "gpus"): list,
    ("launch", "argv"): list, ("bench", "packages"): dict, ("weights", "files"): dict,
}  # fmt: skip


def shaped(env: Any) -> dict[str, Any] | None:
    """environment.json without the parts whose type is not the one its readers expect
    (`"image": 5`, `"gpus": [1]`, an argv of numbers): a hostile or foreign file reads as
    "not recorded" there instead of crashing a verdict. None when it is no JSON object."""
    if not isinstance(env, dict):
        return None
    out = {k: v for k, v in env.items() if k not in _SHAPES or isinstance(v, _SHAPES[k])}
    for (outer, inner), kind in _INNER.items():
        part = out.get(outer)
        if isinstance(part, dict) and inner in part and not isinstance(part[inner], kind):
            out[outer] = {k: v for k, v in part.items() if k != inner}
    gpu = out.get("gpu")
    if isinstance(gpu, dict) and "gpus" in gpu:
        out["gpu"] = {**gpu, "gpus": [g for g in gpu["gpus"] if isinstance(g, dict)]}
    launch = out.get("launch")
    if isinstance(launch, dict) and not all(isinstance(w, str) for w in launch.get("argv", [])):
        out["launch"] = {k: v for k, v in launch.items() if k != "argv"}
    return out


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


def _reasons(items: list[CellResult] | list[PrefillSample], status: str) -> str:
    found = sorted({r.reason or "no reason" for r in items if r.status == status})
    trials = sum(1 for r in items if r.status == status)
    return f"{trials} of {len(items)} trials {status.replace('_', ' ')}: {'; '.join(found)}"


def _decode_cell(label: str, concurrency: int, results: list[CellResult], n: float) -> Cell:
    statuses = {r.status for r in results}
    if "over_capacity" in statuses:
        reason = next((r.reason for r in results if r.reason), None)
        return Cell("decode", label, concurrency, "over_capacity", reason)
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
        return Cell("decode", label, concurrency, bad, _reasons(results, bad), shown)
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
    return Cell("decode", label, concurrency, "valid", detail, trials, rse)


def _prefill_cell(label: str, samples: list[PrefillSample], n: float) -> Cell:
    statuses = {s.status for s in samples}
    bad = next((s for s in _UNTRUSTED_ORDER if s in statuses), None)
    if bad is not None:
        return Cell("prefill", label, 1, bad, _reasons(samples, bad))
    good = [s.at_server_speed(n) for s in samples if s.status == "valid"]
    if not good:
        reasons = "; ".join(sorted({f"{s.status}: {s.reason or 'no reason'}" for s in samples}))
        return Cell("prefill", label, 1, "failed", reasons)
    trials = {
        "prefill_tok_s": tuple(s.prefill_tok_s for s in good if s.prefill_tok_s is not None),
        "prefill_ttft_s": tuple(s.ttft_s for s in good if s.ttft_s is not None),
    }
    return Cell("prefill", label, 1, "valid", None, trials)


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
        metadata=_metadata(results, env),
        cells=cells,
        contexts=context_order(k[1] for k in cells),
        concurrencies=tuple(sorted({k[2] for k in cells if k[0] == "decode"})),
        server_s=() if (spent := sweep_server_s(results)) is None else (spent,),
        planned=frozenset(
            [("decode", c.context_label, c.concurrency) for c in results.plan.cells]
            + [("prefill", c.label, 1) for c in results.plan.contexts]
        ),
    )


_STATUS_RANK: tuple[Status, ...] = (
    "interrupted",
    "invalid",
    "not_ready",
    "failed",
    "over_capacity",
    "not_run",
    "valid",
)


def _merge_cell(cells: list[Cell]) -> Cell:
    status = min((c.status for c in cells), key=_STATUS_RANK.index)
    first = cells[0]
    if status != "valid":
        bad = next(c for c in cells if c.status == status)
        detail = bad.detail
        if len(cells) > 1:
            detail = f"in {sum(c.status == status for c in cells)} of {len(cells)} runs: {detail}"
        return Cell(first.phase, first.context, first.concurrency, status, detail, bad.trials)
    names = {m for c in cells for m in c.trials}
    trials = {m: tuple(v for c in cells for v in c.trials.get(m, ())) for m in sorted(names)}
    return Cell(first.phase, first.context, first.concurrency, "valid", None, trials)


def merge_runs(runs: list[RunFigures], name: str) -> RunFigures:
    """Several bundles of one side (one server start each) as one side whose trials are
    all of theirs; a cell not valid in any of them is not valid here. A cell that a run
    did not plan (a sequential compare's later runs measure the open cells only) is not
    missing from it; one it planned and did not measure is."""
    if len(runs) == 1:
        return runs[0]
    keys = {k for r in runs for k in r.cells}
    cells: dict[Key, Cell] = {}
    for key in keys:
        found = [r.cells[key] for r in runs if key in r.cells]
        asked = sum(1 for r in runs if r.planned is None or key in r.planned or key in r.cells)
        merged = _merge_cell(found)
        if len(found) < asked:
            merged = dataclasses.replace(
                merged,
                status="failed" if merged.status == "valid" else merged.status,
                detail=f"measured in {len(found)} of the {asked} runs that planned it",
            )
        cells[key] = merged
    order: list[Trust] = ["unverified", "unsigned", "signed", "card"]
    trust = min((r.trust for r in runs), key=order.index)
    first = runs[0]
    metadata = dict(first.metadata)
    metadata["runs"] = str(len(runs))
    # The side's provenance is its first bundle's; bundles of one side that ran other
    # weights or another package set say so in the header instead of hiding behind it.
    revisions = sorted({r.model_revision for r in runs if r.model_revision})
    weights = first.weights
    if len(revisions) > 1:
        weights += (
            f" (its {len(runs)} runs used {len(revisions)} revisions: {', '.join(revisions)})"
        )
    if any(r.packages != first.packages for r in runs[1:]):
        weights += f" (its {len(runs)} runs' package freezes differ; the first's is compared)"
    return RunFigures(
        name=name,
        kind="run",
        speed_factor=first.speed_factor,
        metadata=metadata,
        cells=cells,
        contexts=context_order(k[1] for k in cells),
        concurrencies=tuple(sorted({k[2] for k in cells if k[0] == "decode"})),
        trust=trust,
        provenance="; ".join(r.provenance for r in runs if r.provenance),
        settings=first.settings,
        twin=first.twin,
        server_s=tuple(t for r in runs for t in r.server_s),
        weights=weights,
        model_revision=first.model_revision,
        image_id=first.image_id,
        packages=first.packages,
    )
