"""bench.stream.rxstamp.to_clock: a receive stamp put on the client's clock, with the
process preempted between its clock readings (no sockets: the clocks are scripted)."""

from __future__ import annotations

import pytest

from bench.stream import rxstamp
from tests.support.scripted import OFFSET, paused_clocks


def test_a_preemption_between_the_readings_does_not_date_the_stamp_early() -> None:
    # The bytes arrived 2 ms ago on the wall clock; the process lost the CPU for 5 ms
    # between its first clock and wall readings. Read once (the old conversion), the stamp
    # came out 5 ms before its true time, earlier than the request it answers.
    clock, wall = paused_clocks([5e-3])
    arrived_wall = 5.0 + OFFSET - 2e-3
    stamp = rxstamp.to_clock(arrived_wall, clock, wall)
    truth = arrived_wall - OFFSET
    assert abs(stamp - truth) <= rxstamp.TIGHT_S / 2 + 1e-9


def test_when_every_bracket_is_preempted_the_tightest_is_used() -> None:
    clock, wall = paused_clocks([9e-3, 3e-3, 7e-3, 4e-3])
    arrived_wall = 5.0 + OFFSET
    stamp = rxstamp.to_clock(arrived_wall, clock, wall)
    # The second bracket is 3 ms wide: its midpoint is wrong by at most 1.5 ms.
    assert abs(stamp - (arrived_wall - OFFSET)) <= 1.5e-3 + 1e-6


@pytest.mark.parametrize("pause", [0.0, 1e-3])
def test_a_stamp_from_the_future_is_now(pause: float) -> None:
    # A wall clock stepped back (or a stamp later than now) gives now, not a later time.
    clock, wall = paused_clocks([pause])
    stamp = rxstamp.to_clock(10.0 + OFFSET, clock, wall)
    assert 5.0 < stamp < 5.0 + 1e-3 + 1e-5


def test_no_stamp_is_the_clock_now() -> None:
    clock, wall = paused_clocks([])
    assert rxstamp.to_clock(None, clock, wall) == pytest.approx(5.0 + 1e-6)
