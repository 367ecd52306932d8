"""Which commit moved a figure? A k-ary search over the commits from GOOD to BAD.

The commits are in order, GOOD first and BAD last. Every test measures one commit (trials
of the one cell, each its own run) and compares it with GOOD by `bench compare`'s test on
that cell's figure: Welch's t on log values, at `alpha` (one test per commit, not a
matrix: no false-discovery correction, but a stricter level than a matrix's 5 %, since a
wrong answer sends the search the wrong way). A commit "moved" when the figure changed in
the direction BAD moved it; it is "the same" only when shown equivalent to GOOD within half
of BAD's move (two one-sided tests at `alpha`, bench.verdict.equivalence), and "not resolved"
otherwise: its trials cannot place it, so the search treats it as it treats a commit that
cannot be measured (its image does not build or its server does not start): skipped, as
`git bisect skip` does, and its neighbours tested instead. BAD itself against GOOD: moved
(the search runs), equivalent within ±5 % (nothing to bisect, exit 1) or not resolved (more
trials a commit would decide, exit 11).

With k workers each round tests k commits spread evenly over the open range, so the range
shrinks k + 1 times per round: ceil(log_(k+1) n) rounds for n commits (k = 1: binary search,
ceil(log2 n) steps). The search assumes, as `git bisect` does, that once a commit moved the
figure every later commit has it moved too.

Answers before figures (bench.verdict.answers, as `bench compare` judges them): every commit
measured is first compared with GOOD by its answer fingerprints. One that answers
differently does different work, so its figure is not judged (verdict "answers"):

- BAD answers differently from GOOD: the search looks for the first commit that answers
  differently instead ("answers differ at commit X"), a commit answering as GOOD does being
  "same" whatever its figure; the figure is not bisected.
- BAD answers as GOOD does but a commit between them does not: that commit is skipped for
  the figure's search (as one that cannot be measured is), and its line says so.

`accept_answers` (`--accept answers`) judges the figures anyway, each such line saying the
answers differ and were accepted.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from bench.verdict import answers
from bench.verdict import equivalence as eqv
from bench.verdict.cells import BY_NAME, Key, RunFigures
from bench.verdict.compare import FigureDelta, Policy, figure_delta

# "answers": it answers differently from GOOD, so its figure is not judged
Verdict = Literal["moved", "same", "not resolved", "skipped", "answers"]
Searched = Literal["figure", "answers"]
# measure(the commits of one round) -> for each, its figures, or None when it cannot be run
MeasureMany = Callable[[Sequence[str]], Sequence[RunFigures | None]]
DEFAULT_ALPHA = 0.01


@dataclass(frozen=True)
class Step:
    round: int
    commit: str
    index: int  # position from GOOD (0) to BAD (n)
    verdict: Verdict
    delta: FigureDelta | None  # against GOOD; None when skipped
    answers: answers.AnswersCheck | None = None  # against GOOD's; None when not measured

    def line(self) -> str:
        head = f"round {self.round}: {self.commit}"
        a = self.answers
        if self.verdict == "answers" and a is not None:
            return f"{head} answers differ from GOOD ({a.summary()}): not judged on the figures"
        if self.delta is None or self.delta.delta_pct is None:
            return f"{head} skipped (could not be measured)"
        d = self.delta
        ci = f" [{d.ci_pct[0]:+.1f} %, {d.ci_pct[1]:+.1f} %]" if d.ci_pct else ""
        p = f", p = {d.p_value:.2g}" if d.p_value is not None else ""
        line = f"{head} {d.delta_pct:+.1f} %{ci}{p}: {self.verdict}"
        if a is not None and a.different:
            line += " (its answers differ from GOOD's; accepted)"
        return line


@dataclass
class Result:
    commits: tuple[str, ...]
    key: Key
    metric: str
    steps: list[Step] = field(default_factory=list)
    last_same: int = 0  # index of the last commit known to be like GOOD
    first_moved: int | None = None  # index of the first commit known to have moved
    # "answers": BAD answers differently, so the first commit that does was searched instead
    searched: Searched = "figure"

    @property
    def culprit(self) -> str | None:
        """The first commit that moved, when its predecessor is known not to (or skipped
        commits lie between them, in which case `suspects` names them all)."""
        return None if self.first_moved is None else self.commits[self.first_moved]

    @property
    def suspects(self) -> tuple[str, ...]:
        if self.first_moved is None:
            return ()
        return self.commits[self.last_same + 1 : self.first_moved + 1]

    @property
    def rounds(self) -> int:
        return max((s.round for s in self.steps), default=0)

    def lines(self) -> list[str]:
        head = f"bisect {self.key[1]} x {self.key[2]} {BY_NAME[self.metric].label}"
        out = [head, *(s.line() for s in self.steps)]
        if self.searched == "answers":
            out.insert(
                1,
                "BAD answers differently from GOOD: the search is for the first commit that "
                "does (a figure shown beside one that answers alike is not judged)",
            )
            return out + self._answers_lines()
        if self.first_moved is None:
            out.append(self._unmoved_line())
            return out
        if len(self.suspects) > 1:
            out.append(
                f"the first commit that moved it is one of {', '.join(self.suspects)} "
                "(the others between could not be measured, or their trials could not place "
                "them: not resolved)"
            )
        else:
            out.append(f"culprit: {self.culprit} (first moved; {self.commits[self.last_same]} "
                       f"before it is like GOOD)")  # fmt: skip
        after = self.commits[self.first_moved + 1 : self.first_moved + 2]
        if after:
            out.append(f"after it: {after[0]}")
        return out

    @property
    def bad_outcome(self) -> Verdict | None:
        """BAD against GOOD (the first step), or None before it was judged."""
        return self.steps[0].verdict if self.steps else None

    def _unmoved_line(self) -> str:
        if self.bad_outcome == "not resolved":
            return (
                f"not resolved: BAD's change from GOOD is neither shown nor within "
                f"±{eqv.DEFAULT_MARGIN_PCT:g} % with these trials; more trials a commit "
                "would decide"
            )
        return f"no commit moved the figure: BAD is like GOOD within ±{eqv.DEFAULT_MARGIN_PCT:g} %"

    def _answers_lines(self) -> list[str]:
        first = self.first_moved if self.first_moved is not None else len(self.commits) - 1
        if len(self.suspects) > 1:
            where = (
                f"answers differ from GOOD from one of {', '.join(self.suspects)} on "
                "(the others between could not be measured)"
            )
        else:
            where = (
                f"answers differ at commit {self.commits[first]} (the first to answer "
                f"differently from GOOD; {self.commits[self.last_same]} before it answers alike)"
            )
        return [
            where,
            "BAD answers differently from GOOD: its speed is not comparable, so the figure "
            "was not bisected (pass --accept answers to bisect it anyway)",
        ]


def judge(
    good: RunFigures,
    other: RunFigures,
    key: Key,
    metric: str,
    *,
    alpha: float,
    direction: float = 0.0,
    accept_answers: bool = False,
) -> tuple[Verdict, FigureDelta | None, answers.AnswersCheck]:
    """Has `metric` of cell `key` moved from GOOD in `other` (the way `direction`'s sign
    says, when it is not 0)? "answers" when OTHER answers differently from GOOD and that
    was not accepted: the figure is not judged."""
    check = answers.check(good.fingerprints, other.fingerprints, accepted=accept_answers)
    if check.refused:
        return "answers", None, check
    a, b = good.cells.get(key), other.cells.get(key)
    if a is None or b is None or a.status != "valid" or b.status != "valid":
        return "skipped", None, check
    d = figure_delta(BY_NAME[metric], a, b, Policy(alpha=alpha, pool=False))
    if d.p_value is None or d.delta_pct is None:
        return "skipped", d, check
    same_way = direction == 0.0 or (d.delta_pct > 0) == (direction > 0)
    if d.p_value < alpha and same_way:
        return "moved", d, check
    # Like GOOD only when shown within half of BAD's move (within the default margin when
    # BAD itself is judged).
    margin = abs(direction) / 2.0 if direction else eqv.DEFAULT_MARGIN_PCT
    n = eqv.trials(a, b, metric)
    assert d.sd_log is not None and d.df is not None
    shown = eqv.tost(eqv.spread(d.delta_pct, d.sd_log, d.df, n), min(margin, 99.0), alpha)
    return ("same" if shown.equivalent else "not resolved"), d, check


def _step(
    rnd: int,
    commit: str,
    index: int,
    good: RunFigures,
    figures: RunFigures | None,
    *,
    key: Key,
    metric: str,
    alpha: float,
    direction: float,
    accept_answers: bool,
) -> Step:
    """One commit of a round judged against GOOD (skipped when it could not be measured)."""
    if figures is None:
        return Step(rnd, commit, index, "skipped", None)
    v, d, c = judge(good, figures, key, metric, alpha=alpha, direction=direction,
                    accept_answers=accept_answers)  # fmt: skip
    return Step(rnd, commit, index, v, d, c)


def _searched_verdict(verdict: Verdict, searched: Searched) -> Verdict:
    """What a step's verdict means for the search: looking for the first commit whose
    answers differ, "answers" is the move and anything else measured is like GOOD; looking
    for the figure, a commit whose answers differ cannot be judged (skipped)."""
    if searched == "answers":
        if verdict == "answers":
            return "moved"
        return "skipped" if verdict == "skipped" else "same"
    return "skipped" if verdict in ("answers", "not resolved") else verdict


def _spread(lo: int, hi: int, k: int, skipped: set[int]) -> list[int]:
    """k commits strictly between lo and hi, evenly spaced, avoiding skipped ones."""
    inside = [i for i in range(lo + 1, hi) if i not in skipped]
    if len(inside) <= k:
        return inside
    step = (len(inside) + 1) / (k + 1)
    return sorted({inside[min(len(inside) - 1, round(step * (j + 1)) - 1)] for j in range(k)})


def bisect(
    commits: Sequence[str],
    measure: MeasureMany,
    key: Key,
    metric: str,
    *,
    workers: int = 1,
    alpha: float = DEFAULT_ALPHA,
    accept_answers: bool = False,
) -> Result:
    """Find the first commit of `commits` (GOOD first, BAD last) whose figure moved, or
    whose answers differ when BAD's do (module docstring)."""
    if len(commits) < 2:
        raise ValueError("bisect needs GOOD and BAD")
    result = Result(tuple(commits), key, metric)
    good, bad = measure([commits[0], commits[-1]])
    if good is None:
        raise RuntimeError(f"GOOD {commits[0]} could not be measured")
    if bad is None:
        raise RuntimeError(f"BAD {commits[-1]} could not be measured")
    verdict, delta, check = judge(good, bad, key, metric, alpha=alpha,
                                  accept_answers=accept_answers)  # fmt: skip
    result.steps.append(Step(0, commits[-1], len(commits) - 1, verdict, delta, check))
    if verdict == "answers":
        result.searched = "answers"
        direction = 0.0
    elif verdict != "moved" or delta is None or delta.delta_pct is None:
        return result
    else:
        direction = delta.delta_pct
    lo, hi = 0, len(commits) - 1
    skipped: set[int] = set()
    rnd = 0
    while True:
        picks = _spread(lo, hi, max(1, workers), skipped)
        if not picks:
            break
        rnd += 1
        got = measure([commits[i] for i in picks])
        verdicts: dict[int, Verdict] = {}
        for i, figures in zip(picks, got, strict=True):
            step = _step(
                rnd, commits[i], i, good, figures, direction=direction,
                alpha=alpha, accept_answers=accept_answers, key=key, metric=metric,
            )  # fmt: skip
            result.steps.append(step)
            verdicts[i] = _searched_verdict(step.verdict, result.searched)
            if verdicts[i] == "skipped":
                skipped.add(i)
        moved = [i for i in picks if verdicts[i] == "moved"]
        if moved:
            hi = min(moved)
        same = [i for i in picks if verdicts[i] == "same" and i < hi]
        if same:
            lo = max(same)
    result.last_same, result.first_moved = lo, hi
    return result


def serial_rounds(n_commits: int, workers: int) -> int:
    """Rounds a search over n commits (GOOD and BAD included) needs with nothing skipped."""
    gaps = n_commits - 1
    return math.ceil(math.log(gaps, workers + 1)) if gaps > 1 else 0
