"""Each verified bundle into the history as its run finishes, for every flow that makes one:
`bench local` (`make bench` without HOST), and the orchestrator's bundles pulled back from a
host (`make bench HOST=..`, `make compare-*`, `make bisect`) or collected from a Slurm job.

Only when a history is configured (`choice`): `--history URL|FILE` on the command, else
the BENCH_HISTORY__URL setting; `--no-history` turns both off for one run. Without either
nothing is recorded and nothing is said (docs/history.md says why).

The run's own outcome never depends on the history: `record` says in one line (stderr) what
became of the bundle and never raises for the database. The bundle stays where the run put
it, so a bundle not recorded is recorded later by the command the line ends with.

| what happened                                  | the line                                    |
|------------------------------------------------|---------------------------------------------|
| recorded                                       | `history: run RUN recorded in TARGET`       |
| the same bundle was recorded before            | `history: run RUN already recorded in TARGET` |
| database down, refusing, not writable, newer   | `history: BUNDLE not recorded in TARGET     |
| than this bench; psycopg missing; the bundle   | (REASON); the bundle is kept: record it     |
| unreadable                                     | later with: bench history ingest BUNDLE     |
|                                                | --db TARGET --allowed-signers FILE`         |

No password is ever in the line: TARGET never holds one (`database.locate` refuses a URL
with one), and a reason that would quote PGPASSWORD's value shows it as ********.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal, TextIO

from bench import escape
from bench.command_line import bench_program
from bench.errors import BenchError
from bench.history import database, ingest, schema
from bench.history.database import Connection, Target
from bench.verdict.run_source import Verification

Outcome = Literal["recorded", "already recorded", "workload points recorded", "not recorded"]
Ingest = Callable[[Connection, Path, Verification], ingest.Ingested]


def add_args(p: argparse.ArgumentParser) -> None:
    """--history and --no-history, for the commands whose runs are recorded."""
    p.add_argument(
        "--history",
        metavar="URL|FILE",
        help="record each verified bundle in this history: postgresql://user@host/db "
        "(password from PGPASSWORD or ~/.pgpass) or a SQLite file; default "
        "BENCH_HISTORY__URL, else none (nothing recorded)",
    )
    p.add_argument(
        "--no-history",
        action="store_true",
        help="record nothing, even with BENCH_HISTORY__URL set",
    )


def choice(given: str | None, setting: str | None, *, off: bool = False) -> Target | None:
    """The history a run records in: `given` (--history), else `setting`
    (BENCH_HISTORY__URL); None when neither is set or `off` (--no-history). A URL with a
    password is a UsageError here, before anything runs."""
    if off or not (given or setting):
        return None
    return database.locate(given, setting)


def later_command(bundle: Path, target: Target, allowed_signers: Path) -> str:
    """The command that records `bundle` in `target` later, as a shell takes it, from any
    folder (paths made absolute)."""
    where = str(Path(target.where).resolve()) if target.dialect == "sqlite" else target.where
    words = [str(bundle.resolve()), "--db", where, "--allowed-signers",
             str(allowed_signers.resolve())]  # fmt: skip
    return f"{bench_program()} history ingest {shlex.join(words)}"


def _masked(line: str, environ: Mapping[str, str]) -> str:
    password = environ.get("PGPASSWORD", "")
    return line.replace(password, "********") if password else line


def record(
    target: Target | None,
    bundle: Path,
    allowed_signers: Path,
    *,
    out: TextIO | None = None,
    environ: Mapping[str, str] = os.environ,
    ingest_one: Ingest = ingest.ingest,
) -> Outcome | None:
    """`bundle` (verified by the flow against `allowed_signers`) into the history at `target`,
    one line on `out` (default stderr) saying how that went; None when no history is
    configured. Never raises for the database or the bundle: the run's exit code is its own."""
    if target is None:
        return None
    stream = out if out is not None else sys.stderr
    how = Verification((allowed_signers,))
    try:
        with schema.opened(target) as conn:
            done = ingest_one(conn, bundle, how)
    except (BenchError, OSError) as exc:
        reason = exc.one_line() if isinstance(exc, BenchError) else f"{bundle}: {exc}"
        reason = reason.removeprefix(f"history database {target}: ")  # named once
        line = (
            f"history: {bundle} not recorded in {target} ({reason}); the bundle is kept: "
            f"record it later with: {later_command(bundle, target, allowed_signers)}"
        )
        # One line whatever the reason quotes (libpq's words): control characters escaped.
        print(escape.terminal(_masked(line, environ)), file=stream, flush=True)
        return "not recorded"
    line = f"history: run {done.run_id} {done.outcome} in {target}"
    print(escape.terminal(line), file=stream, flush=True)  # the run id is the bundle's
    return done.outcome
