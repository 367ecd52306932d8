"""The file's JSON items: an array's, streamed; else one object, or JSON lines of them; and
whether a file's first bytes look like vLLM's at all.
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.errors import CardError
from bench.publishers.source import head, iter_json_items, read_text
from bench.publishers.vllm_dashboard.values import DO, WHAT


def looks_like(head: str) -> bool:
    """Whether a file's first 4 KiB look like a vLLM serving result or dashboard records."""
    text = head.lstrip("\ufeff \t\r\n")
    if not text.startswith(("{", "[")) or '"tput_per_gpu"' in text:
        return False
    result = '"model_id"' in text and ('"num_prompts"' in text or '"request_rate"' in text)
    records = '"benchmark"' in text and ('"vLLM benchmark"' in text or '"benchmark_values"' in text)
    return result or records


def _first_char(path: Path) -> str:
    raw = head(path)
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(raw, final=False)
    except UnicodeDecodeError as exc:
        raise CardError(f"{path} is not UTF-8 text (byte {exc.start}): not {WHAT}; {DO}") from None
    first = text.lstrip("\ufeff \t\r\n")[:1]
    if first not in ("{", "["):
        raise CardError(f"{path} is not JSON: not {WHAT}{_looks_other(text)}; {DO}")
    return first


def _looks_other(text: str) -> str:
    if "tput_per_gpu" in text:
        return " (it looks like InferenceX's database dump: tput_per_gpu)"
    if "MLPerf" in text or "SUT name" in text or "Scenario :" in text:
        return " (it looks like an MLPerf log summary)"
    return ""


def _items(path: Path, first: str) -> Iterator[Any]:
    """The file's items: an array's, streamed; else one object, or JSON lines of them."""
    if first == "[":
        yield from iter_json_items(path, WHAT)
        return
    text = read_text(path, WHAT).lstrip("\ufeff")
    try:
        yield _loads(path, text, None)
        return
    except _ExtraData:
        pass
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            try:
                yield _loads(path, line, number)
            except _ExtraData:
                raise CardError(
                    f"{path} line {number}: more than one JSON value: not {WHAT}; {DO}"
                ) from None


class _ExtraData(Exception):
    pass


def _loads(path: Path, text: str, line: int | None) -> Any:
    where = f"{path} line {line}" if line else str(path)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            raise _ExtraData from None
        at = f"{path} line {line or exc.lineno}"
        raise CardError(f"{at}: not JSON ({exc.msg}): not {WHAT}; {DO}") from None
    except (ValueError, RecursionError) as exc:  # a 5000-digit number, nesting too deep
        why = "nested too deep" if isinstance(exc, RecursionError) else "a number too long"
        raise CardError(f"{where}: JSON {why}: not {WHAT}; {DO}") from None
