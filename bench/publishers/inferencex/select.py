"""Which row: --select's KEY=VALUE pairs against a row's own fields, else against its
config's (configs.json) or its workflow run's (workflow_runs.json), the side tables beside
the dump, streamed; and one side table's row by id.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bench.errors import CardError, one_line
from bench.publishers.inferencex.values import (
    ALIASES,
    CONFIG_FIELDS,
    MAX_SIDE_ROWS,
    RUN_FIELDS,
    WHAT,
    _clip,
    _id_text,
    _text,
)
from bench.publishers.source import iter_json_items

_ABSENT = object()


def _inline(row: Mapping[str, Any], key: str) -> Any:
    for name in (key, ALIASES.get(key)):
        if name is not None and name in row:
            return row[name]
    return _ABSENT


class _Select:
    """--select KEY=VALUE pairs: `id` against the row's id, others against the row's field
    of that name, else its config's or its workflow run's (case-insensitive values)."""

    def __init__(self, select: Mapping[str, str]) -> None:
        self.id: str | None = None
        self.fields: list[tuple[str, str]] = []
        for key, value in select.items():
            k, v = str(key).strip().lower(), str(value).strip().lower()
            if k == "id":
                self.id = v
            else:
                self.fields.append((k, v))
        self.config_keys = [k for k, _ in self.fields if _in(k, CONFIG_FIELDS)]
        self.run_keys = [k for k, _ in self.fields if _in(k, RUN_FIELDS)]
        self.config_ids: dict[str, set[str]] = {}
        self.run_ids: dict[str, set[str]] = {}
        self.pairs = dict(self.fields)
        self.text = (
            " ".join(one_line(f"{k}={_clip(str(v), 60)}") for k, v in select.items())
            or "(nothing selected)"
        )

    def side_table(self, path: Path | None, keys: list[str], into: dict[str, set[str]]) -> None:
        """The ids of the side table's rows that match each of KEYS."""
        if path is None or not keys:
            return
        for k in keys:
            into[k] = set()
        for n, item in enumerate(iter_json_items(path, WHAT, max_items=MAX_SIDE_ROWS), 1):
            if not isinstance(item, dict):
                raise CardError(f"{path}: item {n} is not a JSON object: not {WHAT}")
            for k in keys:
                got = _inline(item, k)
                if got is not _ABSENT and _text(got).strip().lower() == self.pairs[k]:
                    into[k].add(_id_text(item.get("id")))

    def matches(self, row: Mapping[str, Any], rid: str) -> bool:
        if self.id is not None and rid.lower() != self.id:
            return False
        for key, want in self.fields:
            got = _inline(row, key)
            if got is not _ABSENT:
                if _text(got).strip().lower() != want:
                    return False
            elif key in self.config_ids:
                if _id_text(row.get("config_id")) not in self.config_ids[key]:
                    return False
            elif key in self.run_ids:
                if _id_text(row.get("workflow_run_id")) not in self.run_ids[key]:
                    return False
            else:
                return False
        return True


def _in(key: str, names: frozenset[str]) -> bool:
    return key in names or ALIASES.get(key) in names


def _side_row(path: Path | None, want: str) -> dict[str, Any] | None:
    if path is None:
        return None
    for n, item in enumerate(iter_json_items(path, WHAT, max_items=MAX_SIDE_ROWS), 1):
        if not isinstance(item, dict):
            raise CardError(f"{path}: item {n} is not a JSON object: not {WHAT}")
        if _id_text(item.get("id")) == want:
            return item
    return None
