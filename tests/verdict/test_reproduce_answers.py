"""`bench reproduce` and the answers: recorded against a card (which carries none), judged
against reference bundles as compare judges B against A (bench.verdict.reproduce)."""

from __future__ import annotations

import dataclasses

from bench.answers import Fingerprint
from bench.card.model import Card
from bench.errors import Exit
from bench.verdict.card_source import from_card
from bench.verdict.cells import RunFigures
from bench.verdict.reproduce import Tolerances, reproduce
from bench.verdict.run_figures import from_results
from bench.verdict.run_source import merge_runs
from bench.verdict.settings import parse_accept
from bench.verdict.tables import reproduce_markdown
from tests.support.fingerprints import BASE, fp_of, ids_at
from tests.support.synth import make_results


def _run(card: Card, fp: Fingerprint | None, seed: int = 1) -> RunFigures:
    figures = from_results(make_results(card, speed=10.0, seed=seed), name=f"r{seed}")
    return dataclasses.replace(figures, fingerprints=(fp,))


def test_against_a_card_alone_the_runs_fingerprint_is_recorded(card: Card) -> None:
    fp = fp_of(s=BASE, k=ids_at(3))
    r = reproduce(_run(card, fp), from_card(card), Tolerances())
    assert r.reproduced and r.answers is None
    line = (
        "Answers: the card carries no answers; this run's fingerprint: 2 prompts (2 answered), "
        f"prompt set v1, hash {fp.digest[:16]} (pass --reference BUNDLE to compare a later run's)."
    )
    assert r.answers_lines() == [line]
    assert line in reproduce_markdown(r)
    none = reproduce(_run(card, None), from_card(card), Tolerances())
    assert none.answers_lines()[0].startswith(
        "Answers: the card carries no answers; this run has no fingerprint"
    )


def test_the_digest_is_one_per_set_of_answers() -> None:
    assert fp_of(s=BASE).digest == fp_of(s=BASE).digest
    assert fp_of(s=BASE).digest != fp_of(s=ids_at(5)).digest
    assert fp_of(s=BASE).digest != fp_of(t=BASE).digest  # another prompt's name
    assert fp_of(s=BASE).digest != fp_of("v2", s=BASE).digest


def test_a_reference_that_answered_alike_leaves_the_verdict_as_it_was(card: Card) -> None:
    ref = _run(card, fp_of(s=BASE), seed=2)
    r = reproduce(_run(card, fp_of(s=BASE)), from_card(card), Tolerances(), reference=ref)
    assert r.reproduced and r.answers is not None and not r.answers.different
    text = reproduce_markdown(r)
    assert "Answers against the reference (A: the reference, B: this run):" in text
    assert "outputs identical on 1 of 1 prompts." in text


def test_a_run_answering_differently_from_the_reference_is_not_reproduced(card: Card) -> None:
    ref = _run(card, fp_of(s=BASE), seed=2)
    ours = _run(card, fp_of(s=ids_at(12)))
    r = reproduce(ours, from_card(card), Tolerances(), reference=ref)
    assert r.overall == "NOT REPRODUCED" and r.exit_code == Exit.NOT_REPRODUCED
    assert r.failed == []  # the figures alone reproduce
    assert "first difference at token 13 of the s prompt" in reproduce_markdown(r)
    assert r.summary().endswith(
        "; this run answers differently from the reference: its speed is not comparable "
        "(--accept answers judges the figures anyway)"
    )
    accepted = reproduce(ours, from_card(card), Tolerances(), parse_accept(["answers"]), ref)
    assert accepted.reproduced
    assert accepted.summary().endswith(
        "; this run answers differently from the reference (accepted)"
    )


def test_the_within_side_rule_among_the_references_runs(card: Card) -> None:
    """The reference's own runs differ from token 5 on: a difference at token 13 is within."""
    refs = merge_runs(
        [_run(card, fp_of(s=BASE), 2), _run(card, fp_of(s=ids_at(4)), 3)],
        "reference",
    )
    r = reproduce(
        _run(card, fp_of(s=ids_at(12))),
        from_card(card),
        Tolerances(),
        reference=refs,
    )
    assert r.answers is not None and r.answers.runs == (2, 1) and not r.answers.different
    assert r.reproduced
