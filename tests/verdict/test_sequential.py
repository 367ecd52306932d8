"""The sequential compare's scheduler, driven by virtual runs of the twin (no sockets)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from bench.twin import profile as profiles
from bench.verdict import headline, sequential
from bench.verdict.cells import Key, RunFigures
from bench.verdict.compare import Policy, compare
from tests.support.fingerprints import BASE, fp_of, ids_at
from tools import verdict_power as power

pytestmark = pytest.mark.timeout(300)


def _measure(
    published: tuple[profiles.Profile, power.Base],
    calls: list[tuple[str, int, frozenset[Key] | None]],
    *,
    slower: dict[Key, float] | None = None,
    broken_in_b: Key | None = None,
) -> sequential.Measure:
    p, base = published

    def measure(side: str, trial: int, cells: frozenset[Key] | None) -> RunFigures:
        calls.append((side, trial, cells))
        seed = (1000 if side == "a" else 2000) + trial
        run = power.side(p, base, [seed], side.upper())
        if side == "b":
            for key, factor in (slower or {}).items():
                cell = run.cells[key]
                trials = {
                    m: tuple(v / factor if m.endswith("tok_s") else v * factor for v in vs)
                    for m, vs in cell.trials.items()
                }
                run.cells[key] = dataclasses.replace(cell, trials=trials)
            if broken_in_b is not None:
                run.cells[broken_in_b] = dataclasses.replace(
                    run.cells[broken_in_b], status="invalid", detail="no token in the window"
                )
        if cells is not None:
            run = dataclasses.replace(
                run, cells={k: c for k, c in run.cells.items() if k in cells}, planned=cells
            )
        return run

    return measure


def test_the_first_stage_measures_everything_then_only_open_cells(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    calls: list[tuple[str, int, frozenset[Key] | None]] = []
    out = sequential.run(_measure(published, calls), Policy())
    assert [(s, t) for s, t, _ in calls[:3]] == [("a", 1), ("b", 1), ("a", 2)]
    assert all(c is None for _, _, c in calls[:3])
    later = [c for _, _, c in calls[3:]]
    assert all(c is not None and len(c) < 40 for c in later)
    # a stage's cells never grow: what settled stays settled
    for before, after in itertools.pairwise(later):
        assert after is not None and before is not None and after <= before
    assert not out.comparison.flagged
    assert sum(out.measurements.values()) < 6 * 40  # cheaper than 3 + 3 everywhere


def test_a_changed_cell_is_never_settled_and_gets_every_stage(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    key: Key = ("decode", "32K", 32)
    calls: list[tuple[str, int, frozenset[Key] | None]] = []
    out = sequential.run(_measure(published, calls, slower={key: 1.08}), Policy())
    assert out.stages == len(out.plan) and out.chosen is not None
    assert out.measurements[key] == sum(out.plan[-1])
    assert all(c is None or key in c for _, _, c in calls)
    assert [x.key for x in out.comparison.flagged] == [key]
    assert {f.mark for x in out.comparison.flagged for f in x.figures} == {"regressed"}


def test_a_cell_invalid_on_one_side_is_not_measured_again_and_cannot_be_compared(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    key: Key = ("decode", "8K", 1)
    calls: list[tuple[str, int, frozenset[Key] | None]] = []
    out = sequential.run(_measure(published, calls, broken_in_b=key), Policy())
    assert all(c is None or key not in c for _, _, c in calls)
    cell = next(c for c in out.comparison.cells if c.key == key)
    assert cell.mark == "cannot compare" and "invalid in B" in (cell.reason or "")


def test_sides_alternate_within_and_across_stages() -> None:
    assert sequential._order(2, 1, "a") == ["a", "b", "a"]
    assert sequential._order(0, 1, "b") == ["b"]
    assert sequential._order(2, 2, "a") == ["a", "b", "a", "b"]
    assert sequential._order(2, 0, "b") == ["a", "a"]


def test_b_answering_differently_stops_after_the_first_stage_unless_accepted(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    def answering(calls: list[tuple[str, int, frozenset[Key] | None]]) -> sequential.Measure:
        measure = _measure(published, calls, slower={next(iter(published[1].figures)): 1.3})

        def with_answers(
            side: sequential.Side, trial: int, cells: frozenset[Key] | None
        ) -> RunFigures:
            fp = fp_of(k=BASE if side == "a" else ids_at(22))
            return dataclasses.replace(measure(side, trial, cells), fingerprints=(fp,))

        return with_answers

    calls: list[tuple[str, int, frozenset[Key] | None]] = []
    out = sequential.run(answering(calls), Policy())
    assert out.stopped_on_answers and out.stages == 1 and len(calls) == 3
    assert out.comparison.answers.refused
    assert out.lines()[-1].startswith("Stopped after stage 1: B answers differently")
    calls = []
    accepted = sequential.run(answering(calls), Policy(accept=frozenset({"answers"})))
    assert not accepted.stopped_on_answers and len(calls) > 3
    assert not any(line.startswith("Stopped") for line in accepted.lines())


def _noisier(measure: sequential.Measure, sd: float) -> sequential.Measure:
    """Every run's level moved by its own factor (lognormal, SD on the log scale): the
    run-to-run noise of a server far noisier than any margin of a few percent."""
    import math
    import random

    def noisy(side: sequential.Side, trial: int, cells: frozenset[Key] | None) -> RunFigures:
        run = measure(side, trial, cells)
        f = math.exp(random.Random(f"{side}{trial}").gauss(0.0, sd))
        out = {}
        for key, cell in run.cells.items():
            trials = {
                m: tuple(v / f if m.endswith("tok_s") else v * f for v in vs)
                for m, vs in cell.trials.items()
            }
            out[key] = dataclasses.replace(cell, trials=trials)
        return dataclasses.replace(run, cells=out)

    return noisy


def test_aimed_at_a_decision_cells_stop_once_equivalent_and_are_not_measured_again(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    calls: list[tuple[str, int, frozenset[Key] | None]] = []
    out = sequential.run(_measure(published, calls), Policy(), goal="decide")
    assert out.plan == sequential.DECIDE_STAGES
    assert [(s, t) for s, t, _ in calls[:4]] == [("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    # the equivalence claim holds at alpha over the 3 looks: alpha / 4 at each of the first
    # two, alpha / 2 at the last
    alpha = Policy().alpha
    levels = [sequential.look_alpha(alpha, k, 3) for k in (1, 2, 3)]
    assert levels == pytest.approx([alpha / 4, alpha / 4, alpha / 2]) and sum(levels) == alpha
    assert out.comparison.policy.tost_alpha == pytest.approx(levels[out.stages - 1])
    assert out.closed and {how for _, how in out.closed.values()} == {"equivalent"}
    for key, (look, _) in out.closed.items():
        after = [c for s, t, c in calls if max(t, 2) > look + 1 and c is not None]
        assert all(key not in c for c in after)  # a decided cell is not measured again
    cell = {c.key: c for c in out.comparison.cells}
    assert all(cell[k].outcome == "equivalent" for k in out.closed)
    assert out.lines()[0].startswith("Aimed at a decision: looks at 2+2, 3+3, 5+5 runs;")


def test_aimed_at_a_decision_a_clear_change_stops_changed_and_a_6_pct_one_is_never_equivalent(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    big: Key = ("decode", "32K", 32)
    six: Key = ("decode", "8K", 8)
    calls: list[tuple[str, int, frozenset[Key] | None]] = []
    out = sequential.run(
        _measure(published, calls, slower={big: 1.3, six: 1.06}), Policy(), goal="decide"
    )
    assert out.closed[big] == (1, "changed")
    assert all(c is None or big not in c for _, _, c in calls[4:])
    assert out.closed.get(six, (0, "open"))[1] != "equivalent"
    cell = {c.key: c for c in out.comparison.cells}
    assert cell[big].outcome == "changed" and cell[six].outcome != "equivalent"


def test_aimed_at_a_decision_it_stops_when_no_open_cell_can_be_decided_within_the_budget(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    calls: list[tuple[str, int, frozenset[Key] | None]] = []
    out = sequential.run(_noisier(_measure(published, calls), 0.3), Policy(), goal="decide")
    assert out.stages == 1 and len(calls) == 4  # 2 + 2, and no more runs spent
    assert out.budget_need is not None and (out.budget_need == 0 or out.budget_need > 5)
    assert not out.closed
    assert any(
        line.startswith("Stopped after look 1: the open cells need ")
        and "more than 4 times the budget of 5" in line
        for line in out.lines()
    )
    assert headline.outcome(out.comparison) == "not resolved"


def test_a_whole_run_not_shown_changed_is_never_printed_as_no_change(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    from bench.verdict import tables
    from bench.verdict.run_source import merge_runs

    calls: list[tuple[str, int, frozenset[Key] | None]] = []
    measure = _noisier(_measure(published, calls), 0.3)
    a = merge_runs([measure("a", t, None) for t in (1, 2, 3)], "A")
    b = merge_runs([measure("b", t, None) for t in (1, 2, 3)], "B")
    c = compare(a, b, Policy())
    assert c.whole is not None and not c.whole.changed
    page = tables.compare_markdown(c)
    line = next(x for x in page.splitlines() if x.startswith("- Whole run:"))
    assert "not shown changed (a change under " in line and "can go unseen)" in line
    assert "no change" not in page.lower()


def test_later_trials_of_a_workload_measure_its_open_points_by_label() -> None:
    open_points: frozenset[Key] = frozenset(
        {("workload", "4/s", 0), ("workload", "inf/s", 0), ("workload", "closed", 8)}
    )
    assert sequential.run_args(open_points) == ("--points", "4/s", "closed:8", "inf/s")
    assert sequential.run_args(None) == ()
