"""A host's run-to-run noise from the history, before a compare: its repeated runs of one
build as bench.verdict.noise_prior estimates them (`bench compare --noise-from`, and
`provision compare`'s).

Which runs (`prior`): the latest LIMIT runs of one host and one launch profile (60 by
default, read so: the database returns no more), oldest first, less the runs being compared
(`exclude`: their manifests' sha256, whole or the 16-digit prefix a verdict's identities
carry; `exclude_run_ids`: inputs that have no manifest), grouped into builds: one settings
hash, one engine commit, one image (a run that records no commit or no image shares that
part of its key with the others that record none). A build run twice or more measured the
run-to-run noise; a build run once says nothing of it and is left out.

What the prior says of itself (its `source`, printed with the verdict): the history as the
user gave it (never with a password: database.locate refuses a URL with one), the host, the
profile, the dates of the repeated runs read, and how many of them were recorded unverified.

| what happened                          | what the user sees (`from_history`)          |
|----------------------------------------|----------------------------------------------|
| no history file there                  | UsageError `no history at PATH` (schema)     |
| too few repeated runs (run df under    | UsageError: how many runs of one build the   |
| noise_prior.MIN_RUN_DF), or copies of  | host needs, and how to record them           |
| one run's figures (no spread at all)   |                                              |
| database down, refusing                | HistoryError (exit HISTORY)                  |
"""

from __future__ import annotations

from collections.abc import Sequence

from bench import escape
from bench.errors import UsageError
from bench.history import runs, schema
from bench.history.database import Connection, Target
from bench.history.runs import Run
from bench.verdict import noise_prior
from bench.verdict.cells import RunFigures
from bench.verdict.noise_prior import NoisePrior
from bench.verdict.runlevel import MIN_CELLS

LIMIT = 60  # the latest runs of one host and profile read for a prior
MIN_PREFIX = 8  # hex digits of a manifest sha256 that name one (as --baseline takes them)
Build = tuple[str, str | None, str | None]  # settings sha256, engine commit, image id
# How a verdict's inputs name their manifest and run (RunFigures.identities).
MANIFEST_IDENTITY = "manifest sha256 "
RUN_ID_IDENTITY = "run id "


def build_of(run: Run) -> Build:
    """RUN's build: its settings hash, engine commit and image."""

    def text(value: object) -> str | None:
        return None if value in (None, "") else str(value)

    return (run.settings_sha256, text(run.row["engine_commit"]), text(run.row["image_id"]))


def _excluded(run: Run, exclude: frozenset[str], run_ids: frozenset[str]) -> bool:
    sha = run.manifest_sha256.lower()
    wanted = (e.lower() for e in exclude if len(e) >= MIN_PREFIX)
    return run.run_id in run_ids or any(sha.startswith(e) for e in wanted)


def repeated(
    latest: Sequence[Run],
    *,
    exclude: frozenset[str] = frozenset(),
    exclude_run_ids: frozenset[str] = frozenset(),
) -> list[list[Run]]:
    """LATEST less the runs excluded, grouped into builds; the builds run twice or more,
    each oldest first, in the order of their first run."""
    builds: dict[Build, list[Run]] = {}
    for run in latest:
        if not _excluded(run, exclude, exclude_run_ids):
            builds.setdefault(build_of(run), []).append(run)
    return [group for group in builds.values() if len(group) >= 2]


def _clipped(*texts: str) -> list[str]:
    """A host's or profile's name as shown: from a bundle's files or the command line, cut
    as the history's own strings are (the history as given is shown whole: it is a path or
    URL the user typed)."""
    return [escape.clipped(x, runs.MAX_TEXT) for x in texts]


def _source(where: str, host: str, profile: str, used: Sequence[Run]) -> str:
    dates = sorted(escape.clipped(r.created_at, 40)[:10] for r in used)
    span = dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}"
    unverified = sum(1 for r in used if r.row["trust"] != "signed")
    shown = [escape.terminal(where), *_clipped(host, profile)]
    said = f"history {shown[0]}, host {shown[1]}, profile {shown[2]}, runs of {span}"
    return said + (f", {unverified} of them unverified" if unverified else "")


def prior(
    conn: Connection,
    target_description: str,
    *,
    host: str,
    profile: str,
    exclude: frozenset[str] = frozenset(),
    exclude_run_ids: frozenset[str] = frozenset(),
    limit: int = LIMIT,
) -> NoisePrior | None:
    """The noise prior of HOST's runs of PROFILE in the history at CONN (named
    TARGET_DESCRIPTION in what the prior says): the latest LIMIT of them, less those
    excluded; None when their repeated builds hold fewer than noise_prior.MIN_RUN_DF degrees
    of freedom for a run's level, or show no spread at all (copies of one run's figures
    measure no noise: a prior of zero would make every difference a change)."""
    if limit < 1:
        raise ValueError(f"limit must be at least 1, got {limit}")
    latest = runs.all_runs(conn, host=host, profile=profile, limit=limit)
    groups = repeated(latest, exclude=exclude, exclude_run_ids=exclude_run_ids)
    if sum(len(g) - 1 for g in groups) < noise_prior.MIN_RUN_DF:
        return None  # not enough to estimate, whatever the figures: none read
    used = [r for g in groups for r in g]
    builds = [[runs.figures(conn, r) for r in g] for g in groups]
    found = noise_prior.estimate(builds, _source(target_description, host, profile, used))
    if found is None or found.run_sd_log <= 0 or not found.figures:
        return None
    return found


def needs() -> str:
    """What a host needs recorded for a prior, in words."""
    df = noise_prior.MIN_RUN_DF
    return (
        f"2 runs or more of each of at least {df} builds, or {df + 1} runs of one build (a "
        "build: one engine commit, image and settings), sharing "
        f"{MIN_CELLS} valid cells or more (not copies of one run's figures)"
    )


def exclusions(compared: Sequence[RunFigures]) -> tuple[frozenset[str], frozenset[str]]:
    """`prior`'s exclude and exclude_run_ids for the runs COMPARED: each one's manifest
    sha256 (the 16-digit prefix its identities carry), and the run id of each that has no
    manifest (a run directory not sealed: its bundle, recorded, has the same run id). A run
    id alone is not used where a manifest is known: ids repeat across compares
    (`--run-id`), a manifest never."""
    manifests, run_ids = set[str](), set[str]()
    for run in compared:
        found = {i.removeprefix(MANIFEST_IDENTITY) for i in run.identities
                 if i.startswith(MANIFEST_IDENTITY)}  # fmt: skip
        manifests |= found
        if not found:
            run_ids |= {i.removeprefix(RUN_ID_IDENTITY) for i in run.identities
                        if i.startswith(RUN_ID_IDENTITY)}  # fmt: skip
    return frozenset(manifests), frozenset(run_ids)


def from_history(
    target: Target,
    *,
    host: str,
    profile: str,
    compared: Sequence[RunFigures] = (),
    limit: int = LIMIT,
) -> NoisePrior:
    """`prior` from the history at TARGET, read once, the runs COMPARED left out; a
    UsageError saying what the host needs, and how to record it, when the history holds
    too few repeated runs."""
    exclude, run_ids = exclusions(compared)
    with schema.opened(target, create=False) as conn:
        found = prior(
            conn, str(target), host=host, profile=profile, exclude=exclude,
            exclude_run_ids=run_ids, limit=limit,
        )  # fmt: skip
    if found is not None:
        return found
    shown = [escape.terminal(str(target)), *_clipped(host, profile)]
    raise UsageError(
        f"--noise-from {shown[0]}: too few repeated runs of host {shown[1]}, profile "
        f"{shown[2]} for a noise prior (the latest {limit} read); it needs {needs()}",
        hint=f"record them with `bench history ingest BUNDLE... --db {shown[0]}`, or run "
        f"them with --history {shown[0]}",
    )
