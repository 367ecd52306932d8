"""The sweep-efficiency breakdown, on a run directory and log written by hand."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest

from tools.perf import sweep_timeline as tl

START = 1_700_000_000.0  # Unix time the `bench run` process started


def _ts(t: float) -> str:
    return dt.datetime.fromtimestamp(START + t, dt.UTC).isoformat().replace("+00:00", "Z")


def _run() -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """One row at speed 10 (3 s windows, 0.3 s holds): a scout, then one cell of C = 2.

    0.0-0.5 start-up | 0.5-0.6 sizing | 0.6-0.8 scout | 0.8-0.85 writing | 0.85-0.86 other
    0.86-0.9 drain | 0.9-1.4 first tokens | 1.4-1.45 gate | 1.45-1.75 hold | 1.75-1.76 gate
    1.76-4.76 window | 4.76-4.8 stop | 4.8-4.9 writing | 4.9-5.0 finish
    """
    anchor, t0 = 0.5, 0.9
    results = {
        "created_at": _ts(anchor),
        "settings": {"duration_s": 30.0, "readiness_hold_s": 3.0, "trials": 1},
        "server": {"speed_factor": 10.0},
        "cells": [
            {
                "context_label": "8K",
                "concurrency": 2,
                "trial": 0,
                "started_at_s": t0 - anchor,
                "extras": {"ready_after_s": 0.85, "window_start_s": 0.86, "window_end_s": 3.86},
            },
            {"context_label": "8K", "concurrency": 4, "trial": 0, "started_at_s": None},
        ],
    }
    samples = [
        {"phase": "prefill", "context": "8K", "concurrency": 1, "trial": 0,
         "origin_unix_s": START + anchor, "worker": 0, "start_s": 0.1, "end_s": 0.3,
         "first_token_s": 0.3},
        {"phase": "decode", "context": "8K", "concurrency": 2, "trial": 0,
         "origin_unix_s": START + t0, "worker": 0, "start_s": 0.0, "first_token_s": 0.2,
         "end_s": 3.9},
        {"phase": "decode", "context": "8K", "concurrency": 2, "trial": 0,
         "origin_unix_s": START + t0, "worker": 1, "start_s": 0.0, "first_token_s": 0.5,
         "end_s": 3.88},
    ]  # fmt: skip
    log = [
        "not json: a stray line",
        json.dumps({"event": "prompt_sized", "context": "8K", "trial": 1, "waited_s": 0.1,
                    "timestamp": _ts(0.6)}),
        json.dumps({"event": "prefill_measured", "context": "8K", "trial": 1,
                    "timestamp": _ts(0.85)}),
        json.dumps({"event": "cell_started", "cell": "8K x 2", "timestamp": _ts(0.86)}),
        json.dumps({"event": "cell_finished", "cell": "8K x 2", "timestamp": _ts(4.9)}),
    ]  # fmt: skip
    return results, samples, log


def test_every_instant_goes_to_exactly_one_part() -> None:
    results, samples, log = _run()
    events = tl.log_events(log, START)
    got = tl.breakdown(results, samples, events, START, 5.0)
    parts = got["breakdown_s"]
    expected = {
        tl.WINDOWS: 3.0,
        tl.HOLDS: 0.3,
        tl.PREFILLS: 0.2,
        tl.FIRST_TOKENS: 0.5,
        tl.STARTUP: 0.5,
        tl.SIZING: 0.1,
        tl.DRAIN: 0.04,
        tl.GATE: 0.06,
        tl.STOP: 0.04,
        tl.WRITING: 0.15,
        tl.FINISH: 0.1,
        tl.OTHER: 0.01,
    }
    assert parts == pytest.approx(expected, abs=1e-6)
    assert got["unaccounted_s"] == pytest.approx(0.0, abs=1e-9)
    assert got["needed_s"] == pytest.approx(3.5)
    assert got["efficiency"] == pytest.approx(5.0 / 3.5)
    assert got["floor_with_this_server"] == pytest.approx(4.0 / 3.5)
    assert got["sweep_overhead_s"] == pytest.approx(1.0)
    assert got["cells"] == 1 and got["prefills"] == 1 and got["sizing_logged"]
    (cell,) = got["per_cell"]
    assert cell["cell"] == "8K x 2"
    assert cell["drain_s"] == pytest.approx(0.04) and cell["gate_s"] == pytest.approx(0.06)


def test_without_a_sizing_event_the_gap_before_each_scout_is_sizing() -> None:
    results, samples, log = _run()
    log = [x for x in log if "prompt_sized" not in x]
    got = tl.breakdown(results, samples, tl.log_events(log, START), START, 5.0)
    assert not got["sizing_logged"]
    assert got["breakdown_s"][tl.SIZING] == pytest.approx(0.1)


def test_overlapping_spans_count_once_for_the_part_that_comes_first() -> None:
    spans = [tl.Span(tl.WINDOWS, 1.0, 2.0), tl.Span(tl.WRITING, 1.5, 2.5)]
    got = tl.cover(spans, 3.0)
    assert got[tl.WINDOWS] == pytest.approx(1.0)
    assert got[tl.WRITING] == pytest.approx(0.5)
    assert got[tl.OTHER] == pytest.approx(1.0)  # before the first span
    assert got[tl.FINISH] == pytest.approx(0.5)  # after the last
