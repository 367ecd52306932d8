"""What the dump is called in messages, its files and the fields of its side tables, the
limits; and its JSON values read as text, counts, flags and figures.
"""

from __future__ import annotations

import json
import math
from typing import Any

from bench.errors import one_line

WHAT = "an InferenceX database dump"
RESULTS_FILE = "benchmark_results.json"
CONFIGS_FILE = "configs.json"
RUNS_FILE = "workflow_runs.json"

CLIP = 200  # characters of one extra value
MAX_SIDE_ROWS = 1_000_000  # rows of configs.json / workflow_runs.json
MAX_FIGURE = 1e12
MAX_COUNT = 10**9  # concurrency, lengths, parallelism: past this not a count

CONFIG_FIELDS = frozenset(
    {
        "hardware",
        "framework",
        "model",
        "precision",
        "spec_method",
        "disagg",
        "is_multinode",
        "prefill_tp",
        "prefill_ep",
        "prefill_dp_attention",
        "prefill_num_workers",
        "decode_tp",
        "decode_ep",
        "decode_dp_attention",
        "decode_num_workers",
        "num_prefill_gpu",
        "num_decode_gpu",
    }
)
RUN_FIELDS = frozenset(
    {
        "github_run_id",
        "run_attempt",
        "name",
        "status",
        "conclusion",
        "head_sha",
        "head_branch",
        "html_url",
        "created_at",
        "run_started_at",
        "append_only",
    }
)
# The per-result JSON's names and the database's for one field: a selection by either works.
ALIASES = {
    "hw": "hardware",
    "hardware": "hw",
    "spec_decoding": "spec_method",
    "spec_method": "spec_decoding",
}


# --- text -------------------------------------------------------------------------------


def _text(value: Any) -> str:
    """A JSON value as the text a selection compares and `extra` keeps."""
    if isinstance(value, str):
        return value
    if isinstance(value, float):
        return repr(value)
    try:  # true, false, null and numbers as JSON writes them; an int may be 4,000 digits
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    except (ValueError, TypeError, RecursionError):
        return "(a value too large to print)"


def _clip(text: str, n: int = CLIP) -> str:
    return text[:n]


def _show(value: Any) -> str:
    """A value from the file, safe in a one-line message."""
    return one_line(_clip(_text(value), 60))


def _id_text(value: Any) -> str:
    return _clip(_text(value), CLIP)


# --- values -----------------------------------------------------------------------------


def _count(value: Any) -> int | None:
    """A whole number 0..MAX_COUNT (an int, an integral float, or digits), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= MAX_COUNT else None
    if isinstance(value, float):
        return int(value) if value.is_integer() and 0 <= value <= MAX_COUNT else None
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 10:
        n = int(value.strip())
        return n if n <= MAX_COUNT else None
    return None


def _flag(value: Any) -> bool | None:
    """process_result.py writes some flags as "true"/"false" text; the database as booleans."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value == 1
    if isinstance(value, str):
        low = value.strip().lower()
        if low in ("true", "1", "yes"):
            return True
        if low in ("false", "0", "no", ""):
            return False
    return None


def _number(value: Any) -> float | None:
    """A finite number in 0..MAX_FIGURE, else None (booleans and text are not numbers)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, int) and abs(value) > MAX_FIGURE:
        return None
    v = float(value)
    return v if math.isfinite(v) and 0.0 <= v <= MAX_FIGURE else None
