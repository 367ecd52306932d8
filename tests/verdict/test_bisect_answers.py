"""Bisect reads the answers before the figures (bench.verdict.bisect): recorded results
whose fingerprints change at one commit, whose figure changes at another (no docker)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from bench.twin import profile as profiles
from bench.verdict import bisect
from bench.verdict.cells import RunFigures
from tests.support.fingerprints import fp_of, ids_at
from tests.verdict.test_bisect import CELL, COMMITS, _measure
from tools import verdict_power as power


def _answering(
    published: tuple[profiles.Profile, power.Base],
    *,
    figure_at: int,
    answers_at: int | None = None,
    only: frozenset[int] = frozenset(),
) -> bisect.MeasureMany:
    """The figure moves from commit FIGURE_AT on; the answers differ from GOOD's from
    ANSWERS_AT on, or at the commits ONLY alone."""
    figures = _measure(published, figure_at)

    def many(commits: Sequence[str]) -> list[RunFigures | None]:
        out: list[RunFigures | None] = []
        for commit, run in zip(commits, figures(commits), strict=True):
            i = COMMITS.index(commit)
            differs = i in only or (answers_at is not None and i >= answers_at)
            fp = fp_of(s=ids_at(3) if differs else ids_at())
            out.append(None if run is None else dataclasses.replace(run, fingerprints=(fp,)))
        return out

    return many


def _text(r: bisect.Result) -> str:
    return "\n".join(r.lines())


def test_bad_answering_differently_bisects_the_answers_not_the_figure(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    r = bisect.bisect(COMMITS, _answering(published, figure_at=11, answers_at=5), CELL,
                      "total_tok_s")  # fmt: skip
    assert r.searched == "answers" and r.culprit == "c05" and r.commits[r.last_same] == "c04"
    bad = r.steps[0]
    assert (bad.commit, bad.verdict, bad.delta) == ("c16", "answers", None)
    text = _text(r)
    assert (
        "round 0: c16 answers differ from GOOD (outputs identical on 0 of 1 prompts; first "
        "difference at token 4 of the s prompt): not judged on the figures"
    ) in text
    assert "answers differ at commit c05 (the first to answer differently from GOOD; c04" in text
    assert "pass --accept answers to bisect it anyway" in text
    assert "culprit:" not in text  # no figure verdict drawn
    assert all(s.delta is None for s in r.steps if s.verdict == "answers")


def test_a_commit_between_that_answers_differently_is_skipped_for_the_figure(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    r = bisect.bisect(COMMITS, _answering(published, figure_at=11, only=frozenset({8})), CELL,
                      "total_tok_s")  # fmt: skip
    assert r.searched == "figure" and r.culprit == "c11" and r.suspects == ("c11",)
    c08 = next(s for s in r.steps if s.commit == "c08")
    assert c08.verdict == "answers" and c08.delta is None
    assert "c08 answers differ from GOOD (" in _text(r)


def test_the_commit_before_the_culprit_answering_differently_makes_both_suspects(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    r = bisect.bisect(COMMITS, _answering(published, figure_at=9, only=frozenset({8})), CELL,
                      "total_tok_s")  # fmt: skip
    assert r.suspects == ("c08", "c09")


def test_accept_answers_bisects_the_figure_and_says_the_answers_differ(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    measure = _answering(published, figure_at=11, answers_at=5)
    r = bisect.bisect(COMMITS, measure, CELL, "total_tok_s", accept_answers=True)
    assert r.searched == "figure" and r.culprit == "c11"
    assert r.steps[0].verdict == "moved"
    assert "(its answers differ from GOOD's; accepted)" in r.steps[0].line()
    assert "culprit: c11" in _text(r)


@pytest.mark.parametrize(
    ("verdict", "searched", "expected"),
    [("answers", "figure", "skipped"), ("moved", "figure", "moved"),
     ("answers", "answers", "moved"), ("moved", "answers", "same"),
     ("same", "answers", "same"), ("skipped", "answers", "skipped")],
)  # fmt: skip
def test_what_a_verdict_means_to_each_search(verdict: str, searched: str, expected: str) -> None:
    assert bisect._searched_verdict(verdict, searched) == expected  # type: ignore[arg-type]
