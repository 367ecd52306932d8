"""The SLO capacity's point estimate (bench.workload.search.point_estimate) beside the bound:
the rate where the points' measured percentile crosses its bound, from readings with a known
crossing; smoothed when the readings do not rise with the rate; none, and why, when every
point met or none did. And `bench capacity`'s own path to it (bench.run.slo_capacity:
readings from each point's figures, the geometric mean over searches, tables.md), with no
server: PointResults made by hand.

A reading p99(x) = b * (x / c) ** k crosses the bound b at exactly c, and log-log
interpolation between any two such readings gives c back exactly: an estimate that does not
is interpolating in the wrong scale or between the wrong points."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.card.parse import read_card
from bench.run import slo_capacity
from bench.verdict import workload_cells
from bench.verdict.run_figures import from_results
from bench.verdict.run_source import merge_runs
from bench.workload import tables
from bench.workload.search import (
    CapacitySearchState,
    Reading,
    crossing,
    isotonic,
    point_estimate,
)
from bench.workload_points import (
    CapacityRun,
    CapacitySearch,
    PointResult,
    PointStatus,
    Quantiles,
    SloCheck,
    WorkloadRun,
)
from bench.workload_spec import Arrivals, Lengths, Workload
from tests.card.conftest import SHIPPED
from tests.support.synth import make_results


def _power(rates: list[float], c: float, bound: float, k: float = 3.0) -> list[Reading]:
    return [Reading(x, bound * (x / c) ** k, bound) for x in rates]


# --- the interpolation ---------------------------------------------------------------------


def test_known_p99s_give_the_known_crossing() -> None:
    """p99 0.4 s at 2/s and 0.8 s at 4/s against 0.5 s: log-log interpolation puts the
    crossing at 2 * 2 ** (log(0.5 / 0.4) / log 2) = 2.5/s (linear in the rate would give
    2.5 too only by chance of these numbers: see the next test)."""
    rs = [Reading(1.0, 0.1, 0.5), Reading(2.0, 0.4, 0.5), Reading(4.0, 0.8, 0.5)]
    got = crossing(rs)
    assert got.rate == pytest.approx(2.0 * 2.0 ** (math.log(0.5 / 0.4) / math.log(2.0)))
    assert got.rate == pytest.approx(2.5)
    est = point_estimate({"ttft_p99": rs})
    assert est.rate == pytest.approx(2.5)
    assert (est.term, est.why) == ("ttft_p99", None)


def test_the_interpolation_is_in_log_rate_and_log_value() -> None:
    """0.25 s at 1/s, 1 s at 4/s, bound 0.5 s: halfway in log value is halfway in log rate,
    2/s (the geometric middle); linear interpolation would say 2.0 in value but 1.75 in rate
    or 2.5 in log value: neither."""
    got = crossing([Reading(1.0, 0.25, 0.5), Reading(4.0, 1.0, 0.5)])
    assert got.rate == pytest.approx(2.0)


@given(
    c=st.floats(0.05, 500.0),
    k=st.floats(0.3, 6.0),
    ratios=st.lists(st.floats(0.3, 3.0), min_size=2, max_size=12, unique=True),
)
def test_a_power_law_is_crossed_where_it_meets_the_bound(
    c: float, k: float, ratios: list[float]
) -> None:
    """Readings on p99 = b (x / c) ** k at any rates either side of c: the estimate is c."""
    rates = [c * r for r in ratios]
    if not (min(ratios) < 1.0 - 1e-6 and max(ratios) > 1.0 + 1e-6):
        return  # no bracket: another test's case
    est = point_estimate({"tpot_p99": _power(rates, c, 0.01, k)})
    assert est.rate == pytest.approx(c, rel=1e-6)


def test_the_lowest_term_gives_the_estimate() -> None:
    """Two terms crossing at 3/s and 2.4/s: the SLO is met below both, so 2.4, tpot."""
    rates = [1.0, 2.0, 2.83, 4.0]
    est = point_estimate(
        {"ttft_p99": _power(rates, 3.0, 0.5), "tpot_p99": _power(rates, 2.4, 0.01, 1.0)}
    )
    assert est.rate == pytest.approx(2.4) and est.term == "tpot_p99"


def test_a_term_within_its_bound_everywhere_is_passed_over_below_its_readings() -> None:
    """TTFT far under its bound at every point, TPOT crossing at 3/s: TTFT binds somewhere
    above 4/s, if at all; the estimate is TPOT's."""
    rates = [1.0, 2.0, 4.0]
    est = point_estimate(
        {"ttft_p99": [Reading(x, 0.05, 0.5) for x in rates], "tpot_p99": _power(rates, 3.0, 0.01)}
    )
    assert est.rate == pytest.approx(3.0) and est.term == "tpot_p99"


def test_a_share_over_the_bound_is_interpolated_linearly() -> None:
    """A p95 (no such percentile kept by a point): 2 % over at 2/s and 8 % at 4/s against
    5 %: halfway in share, halfway in log rate: sqrt(8)."""
    rs = [Reading(2.0, 0.02, 0.05, log_value=False), Reading(4.0, 0.08, 0.05, log_value=False)]
    assert crossing(rs).rate == pytest.approx(math.sqrt(8.0))


# --- not monotone -------------------------------------------------------------------------


def test_isotonic_pools_adjacent_violators() -> None:
    assert isotonic([1.0, 3.0, 2.0, 4.0]) == [1.0, 2.5, 2.5, 4.0]
    assert isotonic([3.0, 2.0, 1.0]) == [2.0, 2.0, 2.0]
    assert isotonic([1.0, 2.0, 3.0]) == [1.0, 2.0, 3.0]
    assert isotonic([]) == []


@given(st.lists(st.floats(-1e6, 1e6), max_size=30))
def test_isotonic_is_non_decreasing_and_keeps_the_sum(values: list[float]) -> None:
    fitted = isotonic(values)
    assert len(fitted) == len(values)
    assert all(a <= b + 1e-9 * max(1.0, abs(b)) for a, b in itertools.pairwise(fitted))
    assert math.fsum(fitted) == pytest.approx(math.fsum(values), abs=1e-6)


def test_non_monotone_p99s_are_smoothed_before_the_crossing_is_read() -> None:
    """p99s 0.3, 0.6, 0.45, 0.9 s at 2, 2.5, 2.83, 4/s against 0.5 s: read raw, the crossing
    would lie between 2 and 2.5 (and again between 2.83 and 4). Smoothed, 0.6 and 0.45 pool
    to 0.525 at both 2.5 and 2.83: the crossing is between 2/s (0.3) and 2.5/s (0.525), in
    log-log: 2 * 1.25 ** (log(0.5/0.3) / log(0.525/0.3))."""
    rs = [Reading(x, v, 0.5) for x, v in ((2.0, 0.3), (2.83, 0.45), (2.5, 0.6), (4.0, 0.9))]
    got = crossing(rs)  # given out of order: sorted by rate first
    expected = 2.0 * 1.25 ** (math.log(0.5 / 0.3) / math.log(0.525 / 0.3))
    assert got.rate == pytest.approx(expected)
    # A dip below the bound above a point over it is pooled away, not a second crossing.
    rs = [Reading(x, v, 0.5) for x, v in ((2.0, 0.3), (2.5, 0.56), (2.83, 0.48), (4.0, 0.9))]
    fitted = isotonic([0.3, 0.56, 0.48, 0.9])
    assert fitted[1] == fitted[2] == pytest.approx(0.52)
    assert 2.0 < (crossing(rs).rate or 0.0) < 2.5


# --- no estimate ---------------------------------------------------------------------------


def test_every_point_met_gives_no_estimate_and_says_so() -> None:
    """Every reading within its bound: the crossing lies above the highest point, unknown."""
    est = point_estimate({"ttft_p99": [Reading(x, 0.1 * x, 0.5) for x in (1.0, 2.0, 4.0)]})
    assert est.rate is None and est.term is None
    assert est.why == "ttft_p99 within its bound at every point read, up to 4"


def test_no_point_met_gives_no_estimate_and_says_so() -> None:
    est = point_estimate({"tpot_p99": [Reading(x, 0.02, 0.01) for x in (0.5, 1.0, 2.0)]})
    assert est.rate is None
    assert est.why == "tpot_p99 over its bound at every point read, from 0.5"
    # One term over everywhere sinks the estimate even when another crosses: the SLO is
    # missed below every point read.
    rates = [0.5, 1.0, 2.0]
    est = point_estimate(
        {"ttft_p99": _power(rates, 1.0, 0.5), "tpot_p99": [Reading(x, 0.02, 0.01) for x in rates]}
    )
    assert est.rate is None and est.why is not None and est.why.startswith("tpot_p99 over")


def test_an_overloaded_point_caps_the_readings() -> None:
    """Readings at and above the lowest overloaded point are left out: within the bound up
    to 2/s, overloaded at 4/s: the crossing is somewhere in between, not read; no estimate."""
    rs = [Reading(1.0, 0.1, 0.5), Reading(2.0, 0.2, 0.5), Reading(8.0, 0.9, 0.5)]
    est = point_estimate({"ttft_p99": rs}, cap=4.0)
    assert est.rate is None
    why = "ttft_p99 within its bound at every point read, up to 2 (4 was overloaded or failed)"
    assert est.why == why
    assert point_estimate({"ttft_p99": rs}).rate is not None  # without the cap, 2 to 8
    assert point_estimate({}).why == "no point with readings of the SLO's terms"


# --- bench capacity's path: points -> readings -> searches -> the run ----------------------


def _q(p99: float) -> Quantiles:
    return Quantiles(n=1000, mean=p99 / 3, p50=p99 / 3, p90=p99 / 2, p99=p99, min=0.0, max=p99)


def _point(status: PointStatus, ttft_p99: float, over: int = 0) -> PointResult:
    verdict = "met" if ttft_p99 <= 0.5 else "missed"
    return PointResult(
        index=0, status=status, requests=1000, completed=1000, duration_s=10.0,
        arrival_span_s=10.0, achieved_rate=100.0, input_tokens=1, output_tokens=1,
        output_tok_s=1.0, total_tok_s=1.0, ttft=_q(ttft_p99),
        slo=(SloCheck(figure="ttft", bound_s=0.5, n=1000, over=over, verdict=verdict),),
    )  # fmt: skip


def test_a_search_s_points_give_its_estimate() -> None:
    points = [(1.0, _point("valid", 0.2)), (2.0, _point("valid", 0.4)),
              (4.0, _point("valid", 0.8)), (2.83, _point("late_client", 5.0))]  # fmt: skip
    est = slo_capacity.estimated(points)  # the late point is not of its rate: left out
    assert est.rate == pytest.approx(2.5) and est.term == "ttft_p99"
    capped = slo_capacity.estimated([*points[:2], (3.0, _point("overloaded", 0.3))])
    assert capped.rate is None and capped.why is not None and "3 was overloaded" in capped.why


def test_a_p95_term_is_read_as_the_share_over_its_bound() -> None:
    def p95(over: int) -> PointResult:
        check = SloCheck(figure="ttft", percentile=95, bound_s=0.5, n=1000, over=over,
                         verdict="met")  # fmt: skip
        return _point("valid", 0.1).model_copy(update={"slo": (check,)})

    est = slo_capacity.estimated([(2.0, p95(20)), (4.0, p95(80))])
    assert est.rate == pytest.approx(math.sqrt(8.0)) and est.term == "ttft_p95"


def test_the_run_s_estimate_is_the_geometric_mean_of_the_searches() -> None:
    assert slo_capacity.geometric([2.0, None, 8.0])[0] == pytest.approx(4.0)
    mean, interval = slo_capacity.geometric([3.0, 3.3, 3.1])
    assert interval is not None and interval[0] < (mean or 0) < interval[1]
    assert slo_capacity.geometric([None, None]) == (None, None)
    one, none = slo_capacity.geometric([5.0])
    assert one == pytest.approx(5.0) and none is None


def _run(*searches: CapacitySearch) -> WorkloadRun:
    wl = Workload(name="w", seed=1, arrivals=Arrivals(kind="rate", rates=(2.0,), requests=1000),
                  lengths=Lengths(input_tokens=8, output_tokens=8))  # fmt: skip
    bound, _ = slo_capacity.geometric([s.met for s in searches])
    point, interval = slo_capacity.geometric([s.crossing for s in searches])
    cap = CapacityRun(by="rate", slo="ttft_p99<=0.5s", method="m", searches=searches,
                      estimate=bound, crossing=point, crossing_interval=interval)  # fmt: skip
    return WorkloadRun(workload=wl, source="w", sha256="0" * 64, capacity=cap)


def test_tables_say_which_is_the_bound_and_which_the_estimate() -> None:
    s1 = CapacitySearch(repeat=0, tried=((2.0, "met"), (4.0, "missed")), met=2.0, missed=4.0,
                        crossing=2.5, crossing_term="ttft_p99")  # fmt: skip
    why = "ttft_p99 within its bound at every point read, up to 2"
    s2 = CapacitySearch(repeat=1, tried=((2.0, "met"),), met=2.0, crossing_note=why)
    text = "\n".join(tables._capacity(_run(s1, s2), 1.0))
    assert "Capacity, the bound: **2 requests/s** over 2 search(es)" in text
    assert "Capacity, the point estimate: **2.5 requests/s** over 1 search(es)" in text
    assert "- search 1: 2 met, 4 missed; met 2, not 4; estimate 2.5 (ttft_p99)" in text
    assert "- search 2: 2 met; met 2, not -; no estimate: ttft_p99 within its bound" in text
    none = "\n".join(tables._capacity(_run(s2), 1.0))
    assert "Capacity, the point estimate: none (each search's reason below)." in none


def test_a_capacity_run_saved_before_the_estimate_still_loads() -> None:
    """results.json of a run made before the point estimate (no crossing fields) loads, and
    tables.md shows its bound alone."""
    old = {"by": "rate", "slo": "ttft_p99<=0.5s", "method": "m", "estimate": 2.0,
           "searches": [{"repeat": 0, "tried": [[2.0, "met"]], "met": 2.0}]}  # fmt: skip
    cap = CapacityRun.model_validate(old)
    assert cap.crossing is None and cap.searches[0].crossing is None
    run = _run(*cap.searches).model_copy(update={"capacity": cap})
    text = "\n".join(tables._capacity(run, 1.0))
    assert "Capacity, the bound: **2 requests/s**" in text and "point estimate" not in text


def test_a_search_state_and_its_estimate_agree_on_a_clean_server() -> None:
    """A server whose p99 is 0.5 (x / 3) ** 3: the search brackets 3 from below (met is a
    bound under it), and the estimate from the same points is 3 itself."""
    state = CapacitySearchState(start=1.0, lowest=0.01, highest=1e4)
    readings: list[Reading] = []
    while (x := state.next_point()) is not None:
        p99 = 0.5 * (x / 3.0) ** 3
        state.record(x, "met" if p99 <= 0.5 else "missed")
        readings.append(Reading(x, p99, 0.5))
    assert state.met is not None and state.met <= 3.0
    assert point_estimate({"ttft_p99": readings}).rate == pytest.approx(3.0)


def test_compare_reads_each_search_s_bound_and_estimate_at_server_speed() -> None:
    """What `bench compare` reads from a capacity run (bench.verdict.workload_cells): each
    search's bound and point estimate, rates divided by the twin's speed factor (server
    time), and how many searches there were, so that a search without an estimate is seen;
    two bundles of one side merged keep that count, so the merged estimates are incomplete
    when one bundle's are (and compare then judges the bounds)."""
    s1 = CapacitySearch(repeat=0, met=20.0, missed=40.0, crossing=25.0)
    s2 = CapacitySearch(repeat=1, met=20.0, missed=40.0, crossing_note="no crossing")
    base = make_results(read_card(SHIPPED), speed=10.0)
    got = workload_cells.capacity_of(base.model_copy(update={"workload": _run(s1, s2)}))
    assert got == {
        "capacity_of": "rate at ttft_p99<=0.5s",
        "capacity": (2.0, 2.0),
        "capacity_estimate": (2.5,),
        "capacity_searches": 2,
    }
    one = from_results(base.model_copy(update={"workload": _run(s1)}), name="one")
    two = from_results(base.model_copy(update={"workload": _run(s1, s2)}), name="two")
    assert one.capacity_estimate == (2.5,) and one.capacity_searches == 1
    merged = merge_runs([one, two], "A")
    assert merged.capacity == (2.0, 2.0, 2.0) and merged.capacity_estimate == (2.5, 2.5)
    assert merged.capacity_searches == 3
