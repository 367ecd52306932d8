"""A run's results (a bundle .tar.gz, a bundle or run directory, or results.json) as
`RunFigures`, at server speed: the bundle opened and verified (who signed it, or why it is
read unverified), results.json and environment.json read, the figures made by
`bench.verdict.run_figures`; and several runs of one side merged into one.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from bench import run_files
from bench.bundle import recipe
from bench.bundle.manifest import MANIFEST_NAME
from bench.bundle.pack import open_bundle
from bench.bundle.sign import Signer
from bench.bundle.verify import verify_dir
from bench.errors import BenchError, UsageError, VerifyFailed
from bench.verdict import aiperf_saved, guidellm_saved, vllm_saved
from bench.verdict.cells import (
    Cell,
    Key,
    RunFigures,
    Status,
    Trust,
    context_order,
)
from bench.verdict.run_figures import from_results

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
    trust, line, _ = check_signer(directory, shown, how)
    return trust, line


def check_signer(
    directory: Path, shown: Path, how: Verification
) -> tuple[Trust, str, Signer | None]:
    """`check`, and who signed the bundle when it verified (bench history records it)."""
    if shown.is_dir() and not (directory / MANIFEST_NAME).is_file():
        return "unsigned", f"{shown.name}: unsigned (a run directory, not a signed bundle)", None
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
        return (
            "signed",
            (f"{shown.name}: verified, signed by {signer.principal} ({signer.fingerprint})"),
            signer,
        )
    reason = "; ".join(dict.fromkeys(reasons))
    if how.unverified:
        return "unverified", f"{shown.name}: UNVERIFIED ({reason})", None
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
    elif path.is_file() and path.name == run_files.RESULTS:
        yield path.parent
    elif path.is_file() and path.name.endswith(".json"):  # not its neighbour (issue 29, M6)
        raise UsageError(
            f"{path}: a .json other than {run_files.RESULTS} (nor vllm bench serve records)",
            hint=f"give the run directory, its {run_files.RESULTS} or the bundle",
        )
    else:
        raise UsageError(
            f"{path}: not a bundle (.tar.gz), a run directory or a results.json",
            hint="give the bundle `bench run` wrote",
        )


def load_run(path: Path, how: Verification | None = None) -> RunFigures:
    """A run's figures, after its bundle was verified (see `check`); a file (or folder) of
    `vllm bench serve --save-result` records is read by bench.verdict.vllm_saved, AIPerf's
    exports by bench.verdict.aiperf_saved, GuideLLM's reports by bench.verdict.guidellm_saved."""
    if vllm_saved.recognises(path):
        return vllm_saved.load(path)
    if aiperf_saved.recognises(path):
        return aiperf_saved.load(path)
    if guidellm_saved.recognises(path):
        return guidellm_saved.load(path)
    return load_run_with(path, how, lambda directory: None)[0]


def load_run_and_profile(
    path: Path, how: Verification | None = None
) -> tuple[RunFigures, str | None]:
    """`load_run`, and the launch profile the bundle's recipe.json names (`twin:NAME` on a
    twin), as the history records it; None for another tool's results, or without a readable
    recipe (a run directory `bench sign` has not sealed, an older bundle)."""
    if any(m.recognises(path) for m in (vllm_saved, aiperf_saved, guidellm_saved)):
        return load_run(path, how), None
    return load_run_with(path, how, launch_profile_of)


def launch_profile_of(directory: Path) -> str | None:
    """The launch profile of the run in DIRECTORY (its recipe.json), for `load_run_with`."""
    try:
        return recipe.launch_profile(recipe.read(directory))
    except VerifyFailed:
        return None


def load_run_with(
    path: Path, how: Verification | None, read: Callable[[Path], T]
) -> tuple[RunFigures, T]:
    """`load_run`, and what `read` takes from the bundle's directory after it verified,
    while it is open (an archive's temporary directory is gone afterwards)."""
    with opened(path) as directory:
        shown = directory if path.is_file() and path.name.endswith(".json") else path
        trust, provenance = check(directory, shown, how or Verification())
        results = run_files.load_results(directory)
        env = read_environment(directory)
        extra = read(directory)
        manifest = directory / MANIFEST_NAME
        manifest_identity = (
            frozenset({f"manifest sha256 {_sha256(manifest)[:16]}"})
            if manifest.is_file()
            else frozenset()
        )
    figures = from_results(results, env, name=path.name)
    identities = figures.identities | manifest_identity
    return (
        dataclasses.replace(figures, trust=trust, provenance=provenance, identities=identities),
        extra,
    )


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def refuse_repeats(inputs: Sequence[tuple[str, RunFigures]]) -> None:
    """The one rule for an input given twice (issue 29, S3/S4): the same run (its run id,
    its manifest, its records) under two paths, on one side of a verdict or across sides,
    is one run, and counting it twice forges a verdict (zero noise, or a median of two
    copies). UsageError naming both paths."""
    seen: dict[str, str] = {}
    for shown, run in inputs:
        for identity in sorted(run.identities):
            if identity in seen:
                raise UsageError(
                    f"{seen[identity]} and {shown} are the same run ({identity}): "
                    "an input given twice is one input",
                    hint="give each run once",
                )
        for identity in run.identities:
            seen.setdefault(identity, shown)


def read_environment(directory: Path) -> Any:
    """environment.json as plain JSON (run_files.read_environment: wrong-shaped parts left out)."""
    return run_files.read_environment(directory)


_STATUS_RANK: tuple[Status, ...] = (
    "interrupted",
    "invalid",
    "not_ready",
    "gpu_throttled",
    "failed",
    "over_capacity",
    "not_run",
    "valid",
)


# Run ids of merged sides: run i's own id j becomes i * _RUN_STRIDE + j.
_RUN_STRIDE = 1000


def _merged_runs(cells: list[tuple[int, Cell]]) -> tuple[int, ...]:
    out: list[int] = []
    for i, c in cells:
        n = max((len(v) for v in c.trials.values()), default=0)
        ids = c.runs if len(c.runs) == n else tuple(range(n))
        out += [i * _RUN_STRIDE + j for j in ids]
    return tuple(out)


def _with_runs_left_out(indexed: list[tuple[int, Cell]]) -> Cell | None:
    """The cell of the runs where it is valid, when every other run's trials of it had no
    figures (invalid, interrupted): judged on the valid trials, with every trial counted
    and what the others were said (`Cell.trials_note`); None when that is not the case."""
    empty = [(i, c) for i, c in indexed if c.left_out is not None and c.valid_trials == 0]
    kept = [(i, c) for i, c in indexed if c.status in ("valid", "gpu_throttled")]
    if not empty or not kept or len(empty) + len(kept) != len(indexed):
        return None
    return _counted(_merge_cell(kept), [c for _, c in indexed])


def _counted(merged: Cell, cells: list[Cell]) -> Cell:
    """MERGED with every trial of CELLS counted when any of them left trials out."""
    said = [c.left_out for c in cells if c.left_out is not None]
    if not said:
        return merged
    ran = sum(c.trials_run or c.valid_trials for c in cells)
    return dataclasses.replace(merged, trials_run=ran, left_out="; ".join(said))


def _merge_cell(indexed: list[tuple[int, Cell]]) -> Cell:
    if (partial := _with_runs_left_out(indexed)) is not None:
        return partial
    cells = [c for _, c in indexed]
    status = min((c.status for c in cells), key=_STATUS_RANK.index)
    first = cells[0]
    if status == "gpu_throttled":  # every run valid or throttled: all trials, still flagged
        names = {m for c in cells for m in c.trials}
        trials = {m: tuple(v for c in cells for v in c.trials.get(m, ())) for m in sorted(names)}
        why = "; ".join(c.detail or "" for c in cells if c.status == status)
        flagged = f"in {sum(c.status == status for c in cells)} of {len(cells)} runs: {why}"
        cell = Cell(
            first.phase, first.context, first.concurrency, status, flagged, trials,
            runs=_merged_runs(indexed),
        )  # fmt: skip
        return _counted(cell, cells)
    if status != "valid":
        bad = next(c for c in cells if c.status == status)
        detail = bad.detail
        if len(cells) > 1:
            detail = f"in {sum(c.status == status for c in cells)} of {len(cells)} runs: {detail}"
        return Cell(first.phase, first.context, first.concurrency, status, detail, bad.trials)
    names = {m for c in cells for m in c.trials}
    trials = {m: tuple(v for c in cells for v in c.trials.get(m, ())) for m in sorted(names)}
    runs = _merged_runs(indexed)
    # A run's valid cell may have left out some of its own trials: every trial is counted.
    merged = Cell(first.phase, first.context, first.concurrency, "valid", None, trials, runs=runs)
    return _counted(merged, cells)


def merge_runs(runs: list[RunFigures], name: str) -> RunFigures:
    """Several bundles of one side (one server start each) as one side whose trials are
    all of theirs; a cell not valid in any of them is not valid here, save where those runs'
    trials of it all had no figures (invalid, interrupted): it is then the other runs' valid
    trials, every trial counted and the others said (`Cell.trials_note`). A cell that a run
    did not plan (a sequential compare's later runs measure the open cells only) is not
    missing from it; one it planned and did not measure is."""
    if len(runs) == 1:
        return runs[0]
    keys = {k for r in runs for k in r.cells}
    cells: dict[Key, Cell] = {}
    for key in keys:
        found = [(i, r.cells[key]) for i, r in enumerate(runs) if key in r.cells]
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
        identities=frozenset().union(*(r.identities for r in runs)),
        fingerprints=tuple(f for r in runs for f in r.fingerprints),
        start_s=tuple(t for r in runs for t in r.start_s),
        capacity_of=runs[0].capacity_of if len({r.capacity_of for r in runs}) == 1 else "mixed",
        capacity=tuple(x for r in runs for x in r.capacity),
        capacity_estimate=tuple(x for r in runs for x in r.capacity_estimate),
        capacity_searches=sum(r.capacity_searches for r in runs),
        weights=weights,
        model_revision=first.model_revision,
        image_id=first.image_id,
        packages=first.packages,
    )
