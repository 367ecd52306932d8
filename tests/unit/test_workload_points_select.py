"""`bench run --workload W --points LABEL ...`: a workload's points by the labels a verdict
keys them by (`Arrivals.labels`), and which of them a run measures (no sockets)."""

from __future__ import annotations

import argparse

import pytest

from bench.errors import UsageError
from bench.run import options
from bench.run.workload_run import chosen_points
from bench.workload_spec import Workload


def _workload(arrivals: dict[str, object]) -> Workload:
    return Workload.model_validate({"name": "w", "arrivals": arrivals})


def test_labels_are_the_verdicts_keys() -> None:
    rate = _workload({"kind": "rate", "rates": [0.5, 4.0, "inf"]})
    assert rate.arrivals.labels() == ("0.5/s", "4/s", "inf/s")
    closed = _workload({"kind": "closed-count", "concurrencies": [1, 8]})
    assert closed.arrivals.labels() == ("closed:1", "closed:8")


def test_points_chosen_in_the_workloads_order_and_unknown_ones_refused() -> None:
    w = _workload({"kind": "rate", "rates": [1.0, 4.0, 16.0]})
    assert chosen_points(w, ()) == (0, 1, 2)
    assert chosen_points(w, ("16/s", "1/s")) == (0, 2)
    with pytest.raises(UsageError, match="no such point") as caught:
        chosen_points(w, ("2/s",))
    assert "1/s 4/s 16/s" in (caught.value.hint or "")


def test_points_without_a_workload_is_refused() -> None:
    p = argparse.ArgumentParser()
    options.add_arguments(p)
    args = p.parse_args(["--points", "4/s"])
    with pytest.raises(UsageError, match="no --workload"):
        options.settings_from(args)
