"""The long-context retrieval check in a compare: "retrieval found A 6/6, B 2/6", a B that
loses retrieval answers differently (exit code, --accept answers), and no verdict when a side
is the twin or A finds the code nowhere."""

from __future__ import annotations

import dataclasses

from bench.answers import Answer, Fingerprint, Retrieval, RetrievalContext, answer_sha256
from bench.card.model import Card
from bench.errors import Exit
from bench.verdict import headline, retrieval
from bench.verdict.answers import check
from bench.verdict.cells import RunFigures
from bench.verdict.command import compare_exit
from bench.verdict.compare import Policy, compare
from bench.verdict.run_figures import from_results
from bench.verdict.settings import parse_accept
from bench.verdict.tables import compare_markdown
from tests.support.synth import make_results

LABELS = ("8K", "16K", "32K", "64K", "128K", "251K")
IDS = tuple(range(100, 164))


def _fp(found: str, *, code: str = "4821-7730", twin: bool = False) -> Fingerprint:
    """A fingerprint whose context answers are alike token for token (so only the retrieval
    can differ); FOUND: one character a long context, "y" found, "n" not, "-" failed."""
    answers, contexts = [], []
    for name, mark in zip(LABELS, found, strict=True):
        if mark == "-":
            answers.append(Answer(name=name, prompt_tokens=8192, status="failed", reason="x"))
        else:
            sha = answer_sha256(IDS)
            answers.append(Answer(name=name, prompt_tokens=8192, status="answered",
                                  token_ids=IDS, ids_from="logprobs", sha256=sha))  # fmt: skip
        contexts.append(
            RetrievalContext(
                name=name,
                prompt_tokens=8192,
                depth_tokens=70,
                status="failed" if mark == "-" else "answered",
                found=None if mark == "-" else mark == "y",
            )
        )
    r = Retrieval(code=code, seed=0, needle_words=32, long_min_tokens=1024,
                  planted_in=LABELS, contexts=tuple(contexts), twin=twin)  # fmt: skip
    return Fingerprint(version="v2", max_tokens=64, seed=1, answers=tuple(answers), retrieval=r)


def test_b_losing_retrieval_answers_differently_with_the_counts() -> None:
    got = check([_fp("yyyyyy")], [_fp("yynnnn")])
    assert got.retrieval is not None and got.retrieval.lost == ("32K", "64K", "128K", "251K")
    assert got.different and got.refused and not got.counted  # the tokens alike: retrieval only
    text = "\n".join(got.lines())
    assert "Retrieval found A 6/6, B 2/6" in text
    assert "B lost retrieval at 32K, 64K, 128K, 251K" in text
    assert "B answers differently: it lost retrieval where A has it." in text


def test_b_retrieving_where_a_does_is_no_difference() -> None:
    got = check([_fp("yyyynn")], [_fp("yyyyyy")])  # B finds more: not a loss
    assert got.retrieval is not None and not got.retrieval.different and not got.different
    assert "Retrieval found A 4/6, B 6/6" in got.lines()[-1]
    assert "B retrieves wherever A does" in got.lines()[-1]


def test_a_context_counts_as_lost_only_when_every_a_run_found_it_and_no_b_run() -> None:
    # 8K: one A run missed it (not A's); 16K: one B run found it (not lost); 32K: lost
    got = retrieval.check([_fp("nyyyyy"), _fp("yyyyyy")], [_fp("nnnyyy"), _fp("nynyyy")])
    assert got is not None
    assert got.found_a == ("16K", "32K", "64K", "128K", "251K") and got.lost == ("32K",)
    assert got.found_b == ("64K", "128K", "251K") and got.runs == (2, 2)


def test_no_verdict_from_the_twin_or_from_a_model_that_cannot_do_the_task() -> None:
    twin = check([_fp("nnnnnn", twin=True)], [_fp("nnnnnn", twin=True)])
    assert twin.retrieval is not None and twin.retrieval.no_verdict is not None
    assert "A and B ran against the twin" in twin.retrieval.no_verdict and not twin.different
    cannot = check([_fp("nnnnnn")], [_fp("nnnnnn")])
    assert cannot.retrieval is not None and not cannot.different
    assert "A found the code at no context" in (cannot.retrieval.no_verdict or "")
    assert "no verdict from it" in cannot.lines()[-1]
    # a B that finds it nowhere while A finds it: that is the loss the check is for
    assert check([_fp("yyyyyy")], [_fp("nnnnnn")]).different


def test_failed_contexts_are_left_out_of_the_counts() -> None:
    got = retrieval.check([_fp("yy-yyy")], [_fp("yyyy-n")])
    assert got is not None and got.contexts == ("8K", "16K", "64K", "251K")
    assert got.lost == ("251K",)


def test_runs_without_the_check_are_no_verdict_and_no_line() -> None:
    old = _fp("yyyyyy").model_copy(update={"retrieval": None})
    got = check([old], [_fp("nnnnnn")])
    assert got.retrieval is None and not got.different
    assert not any("Retrieval" in line for line in got.lines())


def test_other_codes_leave_the_context_prompts_out_and_retrieval_still_judged() -> None:
    a, b = _fp("yyyyyy", code="1111-2222"), _fp("yyyyyy", code="3333-4444")
    b = b.model_copy(update={"answers": tuple(  # B's context answers differ token for token
        x.model_copy(update={"token_ids": IDS[::-1]}) for x in b.answers)})  # fmt: skip
    got = check([a], [b])
    assert not got.different  # not "answers differently": the prompts were not the same
    assert {p.reason for p in got.prompts} == {
        "the runs planted other retrieval codes (other seeds)"
    }
    assert got.retrieval is not None and got.retrieval.no_verdict is None


def _side(card: Card, seed: int, fp: Fingerprint) -> RunFigures:
    figures = from_results(make_results(card, trials=1, noise=0.0, seed=seed), name=f"r{seed}")
    return dataclasses.replace(figures, fingerprints=(fp,))


def test_compare_refuses_the_figures_and_accept_answers_compares_them(card: Card) -> None:
    a, b = _side(card, 1, _fp("yyyyyy")), _side(card, 1, _fp("yynnnn"))
    c = compare(a, b, Policy())
    assert headline.verdict(c) == "B ANSWERS DIFFERENTLY: ITS SPEED IS NOT COMPARABLE"
    assert compare_exit([c]) == Exit.NOT_REPRODUCED
    assert "Retrieval found A 6/6, B 2/6" in compare_markdown(c)
    accepted = compare(a, b, Policy(accept=parse_accept(["answers"])))
    assert accepted.answers.different and not accepted.answers.refused
    same = compare(a, _side(card, 1, _fp("yyyyyy")), Policy())
    assert compare_exit([accepted]) == compare_exit([same]) != Exit.NOT_REPRODUCED
