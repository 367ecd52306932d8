"""The compare's judgment of the launch's promised paths: a side whose reasoning field or
tool call broke answers differently, whatever its tokens (bench.verdict.answers)."""

from __future__ import annotations

from bench.answers import Answer, Fingerprint, Promise, answer_sha256
from bench.card.model import Card
from bench.verdict import headline
from bench.verdict.answers import check
from bench.verdict.compare import Policy, compare
from bench.verdict.tables import compare_markdown
from tests.support.fingerprints import BASE
from tests.verdict.test_answers import _side

CALL = 'get_weather({"city": "Paris"})'


def _path(promise: Promise, held: bool, *, text: str = CALL, failed: bool = False) -> Answer:
    name = "tool call" if promise == "tool_call" else "reasoning"
    if failed:
        return Answer(name=name, status="failed", reason="no text in the answer",
                      promise=promise, promise_held=held, promise_detail="no call")  # fmt: skip
    return Answer(name=name, status="answered", text=text, sha256=answer_sha256(text),
                  promise=promise, promise_held=held, promise_detail="d")  # fmt: skip


def _fp(*paths: Answer) -> Fingerprint:
    short = Answer(name="short 1", status="answered", token_ids=BASE, ids_from="logprobs",
                   text="t", sha256=answer_sha256(BASE))  # fmt: skip
    return Fingerprint(version="v1", max_tokens=64, seed=1, answers=(short, *paths))


def test_a_tool_call_that_no_longer_parses_is_b_answering_differently() -> None:
    got = check([_fp(_path("tool_call", True))], [_fp(_path("tool_call", False, text=CALL))])
    assert got.different and [p.name for p in got.counted] == ["tool call"]
    lines = got.lines()
    # no token position: the broken promise is the difference
    assert lines[0].endswith(
        "outputs identical on 1 of 2 prompts; B: the tool call no longer parses."
    )
    assert (
        "- tool call prompt: B: the tool call no longer parses, a difference beyond the sides' own"
        in lines
    )


def test_a_broken_promise_counts_even_when_the_answer_has_no_text() -> None:
    got = check([_fp(_path("tool_call", True))], [_fp(_path("tool_call", False, failed=True))])
    assert got.different and got.counted[0].promise_note == "B: the tool call no longer parses"


def test_a_reasoning_field_gone_and_one_come_back() -> None:
    gone = check([_fp(_path("reasoning", True))], [_fp(_path("reasoning", False))])
    assert gone.counted[0].promise_note == (
        "B: the answer no longer comes back in the reasoning field"
    )
    back = check([_fp(_path("reasoning", False))], [_fp(_path("reasoning", True))])
    assert back.different
    assert back.counted[0].promise_note == (
        "A: the answer comes back in no reasoning field; B's does"
    )


def test_held_on_both_sides_is_judged_by_the_tokens_alone() -> None:
    same = check([_fp(_path("tool_call", True))], [_fp(_path("tool_call", True))])
    assert not same.different and all(p.promise_note is None for p in same.prompts)
    other = 'get_weather({"city": "Rome"})'
    moved = check([_fp(_path("tool_call", True))], [_fp(_path("tool_call", True, text=other))])
    assert moved.different and moved.counted[0].between == CALL.index("Paris")


def test_broken_on_both_sides_is_said_and_does_not_count() -> None:
    got = check([_fp(_path("tool_call", False))], [_fp(_path("tool_call", False))])
    assert not got.different
    assert "- tool call prompt: A and B: the tool call does not parse" in got.lines()


def test_a_side_whose_own_runs_disagree_is_within_the_sides_own_differences() -> None:
    a = [_fp(_path("tool_call", True)), _fp(_path("tool_call", False))]
    got = check(a, [_fp(_path("tool_call", False)), _fp(_path("tool_call", False))])
    assert not got.different
    note = got.prompts[1].promise_note or ""
    assert note.startswith("A's own runs disagree")


def test_a_path_prompt_only_one_launch_promises_is_named_not_compared() -> None:
    got = check([_fp(_path("reasoning", True))], [_fp()])
    assert [p.name for p in got.prompts] == ["short 1"] and not got.different
    assert got.left_out == (
        "reasoning prompt: not in every run's fingerprint (the launches differ)",
    )


def test_compare_refuses_the_figures_when_bs_tool_call_broke(card: Card) -> None:
    a = _side(card, 1, _fp(_path("tool_call", True)))
    b = _side(card, 1, _fp(_path("tool_call", False)))  # the same figures
    c = compare(a, b, Policy())
    assert c.answers.refused
    text = compare_markdown(c)
    assert "B: the tool call no longer parses" in text
    assert headline.verdict(c) == "B ANSWERS DIFFERENTLY: ITS SPEED IS NOT COMPARABLE"
