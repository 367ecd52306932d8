"""`bench history ingest BUNDLE|DIR... [--db URL] [--unverified]` and
`bench history trend --cell 8K:64 [--figure total_tok_s] [--host H] [--profile P] [--db URL]`
and `bench history changes [--cell 8K:64] [--figure F] [--host H] [--profile P] [--db URL]`
(a workload's point is a cell too: `--cell 4/s`, `closed:8`, `trace`, `capacity`)
and `bench history report --html OUT [--figure F] [--host H] [--profile P] [--baseline RUN]
[--db URL]`.

The database is `--db` (a SQLite file, or a postgresql:// URL without a password), else
BENCH_HISTORY__URL, else results/history.sqlite3 (bench.history.database).
"""

from __future__ import annotations

import argparse
from datetime import UTC, datetime
from pathlib import Path

from bench import writes
from bench.errors import BenchError
from bench.history import database, ingest, page, schema, shifts, trend
from bench.settings import Settings
from bench.verdict import run_source


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "history", help="the results history: record bundles, a cell's trend, change points"
    )
    words = p.add_subparsers(dest="history_command", metavar="ACTION", required=True)

    def db_arg(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--db",
            metavar="URL|FILE",
            help="postgresql://user@host/db (password from PGPASSWORD or ~/.pgpass) or a "
            f"SQLite file; default BENCH_HISTORY__URL, else {database.DEFAULT_PATH}",
        )

    q = words.add_parser("ingest", help="record verified bundles (each once)")
    q.add_argument("paths", type=Path, nargs="+", metavar="BUNDLE|DIR",
                   help="bundles (.tar.gz or folders), or folders of them")  # fmt: skip
    db_arg(q)
    run_source.add_verification_args(q)
    q.set_defaults(func=_ingest)

    t = words.add_parser("trend", help="one cell's figure, run after run")
    t.add_argument("--cell", required=True, metavar="CTX:C|POINT",
                   help="8K:64, or 8K:prefill; a workload's point: 4/s, inf/s, closed:8, "
                   "trace; or capacity")  # fmt: skip
    t.add_argument("--figure", help="default total_tok_s (prefill_tok_s of a prefill sample, "
                   "output_tok_s of a workload's point, capacity)")  # fmt: skip
    t.add_argument("--host", help="only runs on this host")
    t.add_argument("--profile", help="only runs of this launch profile (twin:NAME on a twin)")
    db_arg(t)
    t.set_defaults(func=_trend)

    c = words.add_parser("changes", help="change points in every series, with the make bisect")
    c.add_argument("--cell", metavar="CTX:C|POINT",
                   help="only this cell (8K:64, or 8K:prefill; a workload's point 4/s, "
                   "closed:8, trace; or capacity)")  # fmt: skip
    c.add_argument("--figure", help="only this figure (default: the ones a verdict is about)")
    c.add_argument("--host", help="only runs on this host")
    c.add_argument("--profile", help="only runs of this launch profile (twin:NAME on a twin)")
    db_arg(c)
    c.set_defaults(func=_changes)

    r = words.add_parser(
        "report", help="one HTML page: every cell's trend, changes, the latest run"
    )
    r.add_argument("--html", required=True, type=Path, metavar="OUT", help="the page to write")
    r.add_argument("--figure", default="total_tok_s", help="default total_tok_s (a workload's: "
                   "output_tok_s, ttft_p99_s, ...; capacity)")  # fmt: skip
    r.add_argument("--host", help="only runs on this host")
    r.add_argument("--profile", help="only runs of this launch profile (twin:NAME on a twin)")
    r.add_argument(
        "--baseline", metavar="RUN",
        help="compare the latest run with this run (run id or manifest sha256); default: "
        "the latest run of each host and profile with the run before it in its series",
    )  # fmt: skip
    db_arg(r)
    r.set_defaults(func=_report)


def _ingest(args: argparse.Namespace, settings: Settings) -> int:
    target = database.locate(args.db, settings.history.url)
    how = run_source.Verification(tuple(args.allowed_signers), bool(args.unverified))
    paths = list(ingest.bundle_paths(args.paths))
    failed: list[BenchError] = []
    now = datetime.now(UTC)
    with schema.opened(target) as conn:
        for path in paths:
            try:
                done = ingest.ingest(conn, path, how, now=now)
            except BenchError as exc:
                if len(paths) == 1:
                    raise
                print(f"{path}: not recorded: {exc.one_line()}")
                failed.append(exc)
                continue
            mark = " (UNVERIFIED)" if done.trust != "signed" else ""
            print(f"{path}: {done.outcome}{mark}, run {done.run_id} in {target}")
    if failed:
        first = failed[0]
        raise type(first)(
            f"{len(failed)} of {len(paths)} bundles not recorded; the first: {first.message}",
            hint=first.hint,
        )
    return 0


def _trend(args: argparse.Namespace, settings: Settings) -> int:
    cell = trend.parse_cell(args.cell)
    figure = trend.check_figure(cell, args.figure or trend.default_figure(cell))
    target = database.locate(args.db, settings.history.url)
    with schema.opened(target, create=False) as conn:
        found = trend.points(conn, cell, figure, host=args.host, profile=args.profile)
    print(trend.render(cell, figure, trend.series(found), show_host=args.host is None))
    return 0


def _changes(args: argparse.Namespace, settings: Settings) -> int:
    cell = trend.parse_cell(args.cell) if args.cell else None
    if cell is not None and args.figure is not None:
        trend.check_figure(cell, args.figure)
    shifts.check_figure(args.figure)
    target = database.locate(args.db, settings.history.url)
    with schema.opened(target, create=False) as conn:
        found = shifts.find(
            conn, cell=cell, figure=args.figure, host=args.host, profile=args.profile
        )
    print(shifts.render(found))
    return 0


def _report(args: argparse.Namespace, settings: Settings) -> int:
    shifts.check_figure(args.figure)
    target = database.locate(args.db, settings.history.url)
    with schema.opened(target, create=False) as conn:
        text = page.report(
            conn, args.figure, where=str(target), host=args.host, profile=args.profile,
            baseline=args.baseline,
        )  # fmt: skip
    writes.write_atomic(args.html, text)
    print(f"{args.html}: {len(text.encode()):,} bytes, the history of {target}")
    return 0
