"""Another tool's saved result files found in a folder, bounded (`bench.verdict.aiperf_saved`,
`bench.verdict.guidellm_saved`): at most MAX_DEPTH folders down, MAX_ENTRIES entries looked
at and MAX_FILES files kept, each a one-line UsageError past its bound; the words a one-line
error gives a field of one that is not what the tool writes (`short`, `as_object`); and the
cells read from such files as one unsigned run (`unsigned_run`: `bench.verdict.vllm_saved`'s,
and `bench.verdict.saved_points`' for AIPerf's and GuideLLM's)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from bench.errors import UsageError
from bench.verdict.cells import Cell, Key, RunFigures, context_order

MAX_FILES = 256  # files of the tool's in one folder
MAX_DEPTH = 4  # folders below the one given
MAX_ENTRIES = 20_000  # directory entries looked at while searching a folder


def json_head(path: Path, head_bytes: int) -> str | None:
    """The first HEAD_BYTES of a .json file other than bench's results.json, as text (bad
    bytes replaced); None for any other file or one that cannot be read."""
    if path.suffix != ".json" or path.name == "results.json":
        return None
    try:
        if not path.is_file():
            return None
        with path.open("rb") as f:
            return f.read(head_bytes).decode("utf-8", errors="replace")
    except OSError:
        return None


def found(path: Path, looks: Callable[[Path], bool], what: str) -> list[Path]:
    """The files in folder PATH that LOOKS takes for WHAT ("AIPerf exports"), sorted."""
    out: list[Path] = []
    seen = 0
    for root, dirs, files in os.walk(path):
        depth = len(Path(root).relative_to(path).parts)
        seen += len(dirs) + len(files)
        if seen > MAX_ENTRIES:
            raise UsageError(f"{path}: over {MAX_ENTRIES} entries to search for {what}")
        if depth >= MAX_DEPTH:
            dirs.clear()
        dirs.sort()
        out.extend(Path(root) / n for n in sorted(files) if looks(Path(root) / n))
        if len(out) > MAX_FILES:
            raise UsageError(f"{path}: over {MAX_FILES} {what} in one folder")
    return sorted(out)


def files(path: Path, looks: Callable[[Path], bool], what: str) -> list[Path]:
    """The files PATH stands for: itself, or the ones `found` in it when it is a folder."""
    try:
        if path.is_dir():
            return found(path, looks, what)
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    return [path]


def recognises(path: Path, looks: Callable[[Path], bool], what: str) -> bool:
    """PATH is a file LOOKS takes, or a folder of such files without results.json."""
    try:
        if path.is_dir():
            if (path / "results.json").exists():
                return False
            return bool(found(path, looks, what))
    except (OSError, UsageError):
        return False
    return looks(path)


def short(value: Any) -> str:
    """VALUE as a one-line error shows it: its repr, cut to 60 characters."""
    try:
        text = repr(value)
    except RecursionError:
        text = type(value).__name__
    return text if len(text) <= 60 else text[:57] + "..."


def as_object(value: Any, where: str, name: str) -> dict[str, Any]:
    """VALUE, the field NAME of the file at WHERE, if it is a JSON object; else the error."""
    if not isinstance(value, dict):
        raise UsageError(f"{where}: {name} is {short(value)}, not an object")
    return value


def unsigned_run(
    path: Path,
    *,
    made: str,
    identities: Iterable[str],
    metadata: dict[str, str],
    cells: dict[Key, Cell],
    settings: dict[str, str],
    server_s: float,
) -> RunFigures:
    """A peer tool's saved file(s) at PATH as one run: unsigned, at speed 1, its contexts and
    concurrencies those of CELLS; MADE how the tool made it ("saved by vllm bench serve")."""
    return RunFigures(
        name=path.name,
        kind="run",
        speed_factor=1.0,
        identities=frozenset(identities),
        metadata=metadata,
        cells=cells,
        contexts=context_order(k[1] for k in cells),
        concurrencies=tuple(sorted({k[2] for k in cells})),
        trust="unsigned",
        provenance=f"{path.name}: {made} (no bundle, no signature)",
        settings=settings,
        server_s=(server_s,),
    )
