"""The k-ary commit search, on commits whose "vLLM" is the twin in virtual time: one commit
in the middle makes one cell 10 % slower, one commit cannot be built."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from bench.twin import profile as profiles
from bench.verdict import bisect
from bench.verdict.cells import Key, RunFigures
from tools import verdict_power as power

CELL: Key = ("decode", "8K", 64)
COMMITS = [f"c{i:02d}" for i in range(17)]  # c00 GOOD ... c16 BAD: 16 gaps


def _measure(
    published: tuple[profiles.Profile, power.Base],
    culprit: int,
    broken: frozenset[str] = frozenset(),
    calls: list[list[str]] | None = None,
) -> bisect.MeasureMany:
    p, base = published

    def one(commit: str) -> RunFigures | None:
        if commit in broken:
            return None  # its image does not build
        i = COMMITS.index(commit)
        seeds = [10_000 * i + t for t in range(3)]
        change = (CELL, "total_tok_s", 10.0) if i >= culprit else None
        return power.side(p, base, seeds, commit, change=change)

    def many(commits: Sequence[str]) -> list[RunFigures | None]:
        if calls is not None:
            calls.append(list(commits))
        return [one(c) for c in commits]

    return many


@pytest.mark.parametrize("culprit", [1, 7, 11, 16])
def test_serial_search_names_the_planted_commit_in_log2_steps(
    published: tuple[profiles.Profile, power.Base], culprit: int
) -> None:
    calls: list[list[str]] = []
    r = bisect.bisect(COMMITS, _measure(published, culprit, calls=calls), CELL, "total_tok_s")
    assert r.culprit == COMMITS[culprit]
    assert r.suspects == (COMMITS[culprit],)
    assert r.rounds == bisect.serial_rounds(len(COMMITS), 1) == 4  # ceil(log2 16)
    assert all(len(c) == 1 for c in calls[1:])  # one commit per step
    assert f"culprit: {COMMITS[culprit]}" in "\n".join(r.lines())


def test_three_workers_need_fewer_rounds(published: tuple[profiles.Profile, power.Base]) -> None:
    calls: list[list[str]] = []
    r = bisect.bisect(COMMITS, _measure(published, 11, calls=calls), CELL, "total_tok_s", workers=3)
    assert r.culprit == "c11"
    assert r.rounds <= bisect.serial_rounds(len(COMMITS), 3) == 2 < 4
    assert all(len(c) <= 3 for c in calls[1:])


def test_a_commit_that_does_not_build_is_skipped_and_said_so(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    r = bisect.bisect(
        COMMITS, _measure(published, 11, broken=frozenset({"c08"})), CELL, "total_tok_s"
    )
    assert r.culprit == "c11" and r.suspects == ("c11",)
    assert any(s.commit == "c08" and s.verdict == "skipped" for s in r.steps)
    assert "c08 skipped (could not be measured)" in "\n".join(r.lines())


def test_when_the_commit_before_the_culprit_is_broken_both_are_suspects(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    r = bisect.bisect(
        COMMITS, _measure(published, 9, broken=frozenset({"c08"})), CELL, "total_tok_s"
    )
    assert r.suspects == ("c08", "c09") and r.commits[r.last_same] == "c07"
    assert "the first commit that moved it is one of c08, c09" in "\n".join(r.lines())


def test_no_change_between_good_and_bad_stops_after_one_comparison(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    calls: list[list[str]] = []
    r = bisect.bisect(COMMITS, _measure(published, 99, calls=calls), CELL, "total_tok_s")
    assert r.culprit is None and len(calls) == 1
    assert "no commit moved the figure" in r.lines()[-1]


def _noisy(run: RunFigures) -> RunFigures:
    """RUN with CELL's total tok/s trials spread by ±25 %: its trials cannot place it."""
    cell = run.cells[CELL]
    values = cell.trials["total_tok_s"]
    spread = tuple(v * f for v, f in zip(values, (0.75, 1.0, 1.25), strict=True))
    cells = dict(run.cells)
    cells[CELL] = dataclasses.replace(cell, trials={**cell.trials, "total_tok_s": spread})
    return dataclasses.replace(run, cells=cells)


def _noisy_at(plain: bisect.MeasureMany, commit: str) -> bisect.MeasureMany:
    """PLAIN with COMMIT's runs made noisy (`_noisy`)."""

    def many(commits: Sequence[str]) -> list[RunFigures | None]:
        got = plain(commits)
        return [
            _noisy(r) if c == commit and r is not None else r
            for c, r in zip(commits, got, strict=True)
        ]

    return many


def test_a_commit_its_trials_cannot_place_is_not_resolved_and_searched_around(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    """c08 (before the culprit c09) has trials too noisy to tell it from GOOD or from BAD: it
    is neither "same" nor "moved" but not resolved, and the search names both suspects."""
    plain = _measure(published, 9)
    r = bisect.bisect(COMMITS, _noisy_at(plain, "c08"), CELL, "total_tok_s")
    step = next(s for s in r.steps if s.commit == "c08")
    assert step.verdict == "not resolved"
    assert r.suspects == ("c08", "c09")
    assert "c08" in "\n".join(r.lines()) and ": not resolved" in "\n".join(r.lines())


def test_a_bad_whose_change_is_not_resolved_says_so(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    plain = _measure(published, 99)  # no commit changes the figure
    r = bisect.bisect(COMMITS, _noisy_at(plain, "c16"), CELL, "total_tok_s")
    assert r.bad_outcome == "not resolved" and r.first_moved is None
    assert r.lines()[-1].startswith("not resolved: BAD's change from GOOD is neither shown")
    quiet = bisect.bisect(COMMITS, plain, CELL, "total_tok_s")
    assert quiet.bad_outcome == "same"
    assert quiet.lines()[-1] == "no commit moved the figure: BAD is like GOOD within ±5 %"
