"""Rows to a file: CSV (header, empty field for a missing value), JSON lines (null for
one), or Parquet (a typed column per field, null for one) through pyarrow, the optional
`export` extra; without it the command is one line naming
`.venv/bin/pip install -e '.[export]'` (`bench` on PyPI is another project).

Files are written beside their final name and renamed into place, so a failed export
leaves no half file behind.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from bench import escape, writes
from bench.errors import ToolMissing

Format = Literal["csv", "parquet", "jsonl"]
Kind = Literal["float", "int", "bool", "str"]  # a Parquet column's declared type
FORMATS: tuple[Format, ...] = ("csv", "parquet", "jsonl")
EXTENSIONS: dict[Format, str] = {"csv": ".csv", "parquet": ".parquet", "jsonl": ".jsonl"}
Row = dict[str, Any]


def _csv(rows: Sequence[Row], columns: Sequence[str], path: Path) -> None:
    with path.open("w", encoding="utf-8", newline="") as f:
        out = csv.DictWriter(f, fieldnames=list(columns), lineterminator="\n")
        out.writeheader()
        for row in rows:
            # A server's text (its version, a reason) is never a formula (issue 29, M2).
            out.writerow(
                {k: ("" if row.get(k) is None else escape.csv_cell(row.get(k))) for k in columns}
            )


def _jsonl(rows: Sequence[Row], columns: Sequence[str], path: Path) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({k: row.get(k) for k in columns}, allow_nan=False) + "\n")


def _arrow_type(pa: Any, values: list[Any], kind: Kind | None = None) -> Any:
    """The column's declared type, else the one its values share (text when none)."""
    if kind is not None:
        return {"float": pa.float64(), "int": pa.int64(), "bool": pa.bool_(),
                "str": pa.string()}[kind]  # fmt: skip
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, bool) for v in present):
        return pa.bool_()
    if present and all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return pa.int64()
    if present and all(isinstance(v, int | float) and not isinstance(v, bool) for v in present):
        return pa.float64()
    return pa.string()


def _parquet(
    rows: Sequence[Row], columns: Sequence[str], path: Path, kinds: Mapping[str, Kind]
) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ToolMissing(
            "pyarrow is not installed; Parquet export needs it",
            hint="in this checkout: .venv/bin/pip install -e '.[export]'",
        ) from None
    fields, arrays = [], []
    for name in columns:
        values = [row.get(name) for row in rows]
        kind = _arrow_type(pa, values, kinds.get(name))
        if kind == pa.float64():
            values = [None if v is None else float(v) for v in values]
        fields.append(pa.field(name, kind))
        arrays.append(pa.array(values, type=kind))
    pq.write_table(pa.Table.from_arrays(arrays, schema=pa.schema(fields)), str(path))


def write(
    rows: Sequence[Row],
    columns: Sequence[str],
    path: Path,
    fmt: Format,
    kinds: Mapping[str, Kind] | None = None,
) -> Path:
    """`rows` to `path`; `kinds` fixes Parquet columns' types (a column of a run where every
    value is missing keeps its type), others take the type their values share."""
    with writes.atomic_path(path) as partial:
        if fmt == "parquet":
            _parquet(rows, columns, partial, kinds or {})
        else:
            {"csv": _csv, "jsonl": _jsonl}[fmt](rows, columns, partial)
    return path
