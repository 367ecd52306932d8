"""A history run's cell as a verdict reads it: invalid trials beside valid ones are left out
and said, as they are in a bundle's cell (bench.verdict.run_figures)."""

from __future__ import annotations

from bench.history import runs


def _trials(statuses: dict[int, str], reasons: dict[int, str] | None = None) -> runs._Trials:
    values = {"total_tok_s": {i: 100.0 + i for i in statuses}, "ttft_s": {i: 0.5 for i in statuses}}
    return runs._Trials(statuses, reasons or {}, {}, values)


def test_two_valid_trials_and_an_invalid_one_are_judged_on_the_two_and_say_the_third() -> None:
    t = _trials({1: "valid", 2: "invalid", 3: "valid"}, {2: "stream cut"})
    cell = runs._cell(("decode", "8K", 64), t)
    assert cell.status == "valid"
    assert cell.trials["total_tok_s"] == (101.0, 103.0)  # the invalid trial's value left out
    assert cell.trials_note == "2 of 3 trials valid; 1 invalid: stream cut"


def test_a_not_ready_trial_still_makes_the_cell_not_ready() -> None:
    t = _trials({1: "valid", 2: "not_ready", 3: "valid"}, {2: "queue never drained"})
    cell = runs._cell(("decode", "8K", 64), t)
    assert cell.status == "not_ready" and "1 of 3 trials not ready" in (cell.detail or "")


def test_all_valid_trials_say_nothing_left_out() -> None:
    cell = runs._cell(("decode", "8K", 64), _trials({1: "valid", 2: "valid"}))
    assert cell.status == "valid" and cell.left_out is None and cell.trials_note is None
