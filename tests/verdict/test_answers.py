"""Answers before figures: the within-side rule, what compare says, and its exit codes."""

from __future__ import annotations

import dataclasses

import pytest

from bench.answers import Fingerprint
from bench.card.model import Card
from bench.errors import Exit, UsageError
from bench.verdict import answers, headline, page
from bench.verdict.answers import PromptCheck, check, first_difference
from bench.verdict.cells import RunFigures
from bench.verdict.command import compare_exit
from bench.verdict.compare import Policy, compare
from bench.verdict.run_figures import from_results
from bench.verdict.run_source import merge_runs
from bench.verdict.settings import parse_accept
from bench.verdict.tables import compare_markdown
from tests.support.fingerprints import BASE, fp_of, ids_at
from tests.support.synth import make_results


def test_first_difference() -> None:
    assert first_difference((1, 2, 3), (1, 2, 3)) is None
    assert first_difference((1, 2, 3), (1, 9, 3)) == 1
    assert first_difference((1, 2), (1, 2, 3)) == 2  # a prefix differs at its end
    assert first_difference("abc", "abd") == 2


def test_identical_answers_match_everywhere() -> None:
    got = check([fp_of(s=BASE, k=BASE)], [fp_of(s=BASE, k=BASE)])
    assert not got.different and [p.between for p in got.prompts] == [None, None]
    assert got.lines()[0].endswith("outputs identical on 2 of 2 prompts.")


def test_one_run_a_side_every_difference_counts() -> None:
    got = check([fp_of(s=BASE, k=BASE)], [fp_of(s=BASE, k=ids_at(22))])
    assert got.different and got.refused and [p.name for p in got.counted] == ["k"]
    text = "\n".join(got.lines())
    assert (
        "outputs identical on 1 of 2 prompts; first difference at token 23 of the k prompt" in text
    )
    assert "with one run on a side, its own differences are unknown" in text
    assert got.headline() == "B answers differently: its speed is not comparable"


def test_a_difference_after_the_sides_own_differences_does_not_count() -> None:
    # A's own two runs depart at token 13; B departs from both at token 41: within the noise.
    a = [fp_of(k=BASE), fp_of(k=ids_at(12, by=7))]
    b = [fp_of(k=ids_at(40)), fp_of(k=ids_at(40))]
    got = check(a, b)
    (p,) = got.prompts
    assert (p.between, p.within_a, p.within_b, p.counts) == (40, 12, None, False)
    assert not got.different and got.headline() is None
    assert (
        "- k prompt: first difference at token 41, within the sides' own differences" in got.lines()
    )


def test_a_difference_before_the_sides_own_differences_counts() -> None:
    a = [
        fp_of(k=BASE),
        fp_of(k=ids_at(40)),
    ]  # A's own runs differ from token 41
    b = [
        fp_of(k=ids_at(5)),
        fp_of(k=ids_at(5)),
    ]  # B departs from every A run at token 6
    got = check(a, b)
    (p,) = got.prompts
    assert (p.between, p.within, p.counts) == (5, 40, True)
    assert got.different
    assert any("before the sides' own differ (token 41)" in line for line in got.lines())


def test_b_matching_one_of_as_runs_is_no_difference() -> None:
    a = [fp_of(k=BASE), fp_of(k=ids_at(3))]
    b = [fp_of(k=ids_at(3)), fp_of(k=ids_at(3))]
    (p,) = check(a, b).prompts
    assert p.between is None and not p.differs


def test_bs_own_differences_count_too() -> None:
    a = [fp_of(k=BASE), fp_of(k=BASE)]
    b = [
        fp_of(k=ids_at(20)),
        fp_of(k=ids_at(2, by=3)),
    ]  # B's own runs differ from token 3
    (p,) = check(a, b).prompts
    assert (p.within_a, p.within_b) == (None, 2)
    assert p.between == 20 and not p.counts  # B's closest run departs at 21, after 3


def test_text_only_answers_are_compared_by_character() -> None:
    got = check([fp_of(k="hello world")], [fp_of(k="hello there")])
    (p,) = got.prompts
    assert (p.unit, p.between) == ("character", 6)
    assert "first difference at character 7 of the k prompt" in got.lines()[0]


def test_failed_answers_are_not_compared_and_named() -> None:
    got = check([fp_of(k=BASE, s=BASE)], [fp_of(k=None, s=BASE)])
    assert not got.different and len(got.compared) == 1
    assert "- k prompt: not compared (B: failed: HTTP 500: boom)" in got.lines()


def test_absent_and_other_versions() -> None:
    assert check([None], [fp_of(k=BASE)]).absent == "fingerprints absent (A)"
    assert check([], []).absent == "fingerprints absent (A and B)"
    older = check([fp_of(k=BASE)], [fp_of("v2", k=ids_at(0))])
    assert older.absent == "B's fingerprints use another prompt set than A's"
    assert not older.different
    mixed = check([fp_of(k=BASE), None], [fp_of(k=BASE)])
    assert mixed.runs == (1, 1) and mixed.left_out == ("A run 2: no fingerprint",)


def test_prompts_only_one_side_sent_are_not_compared() -> None:
    got = check([fp_of(s=BASE, k=BASE)], [fp_of(s=BASE)])  # B planned no such context
    assert [p.name for p in got.prompts] == ["s"]


def test_a_hostile_prompt_name_is_escaped_in_the_lines() -> None:
    got = check([fp_of(**{"k\x1b[2J": BASE})], [fp_of(**{"k\x1b[2J": ids_at(1)})])
    assert all("\x1b" not in line for line in got.lines())


def test_prompt_check_counts_only_a_compared_difference() -> None:
    assert not PromptCheck("x", reason="A: failed").counts
    assert PromptCheck("x", between=3).counts
    assert not PromptCheck("x", between=3, within_b=3).counts
    assert PromptCheck("x", between=2, within_a=9, within_b=3).counts


# -- in compare --------------------------------------------------------------------------


def _side(card: Card, seed: int, fp: Fingerprint | None) -> RunFigures:
    figures = from_results(make_results(card, trials=1, noise=0.0, seed=seed), name=f"r{seed}")
    return dataclasses.replace(figures, fingerprints=(fp,))


def test_compare_refuses_the_figures_of_b_answering_differently(card: Card) -> None:
    a = _side(card, 1, fp_of(k=BASE))
    b = _side(card, 2, fp_of(k=ids_at(22)))
    c = compare(a, b, Policy())
    assert c.answers.refused
    assert headline.verdict(c) == "B ANSWERS DIFFERENTLY: ITS SPEED IS NOT COMPARABLE"
    assert compare_exit([c]) == Exit.NOT_REPRODUCED
    text = compare_markdown(c)
    assert text.index("Answers (fingerprint v1") < text.index("B ANSWERS DIFFERENTLY")
    assert "pass --accept answers to compare them anyway" in text
    assert "| Context |" not in text  # no figure table


def test_accept_answers_compares_the_figures_anyway_and_says_so(card: Card) -> None:
    a = _side(card, 1, fp_of(k=BASE))
    b = _side(card, 1, fp_of(k=ids_at(22)))  # the same figures
    c = compare(a, b, Policy(accept=parse_accept(["answers"])))
    assert c.answers.different and not c.answers.refused
    assert headline.verdict(c).startswith(
        "B ANSWERS DIFFERENTLY (ACCEPTED: ITS FIGURES ARE COMPARED"
    )
    assert compare_exit([c]) == compare_exit([compare(a, _side(card, 1, fp_of(k=BASE)), Policy())])
    assert "The figures are compared anyway (--accept answers)." in compare_markdown(c)


def test_same_answers_leave_the_figures_verdict_as_it_was(card: Card) -> None:
    a = _side(card, 1, fp_of(k=BASE))
    b = _side(card, 1, fp_of(k=BASE))
    c = compare(a, b, Policy())
    without = compare(_side(card, 1, None), _side(card, 1, None), Policy())
    assert headline.verdict(c) == headline.verdict(without) and compare_exit([c]) == compare_exit(
        [without]
    )
    assert "outputs identical on 1 of 1 prompts" in compare_markdown(c)
    assert "Answers: fingerprints absent (A and B)" in compare_markdown(without)


def test_settings_that_differ_still_win_the_exit_code(card: Card) -> None:
    a = _side(card, 1, fp_of(k=BASE))
    b = dataclasses.replace(_side(card, 2, fp_of(k=ids_at(0))), settings={"window_s": "99"})
    a = dataclasses.replace(a, settings={"window_s": "30"})
    assert compare_exit([compare(a, b, Policy())]) == Exit.NOT_COMPARABLE


def test_merged_sides_keep_every_runs_fingerprint(card: Card) -> None:
    a1, a2 = (
        _side(card, 1, fp_of(k=BASE)),
        _side(card, 3, fp_of(k=ids_at(30))),
    )
    merged = merge_runs([a1, a2], "A (2 runs)")
    assert merged.fingerprints == (*a1.fingerprints, *a2.fingerprints)
    got = answers.check(merged.fingerprints, _side(card, 2, fp_of(k=ids_at(31))).fingerprints)
    assert got.prompts[0].within_a == 30 and not got.different


def test_answers_is_accepted_by_name_only() -> None:
    assert "answers" in parse_accept(["answers,window_s"])
    assert "answers" not in parse_accept(["all"])
    with pytest.raises(UsageError, match="unknown setting answer"):
        parse_accept(["answer"])


def test_the_html_page_says_it_and_draws_no_figures_when_refused(card: Card) -> None:
    c = compare(
        _side(card, 1, fp_of(k=BASE)),
        _side(card, 2, fp_of(k=ids_at(22))),
        Policy(),
    )
    html = page.compare_page([c])
    assert "first difference at token 23 of the k prompt" in html
    assert 'class="verdict fail">B ANSWERS DIFFERENTLY: ITS SPEED IS NOT COMPARABLE<' in html
    assert "data:image/png" not in html and "<table" not in html
