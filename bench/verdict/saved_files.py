"""Another tool's saved result files found in a folder, bounded (`bench.verdict.aiperf_saved`,
`bench.verdict.guidellm_saved`): at most MAX_DEPTH folders down, MAX_ENTRIES entries looked
at and MAX_FILES files kept, each a one-line UsageError past its bound."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from bench.errors import UsageError

MAX_FILES = 256  # files of the tool's in one folder
MAX_DEPTH = 4  # folders below the one given
MAX_ENTRIES = 20_000  # directory entries looked at while searching a folder


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
