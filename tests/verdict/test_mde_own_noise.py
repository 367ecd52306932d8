"""The printed MDE holds in every cell, not on average (compare.mde_noise): a pooled figure's
MDE is never sized for a cell quieter than its own runs show, so a heavy-tailed cell (one
run far out) or one noisier than the rest gets the larger MDE, and says why; a cell no
noisier than the pool keeps the MDE of the moderated sd. The test itself is unchanged."""

from __future__ import annotations

import dataclasses
import math

from bench import stats
from bench.verdict.cells import BY_NAME, Cell
from bench.verdict.compare import POWER, Policy, c4, figure_delta, mde_noise
from bench.verdict.tables import _cmp_figure

METRIC = BY_NAME["total_tok_s"]
# The pooled noise of the figure over the other cells: 5 %, known to 60 degrees of freedom;
# the cells' variances scatter around it with 20 prior degrees of freedom (Smyth).
POOL = stats.PooledNoise(sd_log=0.05, df=60, sound=True, cells=10, prior_df=20.0)


def _cell(values: tuple[float, ...]) -> Cell:
    return Cell("decode", "2K", 1, "valid", trials={METRIC.name: values})


def _logs_ss(values: tuple[float, ...]) -> float:
    logs = [math.log(v) for v in values]
    m = sum(logs) / len(logs)
    return sum((x - m) ** 2 for x in logs)


# Four runs a side, each side's logs at ±1.5 % and ±4.5 % around its mean: sd 3.9 %, below
# the pooled 5 %.
QUIET_A = tuple(100 * math.exp(x) for x in (-0.045, -0.015, 0.015, 0.045))
QUIET_B = tuple(100 * math.exp(x) for x in (-0.045, -0.015, 0.015, 0.045))
# The same runs but one of A's 40 % slow (log -0.51): a heavy tail, one run far out.
HEAVY_A = (*QUIET_A[:3], 100 * math.exp(-0.51))


def test_a_cell_no_noisier_than_the_pool_keeps_the_moderated_mde() -> None:
    f = figure_delta(METRIC, _cell(QUIET_A), _cell(QUIET_B), Policy(), pooled=POOL, tests=20)
    assert f.method == "pooled" and f.sd_log is not None and f.df is not None
    assert f.mde_sd_log is None and f.mde_note == ""
    level = Policy().alpha / 20
    expected = stats.mde_pct(f.sd_log, 4, 4, alpha=level, power=POWER, df=f.df)
    assert f.mde_pct == expected
    # the moderated sd: (20 x 0.05² + SS) / (20 + 6), between the cell's own and the pool's
    own = math.sqrt((_logs_ss(QUIET_A) + _logs_ss(QUIET_B)) / 6)
    assert own < f.sd_log < 0.05
    assert math.isclose(f.sd_log**2, (20 * 0.05**2 + 6 * own**2) / 26)


def test_a_heavy_tailed_cell_gets_the_mde_of_its_own_noise_and_says_so() -> None:
    policy = Policy()
    f = figure_delta(METRIC, _cell(HEAVY_A), _cell(QUIET_B), policy, pooled=POOL, tests=20)
    assert f.method == "pooled" and f.sd_log is not None and f.df is not None
    own = math.sqrt((_logs_ss(HEAVY_A) + _logs_ss(QUIET_B)) / 6) / c4(6)
    # The outlying run puts the cell's own sd far above the moderated one the test uses ...
    assert own > 1.8 * f.sd_log
    # ... and the MDE is computed at it (unbiased for σ), at the test's degrees of freedom.
    assert f.mde_sd_log is not None and math.isclose(f.mde_sd_log, own)
    level = policy.alpha / 20
    moderated = stats.mde_pct(f.sd_log, 4, 4, alpha=level, power=POWER, df=f.df)
    assert f.mde_pct == stats.mde_pct(own, 4, 4, alpha=level, power=POWER, df=f.df)
    assert f.mde_pct is not None and f.mde_pct > 1.7 * moderated
    assert f.mde_note.startswith(f" (this cell's own noise {own * 100:.1f} %, above the ")
    # The test itself is the moderated t's: the same p as without the larger MDE.
    r = stats.welch_log(HEAVY_A, QUIET_B, pooled_sd=f.sd_log, pooled_df=f.df)
    assert f.p_value == r.p_value


def test_mde_noise_is_the_larger_of_the_moderated_and_the_cells_own() -> None:
    assert mde_noise(0.05, 6 * 0.03**2, 6) == 0.05
    assert math.isclose(mde_noise(0.05, 6 * 0.08**2, 6), 0.08 / c4(6))
    assert mde_noise(0.05, 6 * 0.047**2, 6) == 0.05  # 0.047 / c4(6) = 0.049 < 0.05
    assert mde_noise(0.05, 0.0, 6) == 0.05  # identical trials: the moderated sd
    assert mde_noise(0.05, 1.0, 0) == 0.05  # one trial a side: no own estimate


def test_the_printed_line_says_the_mde_is_the_cells_own() -> None:
    f = figure_delta(METRIC, _cell(HEAVY_A), _cell(QUIET_B), Policy(), pooled=POOL, tests=20)
    text = _cmp_figure(dataclasses.replace(f, mark="unchanged")).text
    assert "; not resolved; MDE " in text and "(this cell's own noise " in text


def test_c4_is_the_bias_of_a_normal_sample_sd() -> None:
    # Tabulated: c4(n) for n = 2, 5, 7, 11 values (df = n - 1).
    assert math.isclose(c4(1), math.sqrt(2 / math.pi))
    assert math.isclose(c4(4), 0.9400, abs_tol=5e-5)
    assert math.isclose(c4(6), 0.9594, abs_tol=5e-5)
    assert math.isclose(c4(10), 0.9754, abs_tol=5e-5)
