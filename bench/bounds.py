"""The one door for numbers from outside (issue 29, rule 1): a figure, speed, duration or
token count read from a server (JSON, /metrics, /version, /tokenize), results.json, a card,
the command line or a setting passes here before any arithmetic, and comes out finite and
in the range a real run can make, or as a reason it is not.

    figure_problem(v)         a measured figure: 0..FIGURE_MAX (verdicts, results.json, export)
    number(v, lo, hi)         a JSON number (not a bool, not text) in [lo, hi], else None
    count(v, hi)              a JSON whole number (1.0 counts, 1.5 does not) in [0, hi], else None

The ranges are named here, so each place that reads such a number cites one of them
instead of a local guess.
"""

from __future__ import annotations

import math

# No figure of a real run comes near this: 1e12 tok/s, or a latency of 31,000 years. A value
# beyond it, negative or not finite comes from a broken or hostile input.
FIGURE_MAX = 1e12
# A server's reported (or the flag's) speed factor: the twin runs from 1/100 to 1000 x real
# time; a speed outside would turn a 30 s window into weeks, or into microseconds.
SPEED_MIN, SPEED_MAX = 0.01, 1000.0
# Seconds a window, a time-out or an estimate may take: a week.
SECONDS_MAX = 7 * 86400.0
# Tokens a server may report for anything (a prompt, a KV cache, a count): 2^40.
TOKENS_MAX = 1 << 40


def figure_problem(value: float, metric: str) -> str | None:
    """Why `value` cannot be a measured figure, or None when it can."""
    if math.isfinite(value) and 0.0 <= value <= FIGURE_MAX:
        return None
    return f"implausible {metric} {value:g}: a figure lies between 0 and {FIGURE_MAX:g}"


def number(value: object, lo: float, hi: float) -> float | None:
    """`value` (parsed JSON) as a float in [lo, hi]; None for anything else (a bool, text,
    NaN, infinities, a number outside)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        as_float = float(value)
    except OverflowError:  # an int past 1e308
        return None
    return as_float if math.isfinite(as_float) and lo <= as_float <= hi else None


def count(value: object, hi: int = TOKENS_MAX) -> int | None:
    """`value` (parsed JSON, or text from a label) as a whole number in [0, hi]; None for
    anything else ("many", null, 1.5, 1e300, "inf", a Unicode digit)."""
    if isinstance(value, str):
        text = value.strip()
        if not text.isascii() or not text or len(text) > 24:
            return None
        try:
            value = float(text) if any(c in text for c in ".eE") else int(text)
        except ValueError:
            return None
    got = number(value, 0, hi)
    if got is None or got != int(got):
        return None
    return int(got)
