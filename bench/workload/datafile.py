"""The data file a workload names (a ShareGPT dataset, a mooncake trace), read bounded.

A file is refused by its size before a byte is read (over MAX_DATA_BYTES, or empty), and
so is anything but a regular file (a FIFO would block, /dev/zero never ends). It is then
read in CHUNK_BYTES pieces, hashed as it goes (its sha256 is recorded in results.json), and
never more than MAX_DATA_BYTES of it in all (a file that grows while read). A JSON list is
decoded one item at a time (`json_items`): what is held is the item being decoded, never
the whole document, and an item over MAX_ITEM_CHARS is refused. Every problem is one
UsageError line naming the file.

A `path` without "/" or "." names a file shipped in bench/workloads/data/ (`sharegpt-sample`);
anything else is a path, relative ones from the workload file's folder.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from bench.errors import UsageError, one_line
from bench.workload_spec import WORKLOAD_DIR

DATA_DIR = WORKLOAD_DIR / "data"
MAX_DATA_BYTES = 1 << 30  # 1 GiB: ShareGPT_V3_unfiltered_cleaned_split.json is ~0.67 GB
CHUNK_BYTES = 1 << 20
MAX_ITEM_CHARS = 16 << 20  # one conversation (or trace line) past this is not one
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
_SPACE = " \t\r\n"  # JSON's whitespace, exactly


def is_name(ref: str) -> bool:
    """Whether a workload's `path` names a shipped file (no "/" or ".")."""
    return _NAME.fullmatch(ref) is not None


def resolve(ref: str, suffix: str, base: Path | None = None) -> Path:
    """The file `ref` names: a shipped name (no "/" or "."), or a path (relative: from
    `base`, else the working folder)."""
    if is_name(ref):
        found = DATA_DIR / f"{ref}{suffix}"
        if not found.is_file():
            shipped = ", ".join(sorted(p.stem for p in DATA_DIR.glob(f"*{suffix}"))) or "none"
            raise UsageError(
                f"no shipped data file {one_line(ref)!r}",
                hint=f"give a path, or one of: {shipped}",
            )
        return found
    path = Path(ref)
    return path if path.is_absolute() or base is None else Path(os.path.abspath(base / path))


def key(path: Path, shown: str) -> tuple[str, int, int, int]:
    """(path, size, mtime, inode): what a cached read is keyed on; the file checked to be a
    regular file of 1 to MAX_DATA_BYTES bytes."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UsageError(f"{shown} does not exist", hint="check the path") from None
    except OSError as exc:
        raise UsageError(f"{shown} cannot be read: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise UsageError(f"{shown} is not a regular file")
    if st.st_size == 0:
        raise UsageError(f"{shown} is empty")
    if st.st_size > MAX_DATA_BYTES:
        raise UsageError(
            f"{shown} is {st.st_size:,} bytes, over the {MAX_DATA_BYTES:,} a data file may be",
            hint="take a part of it",
        )
    return str(path), st.st_size, st.st_mtime_ns, st.st_ino


class HashedReader:
    """A file's bytes in pieces, hashed, at most MAX_DATA_BYTES in all."""

    def __init__(self, f: BinaryIO, shown: str) -> None:
        self.f, self.shown = f, shown
        self.digest = hashlib.sha256()
        self.read_bytes = 0

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        self.read_bytes += len(data)
        if self.read_bytes > MAX_DATA_BYTES:
            raise UsageError(f"{self.shown} grew past {MAX_DATA_BYTES:,} bytes while read")
        self.digest.update(data)
        return data

    def readline(self, limit: int) -> bytes:
        line = self.f.readline(limit)
        self.read_bytes += len(line)
        if self.read_bytes > MAX_DATA_BYTES:
            raise UsageError(f"{self.shown} grew past {MAX_DATA_BYTES:,} bytes while read")
        self.digest.update(line)
        return line

    def sha256(self) -> str:
        """The hex digest of the whole file (what is left is read first)."""
        while self.read(CHUNK_BYTES):
            pass
        return self.digest.hexdigest()


def json_items(reader: HashedReader, what: str) -> Iterator[object]:
    """The items of the JSON list the file holds, one at a time (module docstring). `what`
    names an item in messages ("entry")."""
    text = _Text(reader)
    first = text.skip_space()
    if first != "[":
        shown = "nothing but whitespace" if first == "" else f"{first!r}"
        raise UsageError(f"{reader.shown} is not a JSON list (it starts with {shown})")
    text.pos += 1
    if text.skip_space() == "]":
        text.pos += 1
    else:
        index = 0
        while True:
            yield text.item(f"{what} {index}")
            nxt = text.skip_space()
            text.pos += 1
            if nxt == "]":
                break
            if nxt != ",":
                raise UsageError(
                    f"{reader.shown} is not a JSON list: after {what} {index} comes "
                    f"{repr(nxt) if nxt else 'the end'}, not ',' or ']'"
                )
            index += 1
    if text.skip_space() != "":
        raise UsageError(f"{reader.shown} holds more than one JSON document")


class _Text:
    """The file as text, decoded from UTF-8 (a leading BOM skipped) piece by piece."""

    def __init__(self, reader: HashedReader) -> None:
        self.reader = reader
        self.buf, self.pos, self.eof = "", 0, False
        self.decoder = codecs.getincrementaldecoder("utf-8-sig")()
        self.json = json.JSONDecoder()

    def _fill(self, at_least: int = 0) -> None:
        data = self.reader.read(max(at_least, CHUNK_BYTES))
        try:
            more = self.decoder.decode(data, final=not data)
        except UnicodeDecodeError:
            raise UsageError(
                f"{self.reader.shown} is not UTF-8 text (near byte {self.reader.read_bytes:,})"
            ) from None
        self.eof = not data
        self.buf, self.pos = self.buf[self.pos :] + more, 0

    def skip_space(self) -> str:
        """The next character that is not whitespace ("" at the end of the file)."""
        while True:
            while self.pos < len(self.buf) and self.buf[self.pos] in _SPACE:
                self.pos += 1
            if self.pos < len(self.buf):
                return self.buf[self.pos]
            if self.eof:
                return ""
            self._fill()

    def item(self, name: str) -> object:
        """The JSON value at the next non-space character: decoded from what is read, reading
        more (twice as much each time) until it decodes, the file ends or it passes
        MAX_ITEM_CHARS."""
        self.skip_space()
        while True:
            try:
                value, end = self.json.raw_decode(self.buf, self.pos)
            except RecursionError:
                raise UsageError(f"{self.reader.shown}: {name} is nested too deeply") from None
            except ValueError as exc:  # JSONDecodeError, or an integer of 4,300+ digits
                if self.eof:
                    why = exc.msg if isinstance(exc, json.JSONDecodeError) else one_line(str(exc))
                    raise UsageError(
                        f"{self.reader.shown}: {name} is not valid JSON ({why})"
                    ) from None
                if len(self.buf) - self.pos > MAX_ITEM_CHARS:
                    raise UsageError(
                        f"{self.reader.shown}: {name} is over {MAX_ITEM_CHARS:,} characters "
                        "or not valid JSON"
                    ) from None
                self._fill(len(self.buf) - self.pos)
                continue
            if end - self.pos > MAX_ITEM_CHARS:
                raise UsageError(
                    f"{self.reader.shown}: {name} is over {MAX_ITEM_CHARS:,} characters"
                )
            self.pos = end
            return value
