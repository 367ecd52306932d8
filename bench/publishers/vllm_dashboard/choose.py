"""The one serving test --select picks: each item of the file sorted (a result, a record of a
test, or an error), the first matching test kept whole and the other matches counted, and
the one-line refusals (no test, several, two records of one).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.errors import CardError
from bench.publishers.vllm_dashboard.facts import _Test
from bench.publishers.vllm_dashboard.file import _looks_other
from bench.publishers.vllm_dashboard.records import _args, _fields_of_record, _info
from bench.publishers.vllm_dashboard.result import _fields_of_result
from bench.publishers.vllm_dashboard.values import (
    DO,
    MAX_KEYS,
    MAX_RECORDS,
    WHAT,
    _json_type,
    _short,
)


@dataclass
class _Found:
    """What the scan saw: the first matching test whole, the other matches counted."""

    test: _Test | None = None
    duplicate: str | None = None
    matches: set[tuple[str, str]] = field(default_factory=set)
    tests: set[tuple[str, str]] = field(default_factory=set)
    keys_seen: set[str] = field(default_factory=set)
    skipped: int = 0


def _take(path: Path, index: int, item: Any, wanted: dict[str, str], found: _Found) -> None:
    """Sort one item: a result (a test), a record (one metric of a test), or an error."""
    kind = _kind(path, index, item)
    if kind == "skip":
        found.skipped += 1
        return
    fields = _fields_of_result(path, item) if kind == "result" else _fields_of_record(item)
    key = (fields.get("commit", ""), fields["id"])
    if len(found.tests) < MAX_KEYS:
        found.tests.add(key)
    found.keys_seen.update(k for k in wanted if k in fields)
    if not all(_same(k, fields.get(k), v) for k, v in wanted.items()):
        return
    if found.test is None:
        found.test = _Test(key, kind)
    if key != found.test.key:
        if len(found.matches) < MAX_KEYS:
            found.matches.add(key)
        return
    test = found.test
    found.matches.add(key)
    if found.duplicate:
        return
    if test.items and (kind == "result" or test.kind == "result"):
        found.duplicate = f"{_name(key)} is in items {test.items[0][0]} and {index}"
        return
    if kind == "records":
        metric = item["metric"].get("name")
        name = metric if isinstance(metric, str) else "\0" + json.dumps(metric)
        if name in test.metrics:
            found.duplicate = (
                f"{_name(key)} has metric {_short(metric)} in items {test.metrics[name]} "
                f"and {index}"
            )
            return
        if len(test.items) >= MAX_RECORDS:
            raise CardError(
                f"{path}: test {_name(key)} has more than {MAX_RECORDS} records: not one "
                f"serving test's; {DO}"
            )
        test.metrics[name] = index
    test.items.append((index, item))


def _kind(path: Path, index: int, item: Any) -> str:
    if not isinstance(item, dict):
        raise CardError(
            f"{path}: item {index} is {_json_type(item)}, not a JSON object: not {WHAT}; {DO}"
        )
    if isinstance(item.get("metric"), dict) and isinstance(item.get("benchmark"), dict):
        args, info = _args(item), _info(item)
        serving = "request_rate" in args or "request_throughput" in info or "model_id" in info
        return "records" if serving else "skip"
    if any(k in item for k in ("model_id", "request_throughput", "mean_ttft_ms")):
        return "result"
    keys = ", ".join(_short(k, 30) for k in list(item)[:6]) or "none"
    raise CardError(
        f"{path}: item {index} is neither a vLLM serving result nor a dashboard record "
        f"(its keys: {keys}): not {WHAT}{_looks_other(json.dumps(list(item)[:50]))}; {DO}"
    )


def _chosen(path: Path, wanted: dict[str, str], found: _Found) -> _Test:
    asked = ", ".join(f"{k}={_short(v)}" for k, v in wanted.items()) or "no --select"
    if found.test is None:
        if not found.tests:
            skipped = f" ({found.skipped} records of other tests)" if found.skipped else ""
            raise CardError(f"{path}: no serving test in the file{skipped}: not {WHAT}; {DO}")
        absent = [k for k in wanted if k not in found.keys_seen]
        no_key = f"; no test has {', '.join(_short(k, 30) for k in absent)}" if absent else ""
        raise CardError(
            f"{path}: no serving test matches {asked}{no_key}; the file has "
            f"{_count_text(found.tests)} ({_names(found.tests)}); change --select KEY=VALUE"
        )
    if len(found.matches) > 1:
        matched = f"match {asked}" if wanted else "in the file"
        raise CardError(
            f"{path}: {_count_text(found.matches)} {matched} ({_names(found.matches)}); "
            "add --select KEY=VALUE (id=TEST, commit=SHA, or any field) to pick one"
        )
    if found.duplicate:
        raise CardError(
            f"{path}: two records with one id: {found.duplicate}; keep one run's records, "
            "or add --select KEY=VALUE (request_rate, workflow_id ...) to pick one"
        )
    return found.test


def _count_text(keys: set[tuple[str, str]]) -> str:
    n = len(keys)
    more = "or more " if n >= MAX_KEYS else ""
    return f"{n:,} {more}serving test{'s' if n != 1 else ''}"


def _names(keys: set[tuple[str, str]]) -> str:
    shown = sorted(keys)[:3]
    return ", ".join(_name(k) for k in shown) + (", ..." if len(keys) > 3 else "")


def _name(key: tuple[str, str]) -> str:
    commit, test = key
    return _short(test, 80) + (f"@{commit[:12]}" if commit else "")


def _same(key: str, actual: str | None, wanted: str) -> bool:
    if actual is None:
        return False
    if actual == wanted:
        return True
    if key == "commit" and len(wanted) >= 7:
        return actual.startswith(wanted)
    try:
        a, w = float(actual), float(wanted)
    except ValueError:
        return False
    return a == w or (math.isinf(a) and math.isinf(w) and (a > 0) == (w > 0))
