"""The sequential compare's scheduler, driven by virtual runs of the twin (no sockets)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from bench.twin import profile as profiles
from bench.verdict import sequential
from bench.verdict.cells import Key, RunFigures
from bench.verdict.compare import Policy
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
