"""Reading a publisher's file: bytes from outside, hostile until parsed.

- `read_text`: a whole small file (a summary, a JSON document) up to MAX_TEXT_BYTES, UTF-8;
- `iter_json_items`: the items of a large JSON array (a database dump of a million rows) or
  of JSON lines, one at a time, never more than MAX_ITEM_BYTES of one item in memory, up to
  MAX_ITEMS items, and a deadline on the whole read;
- `looks_like`: which publisher's format a file's first bytes look like, so an error can
  name it ("this looks like an MLPerf log summary, not InferenceX's dump").

Every failure is a `CardError` (exit 2) with one line naming the file and what to do.
"""

from __future__ import annotations

import codecs
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.errors import CardError

MAX_TEXT_BYTES = 16 << 20
MAX_ITEM_BYTES = 1 << 20  # one row of a dump; InferenceX's are under 4 KiB
MAX_ITEMS = 5_000_000
READ_DEADLINE_S = 300.0  # a million rows read in seconds; past this the file is not a dump
CHUNK = 1 << 16
HEAD_BYTES = 4096


def _open_error(path: Path, exc: OSError) -> CardError:
    return CardError(f"cannot read {path}: {exc.strerror or exc}; give a readable file")


def read_text(path: Path, what: str, max_bytes: int = MAX_TEXT_BYTES) -> str:
    """PATH's text, at most MAX_BYTES of UTF-8."""
    try:
        with path.open("rb") as f:
            raw = f.read(max_bytes + 1)
    except OSError as exc:
        raise _open_error(path, exc) from None
    if len(raw) > max_bytes:
        raise CardError(f"{path} is larger than {max_bytes:,} bytes: not {what}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise CardError(
            f"{path} is not UTF-8 text (byte {exc.start}): not {what}; give the file as "
            "the publisher released it"
        ) from None


def read_json(path: Path, what: str, max_bytes: int = MAX_TEXT_BYTES) -> Any:
    text = read_text(path, what, max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CardError(f"{path} line {exc.lineno}: not JSON ({exc.msg}): not {what}") from None
    except ValueError:  # an integer of thousands of digits
        raise CardError(f"{path}: a number too long: not {what}") from None
    except RecursionError:
        raise CardError(f"{path}: JSON nested too deep: not {what}") from None


def head(path: Path) -> bytes:
    try:
        with path.open("rb") as f:
            return f.read(HEAD_BYTES)
    except OSError as exc:
        raise _open_error(path, exc) from None


_SPACE = re.compile(r"[ \t\r\n]*")
_SPACE_COMMA = re.compile(r"[ \t\r\n,]*")


class _Items:
    """The reading state of `iter_json_items`: text decoded so far (`buf`, of which `pos`
    characters are consumed) and where it stands."""

    def __init__(self, f: Any, path: Path, what: str, max_item_bytes: int) -> None:
        self.f, self.path, self.what, self.max_item = f, path, what, max_item_bytes
        self.utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf = ""
        self.pos = 0
        self.offset = 0  # characters dropped before buf, for messages
        self.eof = False
        self.decoder = json.JSONDecoder()

    def fail(self, why: str) -> CardError:
        return CardError(f"{self.path}: {why}: not {self.what}")

    @property
    def at(self) -> int:
        return self.offset + self.pos

    @property
    def left(self) -> str:
        return self.buf[self.pos : self.pos + 1]

    def fill(self) -> None:
        self.offset += self.pos
        self.buf = self.buf[self.pos :]
        self.pos = 0
        chunk = self.f.read(CHUNK)
        try:
            if not chunk:
                self.eof = True
                self.buf += self.utf8.decode(b"", final=True)
            else:
                self.buf += self.utf8.decode(chunk)
        except UnicodeDecodeError:
            raise CardError(
                f"{self.path} is not UTF-8 text (near character {self.at:,}): not "
                f"{self.what}; give the file as the publisher released it"
            ) from None

    def skip(self, commas: bool = False) -> None:
        m = (_SPACE_COMMA if commas else _SPACE).match(self.buf, self.pos)
        self.pos = m.end() if m else self.pos

    def close_array(self) -> None:
        """After the array's "]": nothing but white space may follow."""
        self.pos += 1
        while True:
            self.skip()
            if self.left:
                raise self.fail("bytes after the JSON array")
            if self.eof:
                return
            self.fill()

    def item(self) -> tuple[bool, Any]:
        """(True, the next item) or (False, None) when more text is needed."""
        try:
            value, end = self.decoder.raw_decode(self.buf, self.pos)
        except json.JSONDecodeError:
            end = -1
        except ValueError:  # an integer of thousands of digits
            raise self.fail(f"a number too long at character {self.at:,}") from None
        except RecursionError:
            raise self.fail("JSON nested too deep") from None
        # A number at the buffer's end may go on in the next chunk: read more first.
        if end > 0 and (end < len(self.buf) or self.eof):
            self.pos = end
            return True, value
        if self.eof:
            raise self.fail(f"not JSON at character {self.at:,}")
        if len(self.buf) - self.pos > self.max_item:
            raise self.fail(
                f"an item at character {self.at:,} is larger than {self.max_item:,} bytes"
            )
        return False, None


def iter_json_items(
    path: Path,
    what: str,
    *,
    max_item_bytes: int = MAX_ITEM_BYTES,
    max_items: int = MAX_ITEMS,
    deadline_s: float = READ_DEADLINE_S,
) -> Iterator[Any]:
    """The items of a JSON array, or of JSON lines, in file order; each parsed alone."""
    started = time.monotonic()
    try:
        f = path.open("rb")
    except OSError as exc:
        raise _open_error(path, exc) from None
    with f:
        r = _Items(f, path, what, max_item_bytes)
        while not r.buf.strip() and not r.eof:
            r.fill()
        r.skip()
        in_array = r.left == "["
        if in_array:
            r.pos += 1
        count = 0
        while True:
            if time.monotonic() - started > deadline_s:
                raise r.fail(f"not read within {deadline_s:.0f} s")
            r.skip(commas=count > 0)
            if in_array and r.left == "]":
                r.close_array()
                return
            if not r.left:
                if r.eof:
                    if in_array:
                        raise r.fail("the JSON array never ends")
                    return
                r.fill()
                continue
            done, value = r.item()
            if not done:
                r.fill()
                continue
            count += 1
            if count > max_items:
                raise r.fail(f"more than {max_items:,} items")
            yield value
