"""`make capacity-power` (tools/capacity_power.py): its point verdict is the product's, and
the harness runs end to end with a plausible accuracy in its quick mode."""

from __future__ import annotations

import dataclasses
import json
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


def measured(argv: list[str]) -> cp.PowerReport:
    """`main`'s report of `argv`."""
    args = cp._parser().parse_args(argv)
    if args.quick:
        for key, value in cp.QUICK.items():
            setattr(args, key, value)
    return cp.measure(args, argv)


def test_quick_mode_runs_end_to_end_with_a_plausible_accuracy(tmp_path: Path) -> None:
    """And its dump reads back as the results were (`loaded` inverts `dumped`), whole: a run
    resuming it runs nothing and prints the same tables."""
    # No time bound here: a unit test is no benchmark (its 20 CPU-second bound took 21.7 in
    # a `make unit` of 7 December, and the unit tier's 60 s timeout already bounds it).
    dump = tmp_path / "quick.jsonl"
    report = measured(["--quick", "--workers", "1", "--dump", str(dump)])
    assert 2.0 < report.truth_b < report.truth_a < 5.0  # the slower decode's is lower
    [row] = report.accuracy
    assert len(row.ratios) == cp.QUICK["searches"]
    assert all(0.7 <= r <= 1.05 for r in row.ratios), row.ratios
    assert all(0.75 <= e <= 1.35 for e in row.estimates), row.estimates
    table = "\n".join(report.lines)
    assert "| 1,000 |" in table and "A/A: flagged CHANGED" in table
    assert "estimate within 5 % of the truth" in table
    assert report.lines[0] == f"`python -m tools.capacity_power --quick --workers 1 --dump {dump}`"

    lines = [json.loads(x) for x in dump.read_text().splitlines()]
    assert len(lines) == len(report.found) and report.resumed == 0
    assert {type(x) for x in report.found} == {float, cp.SearchFound}  # truths and searches
    for line, found in zip(lines, report.found, strict=True):
        assert cp.loaded(line, SETUP) == found
        assert cp.loaded(cp.dumped(found), SETUP) == found
    again = measured(["--quick", "--workers", "1", "--resume", str(dump)])
    assert again.resumed == len(report.found) and again.found == report.found
    assert again.lines[2] == (
        f"Resumed from `{dump}`: {len(report.found) - 4} searches and 4 truth sets read from "
        "it, 0 searches and 0 truth sets run now."
    )
    assert again.lines[4:-1] == report.lines[2:-1]  # all but the command and the footer


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


TINY = ["--compares", "0", "--truth-sets", "2", "--truth-given", "3.4", "3.5", "--workers", "1"]


def test_resume_runs_only_the_searches_a_dump_lacks(tmp_path: Path) -> None:
    """--resume: a dump's searches are not run again, the tables are those of one run not
    stopped; its searches at an R not searched now are left out of them and kept in the new
    dump, after its other lines; a cut last line is left out."""
    first, second = tmp_path / "first.jsonl", tmp_path / "second.jsonl"
    measured(["--accuracy-requests", "500", "600", "--searches", "1", *TINY, "--dump", str(first)])
    old = first.read_text()
    assert [json.loads(x)["requests"] for x in old.splitlines()] == [500, 600]
    first.write_text(old + old.splitlines()[0][:100])  # a run killed while writing a line
    plan = ["--accuracy-requests", "600", "--searches", "3", *TINY]
    resumed = measured([*plan, "--resume", str(first), "--dump", str(second)])
    assert (resumed.resumed, len(resumed.found)) == (1, 3)  # R = 600's first, and 2 run now
    assert resumed.lines[2] == (
        f"Resumed from `{first}`: 1 searches and 0 truth sets read from it, 2 searches and 0 "
        "truth sets run now; its 1 searches at R = 500, not a row of this run, left out of the "
        "tables (kept in --dump); its last line (3), cut short, left out."
    )
    assert resumed.lines[-1].startswith("3 searches and 0 truth sets: 1 and 0 from --resume, ")
    kept = second.read_text().splitlines()
    assert "\n".join(kept[:2]) + "\n" == old and len(kept) == 4

    whole = measured(plan)
    assert resumed.found == whole.found and resumed.accuracy == whole.accuracy
    assert resumed.lines[4:-1] == whole.lines[2:-1]  # all but the command and the footer


def test_resume_names_the_line_it_cannot_take(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    found = cp.search(cp.SearchSpec("A", 500, 1, 0), SETUP)
    good = json.dumps(cp.dumped(found))
    dump = tmp_path / "d.jsonl"
    plan = ["--accuracy-requests", "500", "--searches", "2", *TINY, "--resume", str(dump)]

    def refused(text: str, *more: str) -> str:
        dump.write_text(text)
        with pytest.raises(SystemExit) as got:
            measured([*plan, *more])
        return str(got.value)

    assert refused(f"{good}\n{{oops\n{good}\n").startswith(f"--resume {dump}, line 2: not JSON")
    assert refused(f"{good}\n{good}\n") == f"--resume {dump}, line 2: the search of line 1 again"
    other = good.replace('"seed": 1,', '"seed": 9,')
    assert refused(f"{good}\n{other}\n") == (
        f"--resume {dump}, line 2: side A, R = 500, seed 9, repeat 0: not a search of this run"
    )
    tampered = good.replace(f'"met": {found.met!r}', '"met": 3.0')
    assert refused(f"{tampered}\n").startswith(f"--resume {dump}, line 1: met and estimate: not")
    assert "(another --start?)" in refused(f"{good}\n", "--start", "3")
    assert refused('{"truth": 3.4}\n') == (
        f"--resume {dump}, line 1: a truth set past the 0 this run computes"
    )
    assert refused(f"{good}\n", "--dump", str(dump)).startswith("--dump: the file --resume reads")
    monkeypatch.setattr(cp, "RESUME_MAX_BYTES", len(good))
    assert refused(f"{good}\n") == f"--resume {dump}: larger than {len(good):,} bytes, refused"


def test_loaded_reads_dumps_from_before_binding_was_dumped() -> None:
    found = cp.search(cp.SearchSpec("A", 500, 2, 1), SETUP)
    line = cp.dumped(found)
    assert line["binding"] == list(found.binding or ())
    del line["binding"]
    back = cp.loaded(line, SETUP)
    assert back == dataclasses.replace(found, binding=None) and isinstance(back, cp.SearchFound)
    assert cp.binding([back]) == "not known (resumed from a dump without it) 1"
