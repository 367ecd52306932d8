"""The SLO-capacity search (bench.workload.search.CapacitySearchState) against oracles with a
known threshold, and a point's verdict (point_verdict) for each status and SLO outcome.

An oracle `met iff x <= T` is a server whose capacity is exactly T: a search that ends
with its bracket elsewhere, too wide, or past its budget would report a capacity the server
does not have."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.verdict import capacity_delta, page
from bench.verdict.cells import RunFigures
from bench.verdict.compare import Policy, compare
from bench.workload.search import CapacitySearchState, Verdict, point_verdict
from bench.workload_points import PointResult, PointStatus, SloCheck, SloVerdict
from tests.support.budget import fixed_budget

Oracle = Callable[[float], Verdict]


def _below(threshold: float) -> Oracle:
    return lambda x: "met" if x <= threshold else "missed"


def _search(state: CapacitySearchState, oracle: Oracle) -> CapacitySearchState:
    """Run the search to its end: every next point measured by the oracle."""
    for _ in range(1000):  # a search that never ends fails here, not by hanging
        x = state.next_point()
        if x is None:
            return state
        assert state.lowest <= x <= state.highest, x
        state.record(x, oracle(x))
    raise AssertionError(f"the search did not end: {state.tried[-5:]}")


def _rates(start: float, **kw: float | int) -> CapacitySearchState:
    return CapacitySearchState(start=start, lowest=0.01, highest=1e4, **kw)  # type: ignore[arg-type]


def _steps_needed(start: float, threshold: float, tolerance: float) -> int:
    """An upper bound on the points a rate search needs: doublings (or halvings) to a
    bracket, then bisections of a factor-2 bracket in log space down to 1 + tolerance."""
    bracket = math.ceil(abs(math.log2(threshold / start))) + 2
    bisect = math.ceil(math.log2(math.log(2) / math.log1p(tolerance))) + 1
    return bracket + bisect


@pytest.mark.parametrize("threshold", [0.05, 0.7, 3.0, 12.5, 999.0])
@pytest.mark.parametrize("start", [1.0, 40.0])
def test_a_rate_search_brackets_the_threshold_within_the_tolerance(
    threshold: float, start: float
) -> None:
    """Started above or below, the search ends with met <= T < missed and missed / met <=
    1.05, with no note (it ended as asked). A met above T, a missed at or below it, or a
    wider bracket would report another capacity than the server's."""
    s = _search(_rates(start, max_points=64), _below(threshold))
    assert s.met is not None and s.missed is not None
    assert s.met <= threshold < s.missed
    assert s.missed / s.met <= 1.05
    assert s.note() is None
    assert len(s.tried) <= _steps_needed(start, threshold, 0.05)


@given(
    threshold=st.floats(min_value=0.02, max_value=5000.0),
    start=st.floats(min_value=0.01, max_value=1e4),
    tolerance=st.sampled_from([0.01, 0.05, 0.2]),
)
@fixed_budget(200)
def test_any_threshold_from_any_start_is_found(
    threshold: float, start: float, tolerance: float
) -> None:
    """For any capacity T inside the limits and any start, the bracket holds T and is
    within the tolerance, in a number of points that grows with log(T / start) only."""
    s = _search(_rates(start, tolerance=tolerance, max_points=64), _below(threshold))
    assert s.met is not None and s.missed is not None
    assert s.met <= threshold < s.missed
    assert s.missed / s.met <= 1 + tolerance + 1e-12
    assert len(s.tried) <= _steps_needed(start, threshold, tolerance)
    assert len({x for x, _ in s.tried}) == len(s.tried)  # never the same point twice


@pytest.mark.parametrize("threshold", [1, 2, 3, 7, 64, 100, 4095])
@pytest.mark.parametrize("start", [1.0, 8.0, 512.0])
def test_a_concurrency_search_ends_on_adjacent_integers(threshold: int, start: float) -> None:
    """Concurrencies: every point an integer, and the search ends with met = T, missed =
    T + 1. A fractional concurrency cannot be run; a gap of 2 leaves the capacity unknown."""
    s = CapacitySearchState(start=start, lowest=1.0, highest=4096.0, integer=True, max_points=64)
    _search(s, _below(threshold))
    assert all(x == int(x) for x, _ in s.tried)
    assert (s.met, s.missed) == (threshold, threshold + 1)
    assert s.note() is None


def test_none_met_stops_at_the_lowest_and_says_so() -> None:
    """A server that meets the SLO nowhere: the search goes down to `lowest`, stops there and
    says no point met, naming it. A search that went on below the limit (or silently
    reported nothing) is wrong."""
    s = _search(_rates(4.0), lambda x: "missed")
    assert s.met is None and s.missed == 0.01
    assert s.tried[-1] == (0.01, "missed")
    assert s.note() == "no point met the SLO: the lowest tried, 0.01, did not"


def test_every_point_met_stops_at_the_highest_and_says_so() -> None:
    """A server that meets it everywhere: the search climbs to `highest` and says the capacity
    is only a lower bound there."""
    s = _search(_rates(4.0, max_points=64), lambda x: "met")
    assert s.missed is None and s.met == 1e4
    assert s.tried[-1] == (1e4, "met")
    assert s.note() == "every point met the SLO: the highest tried, 10000, is a lower bound"


def test_limits_of_a_concurrency_search() -> None:
    """Concurrency limits: missed at 1 ends at 1 (none met), met at 4096 ends there."""
    low = CapacitySearchState(start=16.0, lowest=1.0, highest=4096.0, integer=True)
    _search(low, lambda x: "missed")
    assert low.met is None and low.tried[-1] == (1.0, "missed")
    assert low.note() == "no point met the SLO: the lowest tried, 1, did not"
    high = CapacitySearchState(start=16.0, lowest=1.0, highest=4096.0, integer=True, max_points=64)
    _search(high, lambda x: "met")
    assert high.missed is None and high.tried[-1] == (4096.0, "met")


def test_max_points_bounds_a_search() -> None:
    """A search never measures more than `max_points` points, however far the capacity lies:
    each is a real point of minutes on a real server."""
    s = _search(_rates(0.01, max_points=5), _below(5000.0))
    assert len(s.tried) == 5
    assert [x for x, _ in s.tried] == [0.01, 0.02, 0.04, 0.08, 0.16]
    assert s.next_point() is None


def test_a_search_stopped_by_max_points_says_so() -> None:
    """Stopped by max_points with its bracket still wider than the tolerance, the search
    must say so: its capacity is then coarser than asked, and a reader would take it for
    one found to 5 %."""
    s = _search(_rates(1.0, max_points=4), _below(1.5))
    assert s.met is not None and s.missed is not None and s.missed / s.met > 1.05
    assert s.note() == "stopped after 4 points with the bracket still wider than asked"


def test_a_search_still_running_has_no_stopped_note() -> None:
    """Mid-search (the bracket wide, points left) the note must not claim the search stopped:
    results.json is saved after every point with the note as it stands then, and an
    interrupted run keeps it."""
    s = _rates(1.0, max_points=12)
    s.record(1.0, "met")
    s.record(2.0, "missed")
    assert s.next_point() is not None
    assert s.note() is None


def test_a_noisy_oracle_leaves_the_bracket_below_the_lowest_miss() -> None:
    """Noise: a server of capacity 10 that missed once at 4 (a spurious miss). The search
    ends with its bracket below that miss, never above it: it never measures above a point
    that did not meet once it has one, so it reports the lower capacity. (It cannot tell
    the miss was noise: its own path only probes inside its bracket; repeats can.)"""

    def oracle(x: float) -> Verdict:
        return "missed" if x == 4.0 or x > 10.0 else "met"

    s = _search(_rates(1.0), oracle)
    assert s.missed == 4.0
    assert s.met is not None and 4.0 / s.met <= 1.05
    assert all(x < 4.0 for x, _ in s.tried if x != 4.0)


def test_a_met_point_above_a_miss_is_left_out_of_the_bracket_and_noted() -> None:
    """Points recorded out of order (as a noisy server gives them: 8 met, then 4 missed,
    then 2 met): the bracket keeps the highest met point below the lowest miss (2, not 8)
    and the note says the results were not monotone, naming them. Taking 8 would report a
    capacity the server was seen to miss below."""
    s = _rates(1.0)
    for x, v in ((8.0, "met"), (16.0, "met"), (4.0, "missed"), (2.0, "met")):
        s.record(x, v)  # type: ignore[arg-type]
    assert (s.met, s.missed) == (2.0, 4.0)
    assert s.next_point() == pytest.approx(math.sqrt(8.0))
    assert s.note() == "not monotone: 8, 16 met above 4, which did not; the bracket is below 4"


def test_undecided_counts_as_not_met() -> None:
    """An undecided point (too few requests, a late client) is not shown to meet: it bounds
    the bracket from above like a miss. Counting it as met would overstate the capacity."""
    s = _rates(1.0)
    s.record(1.0, "met")
    s.record(2.0, "undecided")
    assert (s.met, s.missed) == (1.0, 2.0)
    assert s.next_point() == pytest.approx(math.sqrt(2.0))


# --- a point's verdict ---------------------------------------------------------------------


def _point(status: PointStatus, *verdicts: SloVerdict) -> PointResult:
    checks = tuple(
        SloCheck(figure=f, bound_s=1.0, n=500, over=0, verdict=v)
        for f, v in zip(("ttft", "tpot", "e2el"), verdicts, strict=False)
    )
    return PointResult(
        index=0, status=status, requests=500, completed=500, duration_s=1.0,
        arrival_span_s=1.0, achieved_rate=500.0, input_tokens=1, output_tokens=1,
        output_tok_s=1.0, total_tok_s=1.0, slo=checks,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("status", "verdicts", "expected"),
    [
        ("valid", ("met",), "met"),
        ("valid", ("met", "met"), "met"),
        ("valid", ("met", "missed"), "missed"),
        ("valid", ("missed", "undecided"), "missed"),
        ("valid", ("met", "undecided"), "undecided"),
        ("valid", ("undecided",), "undecided"),
        ("valid", (), "undecided"),  # no checks: nothing shown
        ("overloaded", ("met", "met"), "missed"),  # the server cannot serve the rate
        ("overloaded", (), "missed"),
        ("failed", ("met",), "missed"),  # failing requests is not meeting an SLO
        ("late_client", ("met",), "undecided"),  # not the offered rate: cannot tell
        ("late_client", ("missed",), "undecided"),
        ("interrupted", ("met",), "undecided"),
    ],
)
def test_point_verdict(
    status: PointStatus, verdicts: tuple[SloVerdict, ...], expected: str
) -> None:
    """met only for a valid point with every bound met; missed for a missed bound or a point
    the server could not serve (overloaded, failed); undecided for the rest (a late client
    measured another rate than offered). Another mapping moves the capacity."""
    assert point_verdict(_point(status, *verdicts)) == expected


# --- two capacity runs compared ----------------------------------------------------------


def _capacity_run(
    name: str, *found: float, estimates: tuple[float, ...] = (), searches: int = 0
) -> RunFigures:
    return RunFigures(
        name=name, kind="run", speed_factor=1.0, metadata={}, cells={}, contexts=(),
        concurrencies=(), capacity_of="rate at ttft_p99<=1s", capacity=found,
        capacity_estimate=estimates, capacity_searches=searches,
    )  # fmt: skip


def test_point_estimates_are_compared_when_every_search_on_both_sides_has_one() -> None:
    """The bounds sit on the search's grid (40 on both sides: no spread, so no interval); the
    point estimates lie 10 % apart and vary a little: compared, they give the change, CHANGED,
    and the section says which values it compared."""
    a = _capacity_run("a", 40.0, 40.0, 40.0, estimates=(44.0, 44.4, 43.7), searches=3)
    b = _capacity_run("b", 40.0, 40.0, 40.0, estimates=(39.6, 40.0, 39.4), searches=3)
    d = capacity_delta.judge(a, b, 0.05)
    assert d is not None and d.basis == "point estimates" and d.note is None
    assert d.a == (44.0, 44.4, 43.7) and d.changed and d.delta_pct is not None
    assert -10.5 < d.delta_pct < -9.5
    said = capacity_delta.lines(d, 0.05)
    assert any("compared: each search's point estimate (" in x for x in said), said
    assert "B against A: \u22129." in "\n".join(said) and ": CHANGED" in "\n".join(said)


@pytest.mark.parametrize(
    ("estimates", "searches", "why"),
    [
        ((), 0, "A: saved before the point estimate was kept"),
        ((44.0, 44.4), 3, "A: 1 of 3 searches gave none"),
    ],
)
def test_without_every_estimate_both_sides_are_compared_on_their_bounds(
    estimates: tuple[float, ...], searches: int, why: str
) -> None:
    """A run saved before the estimate was kept, or one search that gave none: both sides are
    compared on their bounds (never one side's estimates against the other's bounds, which
    differ by the bound's bias, a grid step), and the section says why."""
    a = _capacity_run("a", 40.0, 41.0, 39.5, estimates=estimates, searches=searches)
    b = _capacity_run("b", 40.5, 40.0, 40.2, estimates=(44.0, 44.1, 43.9), searches=3)
    d = capacity_delta.judge(a, b, 0.05)
    assert d is not None and d.basis == "bounds" and d.a == (40.0, 41.0, 39.5)
    assert d.b == (40.5, 40.0, 40.2)
    assert d.note == f"compared on the bounds, not the point estimates ({why})"
    said = capacity_delta.lines(d, 0.05)
    assert any("compared: each search's bound (" in x for x in said), said
    assert f"- {d.note}" in said


def test_searches_without_spread_are_not_a_certain_change() -> None:
    """Searches end on a grid (the start x 2^k, then geometric middles): two repeats of one
    server often land on the same point, and another run's on the next one. A side whose
    searches all agree tells nothing of the noise, as one search a side does (which is never
    CHANGED); a verdict of CHANGED with p = 0 and a zero-width interval from 40, 40 against
    56.6, 56.6 (adjacent points of one search's grid) claims a certainty the data lacks."""
    a = _capacity_run("a", 40.0, 40.0)
    b = _capacity_run("b", 56.57, 56.57)
    d = capacity_delta.judge(a, b, 0.05)
    assert d is not None and d.delta_pct is not None
    assert not d.changed, (d.delta_pct, d.ci_pct, d.p_value)


def test_equal_searches_on_both_sides_are_no_change() -> None:
    """The same capacities on both sides: Δ 0 and not CHANGED (what a twin's A/A pair of
    capacity runs gives)."""
    d = capacity_delta.judge(_capacity_run("a", 40.0, 40.0), _capacity_run("b", 40.0, 40.0), 0.05)
    assert d is not None and d.delta_pct == 0.0 and not d.changed


def test_the_compare_page_of_two_capacity_runs_shows_the_capacity_and_no_empty_plots() -> None:
    """Two `bench capacity` runs have no cells: the page says the capacity's change and its
    outcome, and draws no heatmap of an empty matrix (which matplotlib refused)."""
    a = _capacity_run("a", 40.0, 41.0, 39.5)
    b = _capacity_run("b", 40.5, 40.0, 40.2)
    c = compare(a, b, Policy())
    html = page.compare_page([c])
    assert "Searched: rate at ttft_p99&lt;=1s; compared: each search&#x27;s bound (" in html
    assert "data:image/png" not in html
    assert 'class="verdict pass">SLO CAPACITY EQUIVALENT WITHIN ±5 %<' in html
