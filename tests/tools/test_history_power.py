"""`make history-power`'s simulation (tools/history_power.py), on a few histories."""

from __future__ import annotations

import pytest

from bench.history import changes
from bench.twin import noise
from tools import history_power as hp

QUIET = noise.with_fit(hp.noise_settings()[0][1], "quiet-gpu")


def test_the_plant_slows_only_the_runs_from_the_first_bad_on_by_its_size() -> None:
    flat = hp.series(QUIET, 7, hp.PLANTED, 0.0)
    slow = hp.series(QUIET, 7, hp.PLANTED, 0.06)
    ratios = [s / f for s, f in zip(slow, flat, strict=True)]
    assert ratios[: hp.FIRST_BAD - 1] == [1.0] * (hp.FIRST_BAD - 1)
    assert ratios[hp.FIRST_BAD - 1 :] == pytest.approx([1 / 1.06] * (hp.RUNS - hp.FIRST_BAD + 1))
    assert len(set(flat)) == hp.RUNS  # each run its own noise draw


def test_the_delay_is_the_runs_needed_to_name_the_pair_and_none_without_a_plant() -> None:
    assert hp.delay(hp.series(QUIET, 3, hp.PLANTED, 0.06)) == changes.MIN_SEGMENT
    assert hp.delay(hp.series(QUIET, 3, hp.PLANTED, 0.0)) is None


def test_a_row_counts_every_cells_false_alarms_and_the_planted_cells_finds() -> None:
    quiet = noise.without_noise(QUIET).model_copy(update={"noise_run": 1e-9})
    alarms = hp.false_alarms(quiet, 2)
    assert alarms.startswith(f"0/{2 * len(hp.CELLS)} = 0.0%")
    line = hp.row("x", quiet, 2, 0.06, alarms)
    assert "| 6% | 2/2 = 100.0%" in line and line.endswith(" | 3 / 3 | 0/2 |")
