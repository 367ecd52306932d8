"""The measurement side of the appliance: runs inside the container or anywhere.

`bench` never imports `provisioning` (a test enforces it). Its packages and modules, in
layers (docs/ARCHITECTURE.md; tests/unit/test_layering.py):

    errors          the exception tree and the named exit codes
    logs            structlog set-up, done once by the CLI
    distributions   the t, F and normal distributions of the statistics
    failures        why a measured request failed: a kind and one line
    bounds          the ranges every number from outside passes before use
    escape          text from outside escaped where it is rendered (tables, terminal, CSV)
    secrets         the run's secrets, and the one door a server's text passes to a record
    rehearsal_model  the rehearsal's small model, built offline in the hub layout (cpu-vllm)
    answers         the answer fingerprint's records in results.json
    workload_spec   a workload as data: arrivals, lengths, shared prefix, SLO (bench/workloads/)
    workload_points  a workload run's records in results.json: each point's figures
    settings        `BENCH_*` settings, built once in the CLI
    results         the schema of results.json
    launch_profile  launch profiles: how a server under test is started
    writes          the one atomic file writer (a unique temporary name, then rename)
    stats           every statistic, no third-party dependency
    run_files       the run directory's file names and its bounded reader
    command_line    the one runner of both command lines (bench, provision)
    stream          one streamed request, stamped and counted
    host            where a run happened: environment, GPUs, child processes
    card            published cards parsed into a reference
    cards           the shipped card
    engines         which engine serves, and its facts
    workload        a workload's schedule, its sending, a point's figures, the SLO rules
    live            live metrics while `bench run` measures: OTLP export, a Prometheus endpoint
    run             `bench run`: from a plan of cells to results.json
    bundle          manifest, signature, pack, verify, provenance, recipe
    publishers      InferenceX, vLLM's dashboard and MLPerf results as cards, their figures
    twin            the simulated vLLM server
    report          report.html and its plots
    verdict         reproduce, compare, bisect
    fleet           one sweep on several nodes: who stands out
    provenance      `bench provenance`
    local           `bench local`: the whole flow on the twin
    export          `bench export`: figures as tidy tables
    history         `bench history`: every verified bundle in a database, a trend per cell
    cli             the `bench` command
    __main__        `python -m bench`

`__version__` is git's: setuptools-scm's version of the checkout (pyproject.toml's
[tool.setuptools_scm]). Run from a git work tree, it is computed now from the checkout,
since an editable install's metadata is only as new as the last `pip install -e .`; anywhere
else (the images, a wheel) it is the installed metadata, which the build got the same way.
"""

from __future__ import annotations

import re
import tomllib
import warnings
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

UNKNOWN_VERSION = "0.0.0+unknown"
_ROOT = Path(__file__).resolve().parents[1]


def _checkout_version(root: Path = _ROOT) -> str | None:
    """setuptools-scm's version of the git work tree at ROOT, or None (not one, no tool)."""
    if not (root / ".git").exists() or not (root / "pyproject.toml").is_file():
        return None
    try:
        from setuptools_scm import get_version
    except ImportError:  # setuptools-scm is a dev dependency only
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. a shallow clone: still a version
        try:
            # The build's own settings: pyproject.toml's [tool.setuptools_scm].
            with (root / "pyproject.toml").open("rb") as f:
                settings = tomllib.load(f)["tool"]["setuptools_scm"]
            found: str = get_version(root=str(root), **settings)
        # No git, a tree git refuses (ownership), a setuptools-scm that changed its API: never
        # a reason for `import bench` to fail; the installed metadata instead.
        except Exception:  # noqa: BLE001
            return None
    return found


def _installed_version() -> str:
    try:
        return version("bench")
    except PackageNotFoundError:  # running from a source tree without an install
        return UNKNOWN_VERSION


def __getattr__(name: str) -> str:
    """`bench.__version__`, computed on first use: git costs ~0.1 s, and processes that import
    bench without asking its version (the twin, workers) need not pay it."""
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    found = _checkout_version() or _installed_version()
    globals()["__version__"] = found
    return found


def image_tag(text: str) -> str:
    """A version as a Docker tag: tags have no '+', so the local part follows a '-'."""
    return text.replace("+", "-")


def is_dirty(text: str) -> bool:
    """Was this version made from a dirty tree? setuptools-scm's mark: `.dYYYYMMDD` (or
    `+dYYYYMMDD` at a tag) in the local part, for tracked files changed since the commit."""
    local = text.partition("+")[2]
    return any(re.fullmatch(r"d\d{8}", part) for part in local.split("."))


def dirty_note(text: str, who: str = "The run") -> str | None:
    """One line for a verdict header when VERSION came from a dirty tree, else None."""
    if not is_dirty(text):
        return None
    return (
        f"{who} was made by bench {text}, from a dirty tree: tracked files had uncommitted "
        "changes, so no commit of bench is exactly the code that made it."
    )
