"""The one door to the history's database: SQLite through the standard library's sqlite3
(embedded, one file), or PostgreSQL through psycopg 3 (the optional `postgresql` extra).

Where (`locate`): `--db` when given, else the BENCH_HISTORY__URL setting, else
`results/history.sqlite3`. A `postgresql://` (or `postgres://`) URL is a server; anything
else is a SQLite file (`sqlite:///path` or a plain path). A PostgreSQL password is never
taken from the URL (it would sit in the shell's history, `ps` and the logs): libpq reads it
from PGPASSWORD or ~/.pgpass, and a URL that carries one is refused without repeating it.

The SQL of bench.history is written once, with `?` placeholders and portable types; a
PostgreSQL connection turns `?` into psycopg's `%s`. Every write is one transaction:
on SQLite `BEGIN IMMEDIATE` takes the file's write lock first and waits up to BUSY_S for
another writer (so two ingests at once queue instead of failing), on PostgreSQL the
server's own transactions and unique keys do it.

| failure | what the user sees (exit HISTORY) |
|---|---|
| SQLite file cannot be opened or is not a database | `history database PATH: <sqlite3's words>` |
| PostgreSQL refuses or is down | `history database URL: <libpq's first line>` (no password in it) |
| psycopg not installed | ToolMissing: `pip install 'bench[postgresql]'` |
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from bench.errors import HistoryError, ToolMissing, UsageError
from bench.settings import history_url_problem, without_password

Dialect = Literal["sqlite", "postgresql"]
DEFAULT_PATH = Path("results") / "history.sqlite3"
BUSY_S = 60.0  # how long a SQLite writer waits for another one
CONNECT_TIMEOUT_S = 10
_POSTGRES_SCHEMES = ("postgresql", "postgres")
Params = Sequence[Any]


@dataclass(frozen=True)
class Target:
    """Where the history is: a SQLite file, or a PostgreSQL URL (never with a password)."""

    dialect: Dialect
    where: str  # the file's path, or the URL

    def __str__(self) -> str:
        return self.where


def locate(given: str | None, setting: str | None) -> Target:
    """The history's database: `given` (--db), else `setting` (BENCH_HISTORY__URL), else the
    default SQLite file. UsageError for a PostgreSQL URL that carries a password."""
    text = given or setting
    if not text:
        return Target("sqlite", str(DEFAULT_PATH))
    scheme = text.partition("://")[0].lower() if "://" in text else ""
    if scheme in _POSTGRES_SCHEMES:
        problem = history_url_problem(text)
        if problem:
            raise UsageError(problem)
        return Target("postgresql", text)
    if scheme == "sqlite":
        return Target("sqlite", text[len("sqlite://") :])
    if scheme:
        raise UsageError(
            f"history database {without_password(text)}: not a postgresql:// URL or a file",
            hint="give postgresql://user@host/db or a SQLite file path",
        )
    return Target("sqlite", text)


class Connection:
    """One open database: `?` placeholders on both dialects, transactions as blocks."""

    def __init__(self, target: Target, raw: Any) -> None:
        self.target = target
        self._raw = raw

    @property
    def dialect(self) -> Dialect:
        return self.target.dialect

    def _sql(self, sql: str) -> str:
        return sql.replace("?", "%s") if self.dialect == "postgresql" else sql

    def execute(self, sql: str, params: Params = ()) -> int:
        """Run one statement; the number of rows it changed."""
        with self._errors():
            cursor = self._raw.execute(self._sql(sql), tuple(params))
            return int(cursor.rowcount)

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        if not rows:
            return
        with self._errors():
            if self.dialect == "sqlite":
                self._raw.executemany(sql, [tuple(r) for r in rows])
            else:
                with self._raw.cursor() as cursor:
                    cursor.executemany(self._sql(sql), [tuple(r) for r in rows])

    def query(self, sql: str, params: Params = ()) -> list[tuple[Any, ...]]:
        with self._errors():
            cursor = self._raw.execute(self._sql(sql), tuple(params))
            return [tuple(row) for row in cursor.fetchall()]

    @contextlib.contextmanager
    def transaction(self, *, lock_key: int | None = None) -> Iterator[None]:
        """One transaction: committed when the block ends, rolled back when it raises.
        SQLite takes the write lock at the start; `lock_key` also takes a PostgreSQL
        advisory lock for the transaction (schema upgrades: one process at a time)."""
        if self.dialect == "sqlite":
            self.execute("BEGIN IMMEDIATE")
            try:
                yield
            except BaseException:
                self._raw.execute("ROLLBACK")
                raise
            self.execute("COMMIT")
            return
        with self._errors(), self._raw.transaction():
            if lock_key is not None:
                self._raw.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key,))
            yield

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._raw.close()

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise HistoryError(f"history database {self.target}: {_first_line(exc)}") from None
        except Exception as exc:
            if _is_psycopg_error(exc):
                raise HistoryError(f"history database {self.target}: {_first_line(exc)}") from None
            raise


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _is_psycopg_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("psycopg")


@contextlib.contextmanager
def connect(target: Target) -> Iterator[Connection]:
    """The open database, closed when the block ends; HistoryError when it cannot be opened."""
    conn = _open_sqlite(target) if target.dialect == "sqlite" else _open_postgresql(target)
    try:
        yield conn
    finally:
        conn.close()


def _open_sqlite(target: Target) -> Connection:
    path = Path(target.where)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # isolation_level None: no implicit transactions; Connection.transaction says when.
        raw = sqlite3.connect(path, timeout=BUSY_S, isolation_level=None)
    except (sqlite3.Error, OSError) as exc:
        raise HistoryError(f"history database {target}: {_first_line(exc)}") from None
    conn = Connection(target, raw)
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_S * 1000)}")
    conn.query("PRAGMA journal_mode = WAL")  # readers do not wait for a writer
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _open_postgresql(target: Target) -> Connection:
    try:
        import psycopg
    except ImportError:
        raise ToolMissing(
            "psycopg is not installed; a PostgreSQL history needs it",
            hint="pip install 'bench[postgresql]'",
        ) from None
    try:
        raw = psycopg.connect(target.where, autocommit=True, connect_timeout=CONNECT_TIMEOUT_S)
    except psycopg.Error as exc:
        raise HistoryError(f"history database {target}: {_first_line(exc)}") from None
    return Connection(target, raw)
