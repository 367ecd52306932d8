"""`bench history ingest`: verified bundles into the history, once each.

A bundle is checked exactly as `bench compare` checks it (bench.verdict.run_source: the
signature by an allowed signer, every file's hash, the results schema); one that does not
verify is refused (VerifyFailed, exit 5) unless `--unverified`, which records it with trust
`unverified` and the reason. A run directory without a manifest is no bundle and is refused.

Idempotent: a run is keyed by its manifest's sha256, and its rows are written in one
transaction that starts by inserting the run with ON CONFLICT DO NOTHING; when that inserts
nothing the bundle is already there and nothing else is written, but for a workload run
recorded before the history kept workload points (schema 3): its `workloads` row is
inserted the same way and, when that is new, its points with it ("workload points
recorded"). Two ingests at once are
two transactions: on SQLite the second waits for the file's write lock (busy time-out), on
PostgreSQL for the first's key; either way the run is recorded once.

A bundle's ingest (`ingest`: `bench history ingest`, the recording as runs finish) also
searches again, in the same transaction, every series the new run (or its newly recorded
points) is in for change points and replaces their rows of `change_points`
(bench.history.marks), so that `history_long` marks the changes `bench history changes`
would print; `write` alone does so with `search` (a database still at an older version has
no such table: its upgrade to 4 searches the whole history).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from bench import run_files
from bench.bundle import recipe as recipe_mod
from bench.bundle.manifest import MANIFEST_NAME
from bench.errors import UsageError, VerifyFailed
from bench.history import marks, rows, schema, workload_rows
from bench.history.database import Connection
from bench.verdict import run_source

Outcome = Literal["recorded", "already recorded", "workload points recorded"]


@dataclass(frozen=True)
class Ingested:
    path: Path
    run_id: str
    manifest_sha256: str
    trust: str
    outcome: Outcome


def bundle_paths(paths: Iterable[Path]) -> Iterator[Path]:
    """Each BUNDLE as given; a DIR that is not itself a bundle or a run directory stands for
    the bundles in it (*.tar.gz, and folders holding a manifest), in name order."""
    for path in paths:
        is_run = (path / MANIFEST_NAME).is_file() or (path / run_files.RESULTS).is_file()
        if not path.is_dir() or is_run:
            yield path
            continue
        found = sorted(
            [p for p in path.glob("*.tar.gz") if p.is_file()]
            + [p.parent for p in path.glob(f"*/{MANIFEST_NAME}")]
        )
        if not found:
            raise UsageError(
                f"{path}: no bundle in it (no *.tar.gz, no folder with {MANIFEST_NAME})",
                hint="give the bundles `bench run` and `bench pack` wrote",
            )
        yield from found


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_bundle(path: Path, how: run_source.Verification, *, now: datetime) -> rows.Record:
    """The rows of the bundle at `path`, after it verified (or `how.unverified`)."""
    with run_source.opened(path) as directory:
        trust, detail, signer = run_source.check_signer(directory, path, how)
        if not (directory / MANIFEST_NAME).is_file():  # a run directory; or --unverified
            raise UsageError(
                f"{path}: not a bundle ({MANIFEST_NAME} missing): the history records "
                "bundles, keyed by their manifest",
                hint="seal it first with `bench sign`",
            )
        results = run_files.load_results(directory)
        env = run_source.read_environment(directory)
        try:
            recipe: recipe_mod.Recipe | None = recipe_mod.read(directory)
        except VerifyFailed:  # older bundles have none; the profile is then not recorded
            recipe = None
        checked = rows.Trust(
            trust,
            detail,
            signer.principal if signer else None,
            signer.fingerprint if signer else None,
        )
        return rows.record(
            rows.Bundle(
                results,
                env,
                recipe,
                manifest_sha256=_sha256(directory / MANIFEST_NAME),
                trust=checked,
                ingested_at=now.isoformat(),
            )
        )


def _insert(table: str, columns: tuple[str, ...], tail: str = "") -> str:
    # The names are this module's constants; every value travels as a parameter.
    marks = ", ".join("?" for _ in columns)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks}){tail}"  # noqa: S608


INSERT_RUN = _insert("runs", rows.RUN_COLUMNS, " ON CONFLICT (manifest_sha256) DO NOTHING")
INSERT_CELL = _insert("cells", rows.CELL_COLUMNS)
INSERT_FIGURE = _insert("figures", rows.FIGURE_COLUMNS)
INSERT_WORKLOAD = _insert(
    "workloads", workload_rows.WORKLOAD_COLUMNS, " ON CONFLICT (manifest_sha256) DO NOTHING"
)


def _rows(conn: Connection, record: rows.Record) -> None:
    if record.workload is not None:
        conn.execute(INSERT_WORKLOAD, record.workload)
    conn.executemany(INSERT_CELL, record.cells)
    conn.executemany(INSERT_FIGURE, record.figures)


def _marks(conn: Connection, record: rows.Record, search: bool) -> None:
    if search and schema.current(conn) >= schema.V4.number:
        marks.refresh(conn, record)


def write(conn: Connection, record: rows.Record, *, search: bool = False) -> Outcome:
    """The record's rows in one transaction, unless its run is there already (a workload
    run recorded without its points gets them); with SEARCH, its series' change points
    searched again in it."""
    with conn.transaction():
        inserted = conn.execute(INSERT_RUN, [record.run[c] for c in rows.RUN_COLUMNS])
        if inserted:
            _rows(conn, record)
            _marks(conn, record, search)
            return "recorded"
        if record.workload is None or conn.execute(INSERT_WORKLOAD, record.workload) == 0:
            return "already recorded"
        points = record.of_workload()
        conn.executemany(INSERT_CELL, points.cells)
        conn.executemany(INSERT_FIGURE, points.figures)
        _marks(conn, points, search)
    return "workload points recorded"


def ingest(
    conn: Connection, path: Path, how: run_source.Verification, *, now: datetime | None = None
) -> Ingested:
    record = read_bundle(path, how, now=now or datetime.now(UTC))
    outcome = write(conn, record, search=True)
    run = record.run
    return Ingested(path, run["run_id"], run["manifest_sha256"], run["trust"], outcome)
