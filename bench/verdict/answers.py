"""Answers before figures: do A and B answer the fingerprint's prompts alike?

A faster B that answers differently does different work (a broken sampler, attention path
or speculative decoding), so its speed is not comparable. Per prompt of the fingerprint
(bench.answers) that both sides answered:

- what is compared: the token ids when every answer of the prompt has them, else the text;
- between A and B: the first difference of the closest pair (an A run and a B run); none
  when some A run and some B run answered identically;
- within a side: the earliest first difference between two of its own runs (greedy
  decoding is not bit-exact across batch shapes on every engine); unknown with one run;
- the within-side rule: a difference between A and B counts only when it comes before
  every difference within A and within B (at an earlier token, or where the sides' own runs
  agree throughout). One run a side: no within-side estimate, so every difference counts.

The prompts of the paths the launch promises (bench.answers: a reasoning field, a tool call
that parses) are compared by their tokens as the others are, and by the promise: when it held
in every run of one side and broke in every run of the other, that prompt differs and counts
("B: the tool call no longer parses"); when a side's own runs disagree on it, the difference
is within that side and does not count; when it broke on both sides, the lines say so.

B answers differently when at least one prompt's difference counts. The verdict then says
"B answers differently: its speed is not comparable" and exits as a changed verdict
(whatever the figures say), unless `--accept answers`, which compares the figures anyway
and says so. Runs without a fingerprint (older bundles, --no-fingerprint) are left out;
with none on a side, the answers are not checked and the verdict says so.

The long-context retrieval check rides on the context prompts (bench.verdict.retrieval): a
B that loses retrieval A has answers differently too. When the sides planted other codes
(runs of other seeds), the prompts that carried them are not compared token by token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations, product
from typing import Literal

from bench import escape
from bench.answers import Answer, Fingerprint, Promise
from bench.verdict import retrieval as retrieval_mod
from bench.verdict.retrieval import RetrievalCheck

Unit = Literal["token", "character"]
Seq = tuple[int, ...] | str
# What a side whose promise broke no longer does, and what neither side does.
_BROKEN: dict[Promise, str] = {
    "reasoning": "the answer no longer comes back in the reasoning field",
    "tool_call": "the tool call no longer parses",
}
_NEITHER: dict[Promise, str] = {
    "reasoning": "the answer comes back in no reasoning field",
    "tool_call": "the tool call does not parse",
}


@dataclass(frozen=True)
class PromptCheck:
    name: str
    unit: Unit = "token"
    between: int | None = None  # 0-based first difference of the closest A-B pair
    within_a: int | None = None  # earliest first difference among A's own runs
    within_b: int | None = None
    reason: str | None = None  # set: not compared (why)
    promise_note: str | None = None  # what the sides' promise (reasoning, tool call) did
    promise_counts: bool = False  # it held on one side throughout and broke on the other

    @property
    def compared(self) -> bool:
        return self.reason is None

    @property
    def differs(self) -> bool:
        return self.compared and (self.between is not None or self.promise_counts)

    @property
    def within(self) -> int | None:
        seen = [w for w in (self.within_a, self.within_b) if w is not None]
        return min(seen) if seen else None

    @property
    def counts(self) -> bool:
        """The within-side rule: a difference before every difference within the sides."""
        if self.promise_counts:
            return True
        within = self.within
        return self.differs and (within is None or (self.between or 0) < within)


@dataclass(frozen=True)
class AnswersCheck:
    prompts: tuple[PromptCheck, ...] = ()
    runs: tuple[int, int] = (0, 0)  # fingerprints compared, A and B
    version: str = ""
    max_tokens: int = 0
    absent: str | None = None  # set: nothing compared (why)
    left_out: tuple[str, ...] = ()  # runs without a comparable fingerprint
    accepted: bool = False  # --accept answers
    retrieval: RetrievalCheck | None = None  # None: no side's runs recorded it

    @property
    def compared(self) -> list[PromptCheck]:
        return [p for p in self.prompts if p.compared]

    @property
    def counted(self) -> list[PromptCheck]:
        return [p for p in self.prompts if p.counts]

    @property
    def different(self) -> bool:
        """B answers differently beyond the differences within A and within B, or loses
        retrieval where A has it."""
        lost = self.retrieval is not None and self.retrieval.different
        return self.absent is None and (bool(self.counted) or lost)

    @property
    def refused(self) -> bool:
        """The figures are not judged: B answers differently and it was not accepted."""
        return self.different and not self.accepted

    def headline(self) -> str | None:
        if not self.different:
            return None
        if self.accepted:
            return "B answers differently (accepted: its figures are compared anyway)"
        return "B answers differently: its speed is not comparable"

    def summary(self) -> str:
        """The answers in one line: 'outputs identical on N of M prompts; first difference
        at token T of the P prompt' (or why nothing was compared), broken promises named."""
        if self.absent is not None:
            return self.absent
        compared, differing = self.compared, [p for p in self.compared if p.differs]
        out = f"outputs identical on {len(compared) - len(differing)} of {len(compared)} prompts"
        by_token = [p for p in differing if p.between is not None]
        if by_token:
            first = min(by_token, key=lambda p: (p.between or 0, p.name))
            out += f"; first difference at {_at(first.unit, first.between)} of the {_name(first)}"
        out += "".join(f"; {p.promise_note}" for p in differing if p.promise_counts)
        return out

    def lines(self) -> list[str]:
        if self.absent is not None:
            return [f"Answers: {self.absent}; the figures are judged without them."]
        compared, differing = self.compared, [p for p in self.compared if p.differs]
        head = (
            f"Answers (fingerprint {escape.terminal(self.version)}, {self.max_tokens} tokens "
            f"a prompt, temperature 0; A {self.runs[0]} run(s), B {self.runs[1]} run(s)): "
            f"{self.summary()}"
        )
        out = [head + "."]
        if 1 in self.runs:
            out.append(
                "Within-side rule: with one run on a side, its own differences are unknown, "
                "so every difference between A and B counts."
            )
        else:
            out.append(
                "Within-side rule: a difference between A and B counts only before the "
                "earliest difference between a side's own runs."
            )
        own = [p for p in compared if p.within is not None]
        out += [
            f"- {_name(p)}: {side}'s own runs differ from {_at(p.unit, w)}"
            for p in own
            for side, w in (("A", p.within_a), ("B", p.within_b))
            if w is not None
        ]
        out += [
            f"- {_name(p)}: {p.promise_note}"
            + (", a difference beyond the sides' own" if p.promise_counts else "")
            for p in compared
            if p.promise_note is not None
        ]
        for p in differing:
            if p.between is None:
                continue
            where = f"{_name(p)}: first difference at {_at(p.unit, p.between)}"
            if p.counts:
                beyond = "beyond the sides' own differences"
                if p.within is not None:
                    beyond = f"before the sides' own differ ({_at(p.unit, p.within)}): " + beyond
                out.append(f"- {where}, {beyond}")
            else:
                out.append(f"- {where}, within the sides' own differences")
        out += [f"- {_name(p)}: not compared ({p.reason})" for p in self.prompts if not p.compared]
        out += [f"- left out: {why}" for why in self.left_out]
        if self.retrieval is not None:
            out += self.retrieval.lines()
        if self.different:
            names = ", ".join(escape.terminal(p.name) for p in self.counted)
            if self.counted:
                out.append(f"B answers differently on {len(self.counted)} prompt(s) ({names}).")
            else:
                out.append("B answers differently: it lost retrieval where A has it.")
            out.append(
                "The figures are compared anyway (--accept answers)."
                if self.accepted
                else "Its figures are not compared: pass --accept answers to compare them anyway."
            )
        return out


def _name(p: PromptCheck) -> str:
    return f"{escape.terminal(p.name)} prompt"


def _at(unit: Unit, index: int | None) -> str:
    return f"{unit} {(index or 0) + 1}"


def first_difference(x: Seq, y: Seq) -> int | None:
    """0-based index of the first difference; None when identical (a prefix differs at its
    end)."""
    for i, (a, b) in enumerate(zip(x, y, strict=False)):
        if a != b:
            return i
    return None if len(x) == len(y) else min(len(x), len(y))


def check(
    a: Sequence[Fingerprint | None], b: Sequence[Fingerprint | None], *, accepted: bool = False
) -> AnswersCheck:
    """The answers of A's runs against B's (module docstring)."""
    left_out = [f"A run {i + 1}: no fingerprint" for i, f in enumerate(a) if f is None]
    left_out += [f"B run {i + 1}: no fingerprint" for i, f in enumerate(b) if f is None]
    fa, fb = [f for f in a if f is not None], [f for f in b if f is not None]
    if not fa or not fb:
        side = " and ".join(s for s, f in (("A", fa), ("B", fb)) if not f)
        return AnswersCheck(absent=f"fingerprints absent ({side})", accepted=accepted)
    ref = fa[0]

    def same_set(f: Fingerprint) -> bool:
        return (f.version, f.max_tokens, f.seed) == (ref.version, ref.max_tokens, ref.seed)

    for side, runs in (("A", fa), ("B", fb)):
        left_out += [
            f"{side} run with prompt set {escape.terminal(f.version)} "
            f"(not {escape.terminal(ref.version)})"
            for f in runs
            if not same_set(f)
        ]
    fa, fb = [f for f in fa if same_set(f)], [f for f in fb if same_set(f)]
    if not fb:
        return AnswersCheck(
            absent="B's fingerprints use another prompt set than A's",
            left_out=tuple(left_out),
            accepted=accepted,
        )
    names = [x.name for x in ref.answers if all(f.answer(x.name) for f in (*fa, *fb))]
    # A path prompt (reasoning, tool call) is in the runs whose launch promises the path.
    seen = dict.fromkeys(x.name for f in (*fa, *fb) for x in f.answers)
    left_out += [
        f"{escape.terminal(n)} prompt: not in every run's fingerprint (the launches differ)"
        for n in seen
        if n not in names
    ]
    planted = _other_codes(fa, fb)
    prompts = tuple(
        PromptCheck(n, reason="the runs planted other retrieval codes (other seeds)")
        if n in planted
        else _prompt([f.answer(n) for f in fa], [f.answer(n) for f in fb], n)
        for n in names
    )
    return AnswersCheck(
        prompts=prompts,
        runs=(len(fa), len(fb)),
        version=ref.version,
        max_tokens=ref.max_tokens,
        left_out=tuple(left_out),
        accepted=accepted,
        retrieval=retrieval_mod.check(fa, fb),
    )


def _promise(a: list[Answer | None], b: list[Answer | None]) -> tuple[str | None, bool]:
    """What the sides' promise did (module docstring), and whether it counts."""
    promise = next((x.promise for x in (*a, *b) if x is not None and x.promise), None)
    if promise is None:
        return None, False
    held = [
        {x.promise_held for x in side if x is not None and x.promise_held is not None}
        for side in (a, b)
    ]
    if not held[0] or not held[1]:
        return None, False
    mixed = [s for s, h in zip("AB", held, strict=True) if len(h) > 1]
    if mixed:
        return f"{' and '.join(mixed)}'s own runs disagree: {_NEITHER[promise]} in some", False
    if held[0] == held[1]:
        return (None if True in held[0] else f"A and B: {_NEITHER[promise]}"), False
    if True in held[0]:
        return f"B: {_BROKEN[promise]}", True
    return f"A: {_NEITHER[promise]}; B's does", True


def _other_codes(fa: list[Fingerprint], fb: list[Fingerprint]) -> set[str]:
    """The prompts that carried a retrieval code, when the runs' codes differ."""
    codes = {f.retrieval.code if f.retrieval else None for f in (*fa, *fb)}
    if len(codes) < 2:
        return set()
    return {n for f in (*fa, *fb) if f.retrieval for n in f.retrieval.planted_in}


def _prompt(a: list[Answer | None], b: list[Answer | None], name: str) -> PromptCheck:
    note, counts = _promise(a, b)
    for side, answers in (("A", a), ("B", b)):
        failed = next((x for x in answers if x is None or x.status != "answered"), None)
        if failed is not None:
            why = "missing" if failed is None else f"{failed.status}: {failed.reason or '?'}"
            if counts:  # the broken promise is the difference; the tokens are not compared
                return PromptCheck(name, promise_note=note, promise_counts=True)
            return PromptCheck(name, reason=f"{side}: {escape.terminal(why)}")
    both = [x for x in (*a, *b) if x is not None]
    unit: Unit = "token" if all(x.token_ids is not None for x in both) else "character"

    def seq(x: Answer | None) -> Seq:
        assert x is not None
        return (x.token_ids or ()) if unit == "token" else x.text

    sa, sb = [seq(x) for x in a], [seq(x) for x in b]
    pairs = [first_difference(x, y) for x, y in product(sa, sb)]
    between = None if None in pairs else max(p for p in pairs if p is not None)
    return PromptCheck(name, unit, between, _within(sa), _within(sb), None, note, counts)


def _within(runs: list[Seq]) -> int | None:
    found = [d for x, y in combinations(runs, 2) if (d := first_difference(x, y)) is not None]
    return min(found) if found else None
