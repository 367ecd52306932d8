"""`make capacity-power` (tools/capacity_power.py): its point verdict is the product's, and
the harness runs end to end with a plausible accuracy in its quick mode."""

from __future__ import annotations

import json
import time
from array import array
from pathlib import Path

import pytest

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


def test_the_harness_reads_a_point_as_bench_capacity_does() -> None:
    """The point estimate's readings: each SLO term's p99 of the point's requests, the same
    number `bench capacity` keeps in the point's figures (what bench.run.slo_capacity reads)."""
    wl = cp.workload(11, 500, SETUP.slo, SETUP.start)
    tiny = SETUP.of("A")
    for rate in (2.0, 3.0, 3.5):
        planned, records = cp.play(tiny, wl, rate, 0)
        full = product_point(planned, records, rate)
        ours = cp.readings(rate, records, SETUP.slo)
        for c in full.slo:
            q = getattr(full, c.figure)
            got = ours[f"{c.figure}_p{c.percentile}"]
            assert got.value == pytest.approx(q.p99, rel=1e-9), (rate, c.figure)
            assert got.limit == pytest.approx(c.bound_s)


def test_a_search_is_seeded_and_stays_in_the_bracket() -> None:
    spec = cp.SearchSpec("A", 500, 3, 1)
    one = cp.search(spec, SETUP)
    assert one == cp.search(spec, SETUP)
    assert one.met is not None and one.tried[0] == (2.0, "met")
    missed = min(x for x, v in one.tried if v != "met")
    assert one.met < missed <= one.met * 2
    assert one.binding  # the lowest point that did not meet names what it missed
    # Its point estimate: from its own points, above the bound, below twice it.
    assert one.estimate is not None and one.estimate_term in ("ttft_p99", "tpot_p99")
    assert one.met < one.estimate < 2 * one.met
    assert len(one.read) == len(one.tried)


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
    assert all(0.75 <= e <= 1.35 for e in row.estimates), row.estimates
    table = "\n".join(report.lines)
    assert "| 1,000 |" in table and "A/A: flagged CHANGED" in table
    assert "estimate within 5 % of the truth" in table
    assert report.lines[0] == "`python -m tools.capacity_power --quick --workers 1`"


def test_stop_after_keeps_a_leading_part_and_the_dump_says_each(tmp_path: Path) -> None:
    """--stop-after: the jobs done by then, from the first (the first `must` whatever the
    time); --dump: one JSON line each, with the search's points and readings."""
    jobs = [cp.SearchSpec("A", 500, seed, 0) for seed in (1, 2, 3)]
    dump = tmp_path / "d.jsonl"
    got = cp.run_all(SETUP, jobs, 1, dump=str(dump), stop_after=0.0, must=1)
    assert len(got) == 1 and isinstance(got[0], cp.SearchFound) and got[0].spec == jobs[0]
    [line] = [json.loads(x) for x in dump.read_text().splitlines()]
    assert (line["seed"], line["met"], line["estimate"]) == (1, got[0].met, got[0].estimate)
    assert [x for x, _, _ in line["tried"]] == [x for x, _ in got[0].tried]
