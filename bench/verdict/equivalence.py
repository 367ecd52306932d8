"""The third outcome of a compare: equivalent within a margin, or not resolved.

A figure that `compare` did not find changed is one of two things, and the verdict says
which: EQUIVALENT within ±m when the runs show that its change is smaller than the margin,
NOT RESOLVED when they cannot tell (absence of evidence is not evidence of absence).

- The margin m: `Policy.margin_pct` (5 % unless --margin says otherwise), or a figure's own
  (`--margin ttft_s=10`); the band is Δ % in (−m, +m), on the log scale
  (log(1 − m), log(1 + m)).
- The test: Schuirmann's two one-sided tests at the compare's alpha each: equivalent when the
  (1 − 2 alpha) interval of Δ lies inside the band. Δ is the change B shows against A as
  measured (its geometric means), and its standard error is the figure's own (the per-figure
  test's, pooled and moderated where the compare pooled) plus, with the run-level model,
  that of the run levels' difference: a change of the whole run counts against equivalence
  as much as a change of the cell. Degrees of freedom: Welch–Satterthwaite over the two.
- A cell is equivalent when every figure is; the run when every compared cell is. These
  are intersection-union tests: each claim holds at alpha with no multiplicity correction.
- Not resolved: how many runs a side would show ±m with 80 % power if nothing changed, at
  the noise measured (`runs_to_show`); the headline adds the MDEs the compare printed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from bench import distributions, stats
from bench.verdict.cells import Cell

Outcome = Literal["changed", "equivalent", "not resolved"]
DEFAULT_MARGIN_PCT = 5.0
POWER = 0.80
MAX_RUNS = 100_000


@dataclass(frozen=True)
class LogSpread:
    """A figure's change on the log scale: log(B / A), its standard error and df."""

    centre: float
    se: float
    df: float


@dataclass(frozen=True)
class Equivalence:
    """One figure's two one-sided tests against its margin."""

    margin_pct: float
    low_pct: float  # the (1 - 2 alpha) interval of Δ %
    high_pct: float
    equivalent: bool
    spread: LogSpread


def _quantile(p: float, df: float) -> float:
    return distributions.norm_ppf(p) if math.isinf(df) else distributions.t_quantile(p, df)


def satterthwaite(parts: list[tuple[float, float]]) -> float:
    """Degrees of freedom of a sum of variances [(variance, its df)]."""
    total = math.fsum(v for v, _ in parts)
    if total <= 0:
        return math.inf
    denom = math.fsum(v * v / d for v, d in parts if not math.isinf(d) and d > 0)
    return math.inf if denom == 0 else total * total / denom


def spread(
    delta_pct: float,
    sd_log: float,
    df: float,
    n: tuple[int, int],
    whole: tuple[float, float, tuple[int, int]] | None = None,
) -> LogSpread:
    """The total change's spread: the figure's own noise (sd of one trial, df, trials a side)
    and, with the run-level model, WHOLE = (sd of a run's level, its df, runs a side)."""
    own = sd_log**2 * (1.0 / n[0] + 1.0 / n[1])
    parts = [(own, df)]
    if whole is not None:
        sd_w, df_w, (k_a, k_b) = whole
        parts.append((sd_w**2 * (1.0 / k_a + 1.0 / k_b), df_w))
    var = math.fsum(v for v, _ in parts)
    # Δ % rounds to -100 at ratios under ~1e-16: the log of the ratio stays finite.
    centre = math.log(max(1.0 + delta_pct / 100.0, 1e-300))
    return LogSpread(centre, math.sqrt(var), satterthwaite(parts))


def tost(s: LogSpread, margin_pct: float, alpha: float) -> Equivalence:
    q = _quantile(1.0 - alpha, s.df)
    low, high = s.centre - q * s.se, s.centre + q * s.se
    inside = math.log1p(-margin_pct / 100.0) < low and high < math.log1p(margin_pct / 100.0)
    return Equivalence(
        margin_pct, stats.pct_of_log(low), stats.pct_of_log(high), inside and margin_pct > 0, s
    )


def runs_to_show(
    sd_own: float, sd_run: float, margin_pct: float, alpha: float, *, run_level: bool
) -> int | None:
    """The fewest runs a side whose two one-sided tests show ±margin with 80 % power when
    nothing changed, for a figure whose one run varies by SD_OWN (its own) and SD_RUN (its
    run's level); None past MAX_RUNS. Degrees of freedom: n − 1 with the run-level model (the
    runs are the sample, as the whole-run MDE's), else 2n − 2."""
    bound = math.log1p(margin_pct / 100.0)
    var = sd_own**2 + sd_run**2
    if var <= 0:
        return 2
    if margin_pct <= 0:
        return None

    def shows(n: int) -> bool:
        df = float(max(n - 1, 1)) if run_level else float(2 * n - 2)
        # both one-sided tests hold with 80 % power: |centre| + q se < bound where the
        # centre, normal about 0, stays inside ±z_(0.9) se with probability 0.8
        se = math.sqrt(var * 2.0 / n)
        return (_quantile(1.0 - alpha, df) + _quantile(0.5 + POWER / 2.0, df)) * se < bound

    if not shows(MAX_RUNS):
        return None
    return max(distributions.first_true(shows, 1, MAX_RUNS), 2)


def trials(a: Cell, b: Cell, metric: str) -> tuple[int, int]:
    return len(a.trials.get(metric, ())), len(b.trials.get(metric, ()))


def parse_margin(text: str) -> tuple[str | None, float]:
    """`5` (every figure) or `ttft_s=10` (one figure) -> (figure or None, percent);
    ValueError with what is wrong."""
    name, sep, value = text.partition("=")
    raw = value if sep else name
    try:
        pct = float(raw.strip().rstrip("%").strip())
    except ValueError:
        raise ValueError(f"margin {text!r}: not a number of percent") from None
    if not math.isfinite(pct) or not 0.0 < pct < 100.0:
        raise ValueError(f"margin {text!r}: must be more than 0 and less than 100 %")
    return (name.strip() if sep else None), pct
