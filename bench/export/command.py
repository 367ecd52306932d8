"""`bench export DIR|BUNDLE --format csv|parquet|jsonl [--out PATH] [--requests]`.

Writes the run's figures (bench.export.rows) to PATH (default `<run id>.<format>` here);
for a workload run (`bench run --workload`) also its points (bench.export.points) to the
same name with `.points` before the extension; with --requests, its requests to the same
name with `.requests` before it.
A bundle is verified first, as `bench compare` verifies it (--allowed-signers, or
--unverified to read it anyway); a run directory is read as it is.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench import run_files
from bench.errors import UsageError
from bench.export import points, rows, writers
from bench.settings import Settings
from bench.verdict import run_source


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "export", help="a run's figures (its points, requests) as CSV, Parquet or JSON lines"
    )
    p.add_argument("source", type=Path, metavar="DIR|BUNDLE",
                   help="run directory, bundle .tar.gz or results.json")  # fmt: skip
    p.add_argument("--format", choices=writers.FORMATS, default="csv", dest="fmt")
    p.add_argument(
        "--out",
        type=Path,
        metavar="PATH",
        help="the figures' file (default: <run id>.<format> in this directory)",
    )
    p.add_argument(
        "--requests",
        action="store_true",
        help="also one row per request, to PATH with .requests before the extension (a "
        "workload run's points always go to PATH with .points before it)",
    )
    run_source.add_verification_args(p, "the bundle")
    p.set_defaults(func=_export)


def beside(out: Path, fmt: writers.Format, part: str) -> Path:
    """The file of `part` ("requests", "points") beside the figures' file `out`."""
    ext = writers.EXTENSIONS[fmt]
    stem = out.name.removesuffix(ext)
    return out.with_name(f"{stem}.{part}{ext}")


def requests_path(out: Path, fmt: writers.Format) -> Path:
    return beside(out, fmt, "requests")


def export(
    source: Path,
    fmt: writers.Format,
    out: Path | None,
    *,
    with_requests: bool,
    how: run_source.Verification,
) -> list[Path]:
    with run_source.opened(source) as directory:
        shown = directory if source.is_file() and source.name.endswith(".json") else source
        run_source.check(directory, shown, how)
        results = run_files.load_results(directory)
        env = run_source.read_environment(directory)
        figures = rows.figure_rows(results, env)
        workload = points.point_rows(results, env) if results.workload is not None else None
        requests = rows.request_rows(results, directory) if with_requests else None
    if requests is not None and not requests:
        raise UsageError(
            f"{source}: has no {rows.SAMPLES_NAME}: no requests to export",
            hint="leave out --requests",
        )
    target = out or Path(f"{results.run_id}{writers.EXTENSIONS[fmt]}")
    if target.is_dir():
        raise UsageError(f"--out {target}: is a directory", hint="give a file name")
    written = [writers.write(figures, rows.FIGURE_COLUMNS, target, fmt)]
    if workload is not None:
        where = beside(target, fmt, "points")
        written.append(
            writers.write(workload, points.POINT_COLUMNS, where, fmt, points.POINT_KINDS)
        )
    if requests is not None:
        second = requests_path(target, fmt)
        written.append(writers.write(requests, rows.REQUEST_COLUMNS, second, fmt))
    return written


def _export(args: argparse.Namespace, settings: Settings) -> int:
    how = run_source.Verification(tuple(args.allowed_signers), bool(args.unverified))
    for path in export(args.source, args.fmt, args.out, with_requests=args.requests, how=how):
        print(path)
    return 0
