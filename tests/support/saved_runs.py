"""Another tool's saved files in the verdict tests (AIPerf's exports, GuideLLM's reports):
JSON to make them hostile with, and what reading any file must come to: workload cells, or
one line of error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from hypothesis import strategies as st

from bench.errors import UsageError
from bench.verdict.cells import RunFigures

# Any JSON value, small: a field's replacement in a hostile file.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=20,
)
# A file's whole bytes: random, or some JSON value.
HOSTILE_BYTES = st.binary(max_size=200) | JSON_VALUES.map(lambda v: json.dumps(v).encode())


class Reader(Protocol):
    """A reader module of another tool's files (bench.verdict.aiperf_saved, guidellm_saved)."""

    def recognises(self, path: Path) -> bool: ...

    def load(self, path: Path) -> RunFigures: ...


def write_json(folder: Path, data: Any, name: str) -> Path:
    """DATA as the JSON file NAME in FOLDER."""
    path = folder / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def figures_or_one_line_error(reader: Reader, path: Path) -> None:
    """READER takes PATH for its own or not without an error, and reads it as workload cells
    or refuses it with one line."""
    reader.recognises(path)
    try:
        run = reader.load(path)
    except UsageError as exc:
        message = str(exc)
    else:
        assert all(c.phase == "workload" for c in run.cells.values())
        return
    assert message and "\n" not in message


def one_line_error(reader: Reader, path: Path) -> str:
    """READER's error for PATH, asserted one line that names the file."""
    try:
        reader.load(path)
    except UsageError as exc:
        message = str(exc)
    else:
        raise AssertionError(f"{path} was read, not refused")
    assert str(path) in message and "\n" not in message
    return message
