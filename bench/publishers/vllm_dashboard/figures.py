"""vLLM's figures: which fields of a result are figures, their units, definitions and
computed_as.

Figures keep vLLM's names and units (ms stay ms). Definitions (serve.py
`calculate_metrics`), over the completed requests: TTFT, request sent to first streamed
token; TPOT excludes the first token, (latency - TTFT) / (output tokens - 1), over requests
with more than one output token; ITL, the gaps between streamed chunks, pooled over all
requests; E2EL, request sent to last token; request_throughput = completed / duration;
output_throughput = output tokens / duration; total_token_throughput = (input + output
tokens) / duration; percentiles are numpy's (linear). Each figure is one run: one sample.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.errors import CardError
from bench.publishers.model import ComputedAs, PublishedFigure
from bench.publishers.vllm_dashboard.values import (
    DO,
    MAX_EXTRA,
    MAX_FIGURE,
    MAX_TEXT,
    _number,
    _short,
    _text,
)

# Latency metrics: what vLLM measured, and over what its statistics are taken.
_LATENCY: dict[str, tuple[str, str]] = {
    "ttft": (
        "time to first token: from sending the request to its first streamed token, client side",
        "over completed requests",
    ),
    "tpot": (
        "time per output token, which excludes the first token: (latency - TTFT) / "
        "(output tokens - 1) per request",
        "over completed requests with more than one output token",
    ),
    "itl": (
        "inter-token latency: the gap between successive streamed chunks",
        "over all gaps of all completed requests, pooled",
    ),
    "e2el": (
        "end-to-end latency: from sending the request to its last token, client side",
        "over completed requests",
    ),
    "client_queue_time": (
        "time a request waited in the client for a --max-concurrency slot",
        "over completed requests",
    ),
    "e2el_including_client_queue": (
        "end-to-end latency plus the client's queueing time",
        "over completed requests",
    ),
}
_COMPUTED: dict[str, ComputedAs] = {
    "mean_ttft_ms": "ttft_mean_ms",
    "median_ttft_ms": "ttft_median_ms",
    "p99_ttft_ms": "ttft_p99_ms",
    "mean_tpot_ms": "tpot_mean_ms",
    "median_tpot_ms": "tpot_median_ms",
    "p99_tpot_ms": "tpot_p99_ms",
    "mean_itl_ms": "itl_mean_ms",
    "median_itl_ms": "itl_median_ms",
    "p99_itl_ms": "itl_p99_ms",
    "mean_e2el_ms": "e2el_mean_ms",
    "median_e2el_ms": "e2el_median_ms",
    "p99_e2el_ms": "e2el_p99_ms",
    # p50 is np.percentile(x, 50), which is np.median(x): the median's definition.
    "p50_ttft_ms": "ttft_median_ms",
    "p50_tpot_ms": "tpot_median_ms",
    "p50_itl_ms": "itl_median_ms",
    "p50_e2el_ms": "e2el_median_ms",
    "request_throughput": "request_rate",
    "output_throughput": "output_tok_s",
    "total_token_throughput": "total_tok_s",
}
_RATES: dict[str, tuple[str, str]] = {
    "request_throughput": ("req/s", "completed requests / benchmark duration"),
    "output_throughput": ("tok/s", "output tokens of completed requests / benchmark duration"),
    "total_token_throughput": (
        "tok/s",
        "(input + output tokens) of completed requests / benchmark duration",
    ),
    "request_goodput": (
        "req/s",
        "completed requests within every --goodput limit / benchmark duration",
    ),
    "max_output_tokens_per_s": (
        "tok/s",
        "the most output tokens streamed in any one 1 s window of the run",
    ),
}
_STAT = re.compile(r"(mean|median|std|p(\d{1,3}(?:\.\d+)?))_([a-z0-9_]+)_([a-z]+)")
_STAT_WORDS = {
    "mean": "mean",
    "median": "median",
    "std": "standard deviation (numpy.std, population)",
}
_ARRAYS = "note.per_request_arrays"


def _split(
    path: Path, pairs: Iterable[tuple[Any, Any]], where: str
) -> tuple[dict[str, float], dict[str, str]]:
    """A result's fields split: figures by name, and the other scalars as text; arrays
    (per-request data) are named in extra, never read."""
    figures: dict[str, float] = {}
    extra: dict[str, str] = {}
    arrays: list[str] = []
    for key, value in pairs:
        if not isinstance(key, str):
            continue
        if _figure_kind(path, key, where) is None:
            if isinstance(value, list | dict):
                arrays.append(key)
            elif value is not None and len(extra) < MAX_EXTRA:
                extra[key] = _text(value)[:MAX_TEXT]
            continue
        if value is None and key == "request_goodput":
            continue  # no --goodput: vLLM writes null
        figures[key] = _figure_value(path, where + key, value)
    if arrays:
        extra[_ARRAYS] = _short(", ".join(arrays), MAX_TEXT)
    return figures, extra


def _figure_kind(path: Path, name: str, where: str = "") -> str | None:
    """'rate' or 'latency' for one of vLLM's figures, None for another field; a latency
    statistic in another unit than ms is an error."""
    if name in _RATES:
        return "rate"
    m = _STAT.fullmatch(name) if len(name) <= 100 else None
    if m is None or m.group(3) not in _LATENCY:
        return None
    if m.group(4) != "ms":
        raise CardError(
            f"{path}: {where}{_short(name)}: unknown unit {m.group(4)!r}, vLLM publishes "
            f"{m.group(3)} in ms ({m.group(1)}_{m.group(3)}_ms); {DO}"
        )
    return "latency"


def _figure_value(path: Path, what: str, value: Any) -> float:
    number = _number(value)
    if number is None or not math.isfinite(number):
        raise CardError(
            f"{path}: {_short(what, 120)} is {_short(_text(value))}, not a finite number; {DO}"
        )
    if not 0.0 <= number <= MAX_FIGURE:
        raise CardError(f"{path}: {_short(what, 120)} is {number!r}, outside 0..1e12; {DO}")
    return number


def _figure(name: str, value: float) -> PublishedFigure:
    if name in _RATES:
        unit, words = _RATES[name]
        return PublishedFigure(
            name=name, value=value, unit=unit, definition=words, computed_as=_COMPUTED.get(name)
        )
    m = _STAT.fullmatch(name)
    assert m is not None  # a figure's name was matched when it was read
    what, over = _LATENCY[m.group(3)]
    stat = m.group(1)
    words = _STAT_WORDS.get(stat) or f"{m.group(2)}th percentile (numpy.percentile, linear)"
    return PublishedFigure(
        name=name,
        value=value,
        unit="ms",
        definition=f"{what}; the {words} {over}",
        computed_as=_COMPUTED.get(name),
    )
