"""The decision procedure on the committed corpus of real runs gives exactly these answers.

The corpus is data (tests/data/noise_corpus, recorded by `make noise-corpus`), so every
answer here is a fact about those files and the statistics: deterministic, no process, no
socket. A change to the statistics that changes a verdict on real noise shows up here.
"""

from __future__ import annotations

import json
from functools import cache

from bench.errors import Exit
from bench.verdict import budget, headline
from bench.verdict.cells import Key, RunFigures
from bench.verdict.command import compare_exit
from bench.verdict.compare import ALPHA, Comparison, Policy, compare
from bench.verdict.run_source import merge_runs
from tools import corpus_power

CELL: Key = ("decode", "2K", 2)


@cache
def _runs(engine: str) -> tuple[RunFigures, ...]:
    return tuple(corpus_power.load(corpus_power.CORPUS / engine))


def _compare(engine: str, a: range, b: range, policy: Policy | None = None) -> Comparison:
    runs = _runs(engine)
    side_a = merge_runs([runs[i] for i in a], "A")
    side_b = merge_runs([runs[i] for i in b], "B")
    return compare(side_a, side_b, policy or Policy())


def _mde(c: Comparison, key: Key, metric: str) -> float:
    f = next(f for x in c.cells if x.key == key for f in x.figures if f.metric.name == metric)
    assert f.mde_pct is not None
    return f.mde_pct


def test_the_vllm_cpu_corpus_is_complete_and_says_how_it_was_recorded() -> None:
    runs = _runs("vllm-cpu")
    assert len(runs) == 12
    assert all(len(r.start_s) == 1 and len(r.server_s) == 1 for r in runs)
    recipe = json.loads((corpus_power.CORPUS / "vllm-cpu" / "recipe.json").read_text())
    assert recipe["engine_version"] == "0.32.0"
    assert recipe["machine"]["nproc"] == 2
    assert recipe["bench_run"][-2:] == ["--trials", "1"]


def test_every_three_against_three_split_of_the_first_six_vllm_runs() -> None:
    runs = list(_runs("vllm-cpu"))
    splits = corpus_power.splits(6, 3, 1000, 0)
    assert len(splits) == 20
    for policy in (Policy(), Policy(run_level=False)):
        flagged = [
            a
            for a, b in splits
            if compare(
                merge_runs([runs[i] for i in a], "A"), merge_runs([runs[i] for i in b], "B"), policy
            ).flagged
        ]
        assert flagged == []


def test_vllm_three_against_three_and_what_it_would_take() -> None:
    c = _compare("vllm-cpu", range(3), range(3, 6))
    # Nothing changed, and 3 + 3 runs of this server cannot show that either (issue 44). The
    # worst MDE is a cell's own noise (compare.mde_noise): 378 % at the moderated sd.
    assert headline.verdict(c) == (
        "NOT RESOLVED: CHANGES UNDER 483 % CAN GO UNSEEN WITH 3 + 3 RUNS; ±5 % NEEDS ABOUT 617 "
        "A SIDE"
    )
    assert compare_exit([c]) == Exit.INCONCLUSIVE
    assert c.whole is not None and not c.whole.changed
    # A run's level varies by 12 % here: a 10 % change everywhere needs 37 runs a side (at
    # the whole-run test's α / 2 = 2 %; 35 when it ran at 2.5 %).
    assert budget.runs_for(c.whole.sd_log, 10.0, ALPHA / 2, runs_df=True) == 37
    lines = budget.lines(c)
    assert "10 %: 37 runs a side (2.0 h of server time, 74 server starts included)" in lines[-1]
    assert "a run's sweep 47 s of server time, a server start 53 s" in lines[0]
    # Twice as slow everywhere is a change of the whole run, in every cell.
    doubled = _compare_planted("vllm-cpu", range(3), range(3, 6), 100.0, None)
    assert headline.verdict(doubled) == (
        "EVERY CELL SLOWER BY 105.3 % (A CHANGE OF THE WHOLE RUN); 6 OF 6 CELLS CHANGED"
    )
    # One cell slower by the MDE printed for it is found, and only it.
    one = _compare_planted("vllm-cpu", range(3), range(3, 6), _mde(c, CELL, "tbt_s"), CELL)
    assert [x.key for x in one.flagged] == [CELL]


def test_vllm_six_against_six_at_the_printed_mdes() -> None:
    c = _compare("vllm-cpu", range(6), range(6, 12))
    assert headline.verdict(c) == (
        "NOT RESOLVED: CHANGES UNDER 110 % CAN GO UNSEEN WITH 6 + 6 RUNS; ±5 % NEEDS ABOUT 508 "
        "A SIDE"
    )
    assert _compare("vllm-cpu", range(6), range(6, 12), Policy(run_level=False)).flagged == []
    assert c.whole is not None
    everywhere = _compare_planted("vllm-cpu", range(6), range(6, 12), c.whole.mde_pct, None)
    assert headline.verdict(everywhere).startswith("EVERY CELL SLOWER BY 40.5 %")
    one = _compare_planted("vllm-cpu", range(6), range(6, 12), _mde(c, CELL, "tbt_s"), CELL)
    assert [x.key for x in one.flagged] == [CELL]


def test_six_against_three_runs_slower_everywhere_never_read_as_no_change() -> None:
    """Issue 44's case on this corpus: six runs against three of a server slower in every
    cell, by less than and by more than the whole run's MDE. Whatever the runs can see, the
    headline never says there is no change: CHANGED, or NOT RESOLVED with what it would take."""
    c = _compare("vllm-cpu", range(6), range(6, 9))
    assert c.whole is not None and not c.whole.changed
    for pct in (10.0, 15.0, 25.0, 33.3):
        planted = _compare_planted("vllm-cpu", range(6), range(6, 9), pct, None)
        line = headline.verdict(planted)
        assert headline.outcome(planted) in ("changed", "not resolved"), line
        assert "EQUIVALENT" not in line and "NO CELL CHANGED" not in line, line
        assert compare_exit([planted]) in (Exit.NOT_REPRODUCED, Exit.INCONCLUSIVE)
        if headline.outcome(planted) == "not resolved":
            assert line.startswith("NOT RESOLVED: CHANGES UNDER ") and "A SIDE" in line, line


def _compare_planted(engine: str, a: range, b: range, pct: float, key: Key | None) -> Comparison:
    runs = _runs(engine)
    side_a = merge_runs([runs[i] for i in a], "A")
    side_b = corpus_power.planted(
        merge_runs([runs[i] for i in b], "B"), pct, None if key is None else (key, "tbt_s")
    )
    return compare(side_a, side_b, Policy())
