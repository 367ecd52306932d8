"""What a vLLM result file is called in messages, the limits on what is kept of it, and the
small readers of its JSON values (text, numbers, dates) every part of the reader shares.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from bench.errors import one_line

WHAT = "a vLLM serving benchmark result"

DO = (
    "give the JSON `vllm bench serve --save-result` wrote or the dashboard's records "
    "(<result>.pytorch.json, or the uploaded JSON lines)"
)
MAX_FIGURE = 1e12
MAX_EXTRA = 300  # text fields kept in a card's extra
MAX_TEXT = 500  # characters of one extra value
MAX_KEYS = 10_000  # distinct tests remembered for messages
MAX_FLAGS = 400
MAX_RECORDS = 1000  # records of one test (vLLM writes 12)


def _scalars(pairs: Iterable[tuple[Any, Any]]) -> dict[str, str]:
    """The scalar fields as text (the select keys and extra's values)."""
    out: dict[str, str] = {}
    for key, value in pairs:
        if isinstance(key, str) and value is not None and not isinstance(value, list | dict):
            out[key] = _text(value)
    return out


def _keep(extra: dict[str, str], fields: Mapping[str, str], prefix: str) -> None:
    for key, value in fields.items():
        if len(extra) >= MAX_EXTRA:
            return
        extra.setdefault(prefix + key, value[:MAX_TEXT])


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int | float):
        return repr(value)
    return _json_type(value)


def _opt_text(value: Any) -> str | None:
    return value.strip() if isinstance(value, str) and value.strip() else None


def _first_text(item: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((v.strip() for k in keys if isinstance(v := item.get(k), str) and v.strip()), None)


def _short(value: Any, limit: int = 60) -> str:
    text = one_line(value if isinstance(value, str) else _text(value))
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean"}
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return names.get(type(value), type(value).__name__)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _integer(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    text = value.strip() if isinstance(value, str) else ""
    if text.isascii() and text.isdigit() and len(text) < 12:
        return int(text)
    return None


def _date(value: Any) -> str | None:
    """vLLM's `%Y%m%d-%H%M%S` (the client's local time) as ISO 8601; other text as it is."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        return datetime.strptime(value.strip(), "%Y%m%d-%H%M%S").isoformat()
    except ValueError:
        return value.strip()[:MAX_TEXT]


def _timestamp(value: Any) -> str | None:
    number = _number(value)
    if number is None or not 0 < number < 1e11:
        return None
    return datetime.fromtimestamp(number, UTC).isoformat()
