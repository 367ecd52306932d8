"""The one way bench writes a file (issue 29, rule 5): no command leaves a 0-byte or
half-written file behind a failure, and two commands writing the same name never share
a temporary file.

`write_atomic(path, data)` writes to a temporary file of its own (a unique name beside
`path`, so the rename stays on one file system), then renames it over `path`; on any
failure the temporary file is removed and `path` is as it was. A full disk, a missing
folder or a refused permission is DiskError (exit 8): `cannot write PATH: No space left
on device`. `atomic_path(path)` is the same for a writer that wants a path to write to
(a tar file, a parquet file).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from bench.errors import DiskError

# What a plain open() would give a new file here: mkstemp's own 0600 is not it.
_UMASK = os.umask(0)
os.umask(_UMASK)
_MODE = 0o666 & ~_UMASK


def disk_error(path: Path, exc: OSError) -> DiskError:
    return DiskError(f"cannot write {path}: {exc.strerror or exc}")


@contextlib.contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A unique temporary path beside `path`, renamed over it when the block ends well,
    removed when it does not (OSError becomes DiskError naming `path`)."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=path.parent)
        os.close(fd)
    except OSError as exc:
        raise disk_error(path, exc) from None
    tmp = Path(name)
    try:
        yield tmp
        os.chmod(tmp, _MODE)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise disk_error(path, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: str | bytes) -> None:
    """`data` (text as UTF-8) at `path`, whole or not at all."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_path(path) as tmp:
        tmp.write_bytes(raw)
