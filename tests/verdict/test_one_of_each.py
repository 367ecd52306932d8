"""Issue 14: one reproduce implementation, one statistics module."""

from __future__ import annotations

import importlib.util

import bench.stats as stats
import tools.reproduce_twin as reproduce_twin
from bench.verdict import reproduce


def test_one_reproduce_and_one_statistics_module() -> None:
    assert importlib.util.find_spec("bench.card_diff") is None
    assert importlib.util.find_spec("bench.verdict.stats") is None
    # make reproduce-twin judges with the verdict's reproduce, as bench reproduce does.
    assert getattr(reproduce_twin, "reproduce") is reproduce.reproduce  # noqa: B009
    # The sweep's estimates and the verdict's tests come from the same module.
    assert stats.estimate([1.0, 2.0, 3.0]).ci95 is not None
    assert stats.welch_log([1.0, 1.1], [1.2, 1.3]).p_value < 1.0
    assert reproduce_twin.main.__module__ == "tools.reproduce_twin"
