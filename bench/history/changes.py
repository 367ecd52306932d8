"""Change points in one series of runs: binary segmentation with a permutation threshold.

The method (docs/history.md says why this one): the runs' values are taken as logs, as
`bench compare` takes each run's figures (bench.stats.welch_log: a relative change, the
noise being the spread of whole runs, one value per run). In a segment of n runs, every
split k (at least MIN_SEGMENT runs each side) is scored by the two-sample t of the logs
before against after, with the variance pooled over the segment:

    t_k = |mean(x[:k]) - mean(x[k:])| / (s_pooled * sqrt(1/k + 1/(n - k)))

The best split's t is compared with its distribution over PERMUTATIONS random orders of
the same runs (under "no change" the runs are exchangeable: nightly runs are independent
server starts), which accounts for the search over every split without a formula. A split
whose p = (1 + #{permuted max t >= observed}) / (1 + PERMUTATIONS) is at most ALPHA is a
change; the search goes on in both halves (binary segmentation, Vostrikova 1981; the
permutation threshold as in e-divisive means, Matteson & James 2014, the method Apache
Otava uses, here with the t statistic because the shift sought is one in the mean of
the logs). A flat series is searched once, so ALPHA is its false-alarm rate.

Each change's size is Welch's t on the logs of the runs between it and its neighbouring
changes (bench.stats.welch_log: after against before, Δ % with its 95 % interval).
Randomness is a seeded random.Random: the same series gives the same answer.

No change found is not "stable": the latest span (the runs after the last change, or all of
them) is judged as compare judges a figure (bench.verdict.equivalence): its newer half
against its older half by Welch's t on the logs, EQUIVALENT within ±MARGIN_PCT when the
(1 - 2 EQUIVALENCE_ALPHA) interval lies inside the band, else NOT RESOLVED (the runs vary
too much, or drift, for the span to show it).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from bench import stats

ALPHA = 0.01
MARGIN_PCT = 5.0  # compare's default margin (bench.verdict.equivalence)
EQUIVALENCE_ALPHA = 0.05  # each one-sided test of the latest span's two halves
PERMUTATIONS = 199  # p's resolution 1/200: p <= 0.01 is at most one permuted max t as large
MIN_SEGMENT = 3  # runs on each side of a split
MIN_RUNS = 2 * MIN_SEGMENT


@dataclass(frozen=True)
class Change:
    """A change between runs index - 1 (the last good) and index (the first bad)."""

    index: int
    p_value: float
    shift: stats.Ratio  # the runs after against those before, up to the next changes


@dataclass(frozen=True)
class LatestSpan:
    """The latest span's newer half against its older half, and what that shows."""

    first: int  # index of its first run
    shift: stats.Ratio  # at the (1 - 2 EQUIVALENCE_ALPHA) level
    equivalent: bool  # within ±MARGIN_PCT; else not resolved


@dataclass(frozen=True)
class Search:
    runs: int
    changes: tuple[Change, ...]
    latest: LatestSpan | None = None  # None: under 2 x 2 runs since the last change

    @property
    def searched(self) -> bool:
        return self.runs >= MIN_RUNS


def _max_t(xs: Sequence[float], min_segment: int) -> tuple[float, int]:
    """The largest pooled t over the splits of xs, and its split (prefix sums: O(n))."""
    n = len(xs)
    total = math.fsum(xs)
    total2 = math.fsum(x * x for x in xs)
    s1 = s2 = 0.0
    best, where = -1.0, min_segment
    for k in range(1, n - min_segment + 1):
        s1 += xs[k - 1]
        s2 += xs[k - 1] * xs[k - 1]
        if k < min_segment:
            continue
        r1, r2, m = total - s1, total2 - s2, n - k
        sse = max(0.0, s2 - s1 * s1 / k) + max(0.0, r2 - r1 * r1 / m)
        diff = abs(s1 / k - r1 / m)
        if sse <= 1e-24 * n:
            t = math.inf if diff > 1e-12 else 0.0
        else:
            t = diff / math.sqrt(sse / (n - 2) * (1.0 / k + 1.0 / m))
        if t > best:
            best, where = t, k
    return best, where


def _p_value(
    xs: Sequence[float], observed: float, rng: random.Random, permutations: int, alpha: float
) -> float:
    """The permutation p of the observed max t; stops once p can no longer reach alpha."""
    limit = alpha * (1 + permutations) - 1  # more permuted exceedances than this: not a change
    shuffled = list(xs)
    exceed = 0
    for done in range(1, permutations + 1):
        rng.shuffle(shuffled)
        if _max_t(shuffled, MIN_SEGMENT)[0] >= observed:
            exceed += 1
            if exceed > limit:
                return (1 + exceed) / (1 + done)  # a lower bound of p, already over alpha
    return (1 + exceed) / (1 + permutations)


def search(
    values: Sequence[float],
    *,
    alpha: float = ALPHA,
    permutations: int = PERMUTATIONS,
    seed: int = 0,
) -> Search:
    """The change points of a series of positive figures, one per run, oldest first."""
    if any(not (v > 0 and math.isfinite(v)) for v in values):
        raise ValueError("a series of positive, finite figures")
    logs = [math.log(v) for v in values]
    rng = random.Random(seed)
    found: dict[int, float] = {}
    pending = [(0, len(logs))] if len(logs) >= MIN_RUNS else []
    while pending:
        lo, hi = pending.pop()
        segment = logs[lo:hi]
        observed, k = _max_t(segment, MIN_SEGMENT)
        if observed <= 0:
            continue
        p = _p_value(segment, observed, rng, permutations, alpha)
        if p > alpha:
            continue
        found[lo + k] = p
        pending += [(s, e) for s, e in ((lo, lo + k), (lo + k, hi)) if e - s >= MIN_RUNS]
    bounds = [0, *sorted(found), len(logs)]
    changes = []
    for i, index in enumerate(bounds[1:-1], start=1):
        before, after = values[bounds[i - 1] : index], values[index : bounds[i + 1]]
        changes.append(Change(index, found[index], stats.welch_log(before, after)))
    return Search(len(values), tuple(changes), span(values, bounds[-2]))


def span(values: Sequence[float], first: int) -> LatestSpan | None:
    """VALUES[first:] judged for equivalence within ±MARGIN_PCT, newer half against older."""
    tail = list(values[first:])
    half = len(tail) // 2
    if half < 2:
        return None
    r = stats.welch_log(tail[:half], tail[-half:], level=1.0 - 2.0 * EQUIVALENCE_ALPHA)
    inside = r.low_pct > -MARGIN_PCT and r.high_pct < MARGIN_PCT
    return LatestSpan(first, r, inside)
