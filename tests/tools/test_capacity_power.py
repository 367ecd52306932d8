"""`make capacity-power` (tools/capacity_power.py): its point verdict is the product's, and
the harness runs end to end with a plausible accuracy in its quick mode."""

from __future__ import annotations

import time
from array import array

from bench.stream.records import RequestRecord
from bench.twin.openloop import VirtualRequest
from bench.workload import figures
from bench.workload import slo as slo_rules
from bench.workload.runner import PointRun
from bench.workload.schedule import Planned
from bench.workload.search import point_verdict
from bench.workload_points import PointResult
from tools import capacity_power as cp

SETUP = cp.Setup(cp.PROFILE, slo_rules.parse(cp.SLO_TEXT), 2.0)


def product_point(
    planned: list[Planned], records: list[VirtualRequest], rate: float
) -> PointResult:
    """The point as `bench capacity` would record it: each request sent when due, its
    chunks as the twin emitted them, through `bench.workload.figures.point_result`."""
    recs = []
    for v in records:
        counts = array("q")
        for _, n in v.chunks:
            counts.append((counts[-1] if counts else 0) + n)
        recs.append(RequestRecord(
            worker=0, start_s=v.arrival_s, sent_s=v.arrival_s, first_token_s=v.first_token_s,
            end_s=v.finish_s, prompt_tokens=v.prompt_tokens, finished=True,
            chunk_s=array("d", (t for t, _ in v.chunks)), chunk_tokens=counts,
        ))  # fmt: skip
    due = [p.at_s for p in planned]
    run = PointRun(due_s=due, t0_s=0.0, records=recs, dispatched_s=list(due),
                   held_s=[0.0] * len(due))  # fmt: skip
    return figures.point_result(
        run, planned, index=0, trial=0, offered_rate=rate, concurrency=None, slo=SETUP.slo,
        speed=1.0, ignore_eos=True, warmups=0, started_at_s=0.0,
    )  # fmt: skip


def test_the_harness_judges_a_point_as_point_verdict_does() -> None:
    wl = cp.workload(11, 500, SETUP.slo, SETUP.start)
    tiny = SETUP.of("A")
    seen = {}
    for rate in (2.0, 3.0, 3.5, 8.0, 40.0):
        planned, records = cp.play(tiny, wl, rate, 0)
        full = product_point(planned, records, rate)
        ours, each = cp.judged(records, SETUP.slo)
        assert ours == point_verdict(full), rate
        assert cp.overloaded(records) == (full.status == "overloaded"), rate
        if "overloaded" not in each:
            assert each == {c.figure: c.verdict for c in full.slo}, rate
        seen[rate] = (ours, full.status)
    assert {v for v, _ in seen.values()} == {"met", "undecided", "missed"}
    assert seen[40.0] == ("missed", "overloaded")


def test_a_search_is_seeded_and_stays_in_the_bracket() -> None:
    spec = cp.SearchSpec("A", 500, 3, 1)
    one = cp.search(spec, SETUP)
    assert one == cp.search(spec, SETUP)
    assert one.met is not None and one.tried[0] == (2.0, "met")
    missed = min(x for x, v in one.tried if v != "met")
    assert one.met < missed <= one.met * 2
    assert one.binding  # the lowest point that did not meet names what it missed


def test_quick_mode_runs_end_to_end_with_a_plausible_accuracy() -> None:
    t0 = time.process_time()  # CPU seconds: a loaded machine does not fail it
    args = cp._parser().parse_args(["--quick", "--workers", "1"])
    for key, value in cp.QUICK.items():
        setattr(args, key, value)
    report = cp.measure(args, ["--quick", "--workers", "1"])
    assert time.process_time() - t0 < 20
    assert 2.0 < report.truth_b < report.truth_a < 5.0  # the slower decode's is lower
    [row] = report.accuracy
    assert len(row.ratios) == cp.QUICK["searches"]
    assert all(0.7 <= r <= 1.05 for r in row.ratios), row.ratios
    table = "\n".join(report.lines)
    assert "| 1,000 |" in table and "A/A: flagged CHANGED" in table
    assert report.lines[0] == "`python -m tools.capacity_power --quick --workers 1`"
