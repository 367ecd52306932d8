"""The history's schema, one for SQLite and PostgreSQL, and its upgrades.

Versions (the `schema_version` table has one row per version applied, with when):
- 1: `runs` (one per bundle, keyed by its manifest's sha256: the run, its provenance and
  the settings that make two runs comparable), `cells` (each cell and trial with its
  status) and `figures` (each figure of a cell and trial, at server speed).
- 2: the views dashboards read (`series_per_cell`, `latest_per_cell`) and the index the
  trend of one cell reads through.
- 3: workload runs (`bench run --workload`, `bench capacity`): `workloads` (one per run of a
  workload: its name, hash, arrival kind, seed, the workload as run; a capacity search's
  SLO, method and capacity with its interval), and the views `series_per_point` and
  `latest_per_point`. The points themselves are rows of `cells` and `figures` (phase
  `workload`, context the point's label; phase `capacity`, one row per search), so the
  trend, the change points and the page read them as they read cells.
- 4: `change_points` (the changes `bench history changes` finds, one row per first run after
  a change of a series: bench.history.marks keeps it, every ingest searching its run's
  series again; the upgrade searches the whole history once) and the view `history_long`
  (bench.history.long_view: a row per run, cell, trial and figure, for Grafana); on
  PostgreSQL the function `bench_run_time` that gives the view its timestamp column.

An upgrade applies every missing version in order, in one transaction (PostgreSQL: under an
advisory lock, so that two processes opening an old database upgrade it once). A database
newer than this bench is refused rather than written with an older idea of its tables.
Types are the portable ones: TEXT, INTEGER, DOUBLE PRECISION (SQLite: REAL), booleans as 0/1,
times as ISO 8601 UTC text. A statement that differs by dialect is a `ByDialect` (the view's
time column: a PostgreSQL timestamp); one that a dialect lacks is None there.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bench.errors import HistoryError, UsageError
from bench.history import database, long_view, marks
from bench.history.database import Connection, Target

# pg_advisory_xact_lock key of the upgrade ("bench" in ASCII).
UPGRADE_LOCK = 0x62656E6368


@dataclass(frozen=True)
class ByDialect:
    """One statement written for each dialect (None: that dialect has no such statement)."""

    sqlite: str | None
    postgresql: str | None

    def of(self, dialect: database.Dialect) -> str | None:
        return self.sqlite if dialect == "sqlite" else self.postgresql


@dataclass(frozen=True)
class Version:
    number: int
    description: str
    statements: tuple[str | ByDialect, ...]
    # Rows the version's new tables hold for what is already recorded, written after its
    # statements in the upgrade's transaction.
    fill: Callable[[Connection], object] | None = None


_CELL_KEY = "manifest_sha256, phase, context, concurrency, trial"

V1 = Version(
    1,
    "runs, cells and figures",
    (
        """CREATE TABLE runs (
            manifest_sha256 TEXT PRIMARY KEY,
            run_id TEXT NOT NULL,
            created_at TEXT NOT NULL,
            ingested_at TEXT NOT NULL,
            trust TEXT NOT NULL,
            trust_detail TEXT NOT NULL,
            signer TEXT,
            signer_fingerprint TEXT,
            state TEXT NOT NULL,
            bench_version TEXT NOT NULL,
            bench_commit TEXT,
            bench_dirty INTEGER NOT NULL,
            image_id TEXT,
            engine TEXT,
            engine_version TEXT,
            engine_commit TEXT,
            model TEXT NOT NULL,
            weights_revision TEXT,
            launch_profile TEXT,
            launch_flags TEXT,
            launch_flags_sha256 TEXT,
            host TEXT,
            gpu_model TEXT,
            gpu_count INTEGER,
            driver_version TEXT,
            twin INTEGER NOT NULL,
            speed_factor DOUBLE PRECISION NOT NULL,
            settings_json TEXT NOT NULL,
            settings_sha256 TEXT NOT NULL
        )""",
        "CREATE INDEX runs_by_created ON runs (created_at)",
        f"""CREATE TABLE cells (
            manifest_sha256 TEXT NOT NULL
                REFERENCES runs (manifest_sha256) ON DELETE CASCADE,
            phase TEXT NOT NULL,
            context TEXT NOT NULL,
            prompt_tokens INTEGER,
            concurrency INTEGER NOT NULL,
            trial INTEGER NOT NULL,
            status TEXT NOT NULL,
            reason TEXT,
            flags TEXT,
            PRIMARY KEY ({_CELL_KEY})
        )""",
        f"""CREATE TABLE figures (
            manifest_sha256 TEXT NOT NULL,
            phase TEXT NOT NULL,
            context TEXT NOT NULL,
            concurrency INTEGER NOT NULL,
            trial INTEGER NOT NULL,
            figure TEXT NOT NULL,
            value DOUBLE PRECISION NOT NULL,
            unit TEXT NOT NULL,
            PRIMARY KEY ({_CELL_KEY}, figure),
            FOREIGN KEY ({_CELL_KEY}) REFERENCES cells ({_CELL_KEY}) ON DELETE CASCADE
        )""",
    ),
)

V2 = Version(
    2,
    "views series_per_cell and latest_per_cell; the trend's index",
    (
        "CREATE INDEX figures_by_cell ON figures (phase, context, concurrency, figure)",
        """CREATE VIEW series_per_cell AS
        SELECT r.created_at, r.run_id, r.manifest_sha256, r.trust, r.host, r.launch_profile,
               r.settings_sha256, r.bench_commit, r.image_id, r.engine_version,
               r.engine_commit, c.phase, c.context, c.concurrency, c.trial, c.status,
               f.figure, f.value, f.unit
        FROM runs r
        JOIN cells c ON c.manifest_sha256 = r.manifest_sha256
        LEFT JOIN figures f ON f.manifest_sha256 = c.manifest_sha256 AND f.phase = c.phase
            AND f.context = c.context AND f.concurrency = c.concurrency AND f.trial = c.trial""",
        """CREATE VIEW latest_per_cell AS
        SELECT s.* FROM series_per_cell s
        JOIN (SELECT phase, context, concurrency, COALESCE(host, '') AS host_key,
                     COALESCE(launch_profile, '') AS profile_key, MAX(created_at) AS latest
              FROM series_per_cell
              GROUP BY phase, context, concurrency, COALESCE(host, ''),
                       COALESCE(launch_profile, '')) m
        ON s.phase = m.phase AND s.context = m.context AND s.concurrency = m.concurrency
            AND COALESCE(s.host, '') = m.host_key
            AND COALESCE(s.launch_profile, '') = m.profile_key AND s.created_at = m.latest""",
    ),
)

V3 = Version(
    3,
    "workload runs: table workloads, views series_per_point and latest_per_point",
    (
        """CREATE TABLE workloads (
            manifest_sha256 TEXT PRIMARY KEY
                REFERENCES runs (manifest_sha256) ON DELETE CASCADE,
            name TEXT NOT NULL,
            sha256 TEXT NOT NULL,
            kind TEXT NOT NULL,
            seed BIGINT NOT NULL,
            source TEXT NOT NULL,
            workload_json TEXT NOT NULL,
            prompt_sizing TEXT NOT NULL,
            capacity_by TEXT,
            capacity_slo TEXT,
            capacity_method TEXT,
            capacity_estimate DOUBLE PRECISION,
            capacity_low DOUBLE PRECISION,
            capacity_high DOUBLE PRECISION,
            capacity_server_s DOUBLE PRECISION
        )""",
        "CREATE INDEX workloads_by_sha256 ON workloads (sha256)",
        """CREATE VIEW series_per_point AS
        SELECT s.*, w.name AS workload, w.sha256 AS workload_sha256, w.kind AS workload_kind,
               w.seed AS workload_seed
        FROM series_per_cell s
        JOIN workloads w ON w.manifest_sha256 = s.manifest_sha256
        WHERE s.phase IN ('workload', 'capacity')""",
        """CREATE VIEW latest_per_point AS
        SELECT s.* FROM series_per_point s
        JOIN (SELECT phase, context, concurrency, workload_sha256,
                     COALESCE(host, '') AS host_key,
                     COALESCE(launch_profile, '') AS profile_key, MAX(created_at) AS latest
              FROM series_per_point
              GROUP BY phase, context, concurrency, workload_sha256, COALESCE(host, ''),
                       COALESCE(launch_profile, '')) m
        ON s.phase = m.phase AND s.context = m.context AND s.concurrency = m.concurrency
            AND s.workload_sha256 = m.workload_sha256
            AND COALESCE(s.host, '') = m.host_key
            AND COALESCE(s.launch_profile, '') = m.profile_key AND s.created_at = m.latest""",
    ),
)

V4 = Version(
    4,
    "change_points; the long view history_long",
    (
        """CREATE TABLE change_points (
            manifest_sha256 TEXT NOT NULL
                REFERENCES runs (manifest_sha256) ON DELETE CASCADE,
            phase TEXT NOT NULL,
            context TEXT NOT NULL,
            concurrency INTEGER NOT NULL,
            figure TEXT NOT NULL,
            host TEXT,
            launch_profile TEXT,
            settings_sha256 TEXT NOT NULL,
            previous_manifest_sha256 TEXT NOT NULL,
            p_value DOUBLE PRECISION NOT NULL,
            shift_pct DOUBLE PRECISION NOT NULL,
            shift_low_pct DOUBLE PRECISION NOT NULL,
            shift_high_pct DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (manifest_sha256, phase, context, concurrency, figure)
        )""",
        "CREATE INDEX change_points_by_series ON change_points (phase, context, concurrency, "
        "figure)",
        ByDialect(None, long_view.RUN_TIME_FUNCTION),
        ByDialect(long_view.SQLITE_VIEW, long_view.POSTGRESQL_VIEW),
        ByDialect(None, long_view.POSTGRESQL_COMMENT),
    ),
    fill=marks.refresh_all,
)

VERSIONS: tuple[Version, ...] = (V1, V2, V3, V4)
LATEST = VERSIONS[-1].number


def current(conn: Connection) -> int:
    """The version the database is at (0: empty). Call inside a transaction to act on it."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER PRIMARY KEY, "
        "applied_at TEXT NOT NULL, description TEXT NOT NULL)"
    )
    rows = conn.query("SELECT MAX(version) FROM schema_version")
    return int(rows[0][0] or 0)


def upgrade(conn: Connection, *, to: int = LATEST) -> tuple[int, int]:
    """Bring the database to version `to` (tests stop at an older one): (from, to)."""
    with conn.transaction(lock_key=UPGRADE_LOCK):
        found = current(conn)
        if found > LATEST:
            raise HistoryError(
                f"history database {conn.target}: schema version {found} is newer than "
                f"this bench's ({LATEST})",
                hint="upgrade bench",
            )
        for version in VERSIONS:
            if found < version.number <= to:
                for statement in version.statements:
                    sql = statement if isinstance(statement, str) else statement.of(conn.dialect)
                    if sql is not None:
                        conn.execute(sql)
                if version.fill is not None:
                    version.fill(conn)
                conn.execute(
                    "INSERT INTO schema_version (version, applied_at, description) "
                    "VALUES (?, ?, ?)",
                    (version.number, datetime.now(UTC).isoformat(), version.description),
                )
    return found, max(found, to)


@contextlib.contextmanager
def opened(target: Target, *, create: bool = True) -> Iterator[Connection]:
    """The history at `target`, upgraded to LATEST; without `create`, a SQLite file that is
    not there is a UsageError rather than a new empty history."""
    if target.dialect == "sqlite" and not create and not Path(target.where).is_file():
        raise UsageError(
            f"no history at {target}", hint="record bundles first: bench history ingest BUNDLE"
        )
    with database.connect(target) as conn:
        upgrade(conn)
        yield conn
