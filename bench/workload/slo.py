"""Service-level objectives: `--slo 'ttft_p99<=2s,tpot_p99<=80ms'` parsed, and a p99 bound
judged the way MLPerf Inference's loadgen judges its Server scenario (early stopping).

The rule. Of n requests, t were over the bound. Were the true share of requests over it
exactly 1 - p (p = 0.99: the p99 sits on the bound), seeing t or fewer would have
probability F(t) = P(X <= t), X ~ Binomial(n, 1 - p). The bound is **met** when
F(t) < 1 - c (c = 0.99): so few overs are that unlikely at the limit. It is **missed**
when P(X >= t) <= 1 - c: that many overs are that unlikely at the limit. Otherwise it is
**undecided**: the requests cannot tell. For met, undecided or missed alike `more_needed`
says how many further requests, every one under the bound, would make it met (MLPerf's
"would need to run at least N more queries"). In loadgen's terms (loadgen/early_stopping.cc):
the smallest h with I_p(h, t + 1) < 1 - c, and the run passes when n >= h + t; the two
are the same condition, I_p(n - t, t + 1) being F(t).
"""

from __future__ import annotations

import re

from bench.distributions import binom_cdf, first_true
from bench.errors import UsageError
from bench.workload_points import SloCheck
from bench.workload_spec import Slo

PERCENTILE = 0.99
CONFIDENCE = 0.99
_FIGURES = ("ttft", "tpot", "e2el")
_TERM = re.compile(
    r"^(ttft|tpot|e2el)_p(50|90|95|99)\s*<=\s*([0-9]+(?:\.[0-9]+)?(?:e-?[0-9]+)?)\s*(ms|s)$"
)
MAX_MORE = 10_000_000  # past this many requests more, "more than" is said instead


def parse(text: str) -> Slo:
    """'ttft_p99<=2s,tpot_p99<=80ms' -> Slo; anything else is one UsageError line."""
    bounds: dict[str, float] = {}
    for raw in text.split(","):
        term = raw.strip()
        m = _TERM.match(term)
        if m is None:
            raise UsageError(
                f"--slo term {term[:60]!r} does not parse",
                hint="write FIGURE_pQ<=VALUE(s|ms), FIGURE one of ttft, tpot, e2el and Q one "
                "of 50, 90, 95, 99, comma-separated: ttft_p99<=2s,tpot_p99<=80ms",
            )
        figure, q, value, unit = m.groups()
        seconds = float(value) / (1000.0 if unit == "ms" else 1.0)
        if not 0.0 < seconds <= 86400.0:
            raise UsageError(f"--slo bound {term!r} must be above 0 and at most a day")
        key = f"{figure}_p{q}"
        if key in bounds:
            raise UsageError(f"--slo names {key} twice")
        bounds[key] = seconds
    return Slo(**{f"{k}_s": v for k, v in bounds.items()})


def text(slo: Slo) -> str:
    """The bounds as `--slo` takes them: 'ttft_p99<=2s,tpot_p99<=0.08s'."""
    return ",".join(f"{f}_p{q}<={v:g}s" for f, q, v in slo.terms())


def verdict(n: int, over: int, p: float = PERCENTILE, c: float = CONFIDENCE) -> str:
    """met, missed or undecided (module docstring)."""
    if n <= 0:
        return "undecided"
    share = 1.0 - p
    if binom_cdf(over, n, share) < 1.0 - c:
        return "met"
    if over > 0 and 1.0 - binom_cdf(over - 1, n, share) <= 1.0 - c:
        return "missed"
    return "undecided"


def more_needed(n: int, over: int, p: float = PERCENTILE, c: float = CONFIDENCE) -> int | None:
    """The fewest further requests, each under the bound, that would make it met; 0 when it
    is; None past MAX_MORE."""
    share = 1.0 - p

    def met(extra: int) -> bool:
        return binom_cdf(over, n + extra, share) < 1.0 - c

    if met(0):
        return 0
    hi = 1
    while not met(hi):
        if hi >= MAX_MORE:
            return None
        hi = min(hi * 2, MAX_MORE)
    return first_true(met, hi // 2, hi)


def judge(figure: str, values: list[float], bound_s: float, q: int = 99) -> SloCheck:
    """One figure's per-request values against its q-th percentile's bound (client
    seconds): at most a share 1 - q/100 of requests may lie over it."""
    over = sum(v > bound_s for v in values)
    n, p = len(values), q / 100.0
    return SloCheck(
        figure=figure,
        percentile=q,
        bound_s=bound_s,
        n=n,
        over=over,
        verdict=verdict(n, over, p),
        more_needed=more_needed(n, over, p),
        confidence=CONFIDENCE,
    )
