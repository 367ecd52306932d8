"""The noise a compare is given from before it (`bench.verdict.noise_prior`): estimated from
repeated runs of builds, checked against the compare's own runs, and what it lets a compare
and the sequential design decide with 1 run a side."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from bench import stats
from bench.errors import Exit
from bench.twin import profile as profiles
from bench.verdict import attest, headline, noise_prior, page, sequential
from bench.verdict.cells import BY_NAME, Key, RunFigures
from bench.verdict.compare import Policy, compare, figure_delta
from bench.verdict.run_source import merge_runs
from bench.verdict.tables import compare_markdown
from tests.support.decode_cell import decode_cell
from tools import decide_power
from tools import verdict_power as vp
from tools.verdict_power import run_of

KEYS: list[Key] = [("decode", f"{k}K", c) for k in (1, 2, 4, 8, 16) for c in (1, 2, 4, 8)]
RUN_SD = 0.005  # a run's level (a quiet GPU host)
OWN_SD = 0.005  # a cell's own noise beyond it


def run(
    name: str,
    rng: random.Random,
    *,
    run_sd: float = RUN_SD,
    own_sd: float = OWN_SD,
    slower: dict[Key, float] | None = None,
    level: float | None = None,
) -> RunFigures:
    """One server start: every cell's figures moved by the run's level and its own noise."""
    u = rng.gauss(0.0, run_sd) if level is None else level
    cells = {}
    for key in KEYS:
        f = math.exp(u + rng.gauss(0.0, own_sd)) * (slower or {}).get(key, 1.0)
        cells[key] = decode_cell(key, f)
    return run_of(name, cells)


def history(seed: int, builds: int = 6, runs: int = 3) -> list[list[RunFigures]]:
    rng = random.Random(seed)
    return [[run(f"h{b}-{r}", rng) for r in range(runs)] for b in range(builds)]


def prior(seed: int = 1) -> noise_prior.NoisePrior:
    found = noise_prior.estimate(history(seed, builds=20), "test history")
    assert found is not None
    return found


def test_the_prior_recovers_a_runs_level_and_a_cells_own_noise() -> None:
    found = noise_prior.estimate(history(7, builds=30), "test history")
    assert found is not None
    assert found.runs == 90 and found.builds == 30
    assert found.run_df == 60
    assert found.run_sd_log == pytest.approx(RUN_SD, rel=0.25)
    for name in ("total_tok_s", "per_request_tok_s", "ttft_s", "tbt_s"):
        assert found.figures[name].sd_log == pytest.approx(OWN_SD, rel=0.1)
        assert found.figures[name].df == 30 * 2 * len(KEYS)


def test_one_build_of_two_runs_or_builds_of_one_run_are_no_prior() -> None:
    rng = random.Random(3)
    assert noise_prior.estimate([[run("a", rng), run("b", rng)]], "h") is None  # 1 df
    assert noise_prior.estimate([[run(str(i), rng)] for i in range(9)], "h") is None
    assert noise_prior.estimate([], "h") is None


def test_values_that_are_not_finite_and_positive_are_left_out() -> None:
    builds = history(5)
    bad = builds[0][0]
    key = KEYS[0]
    cells = dict(bad.cells)
    cells[key] = dataclasses.replace(
        cells[key], trials={"total_tok_s": (math.nan,), "ttft_s": (0.0,), "tbt_s": (math.inf,)}
    )
    builds[0][0] = dataclasses.replace(bad, cells=cells)
    found = noise_prior.estimate(builds, "h")
    assert found is not None
    assert all(math.isfinite(f.sd_log) and f.sd_log > 0 for f in found.figures.values())
    assert math.isfinite(found.run_sd_log)


def test_one_run_a_side_is_raw_alone_and_equivalent_with_the_prior() -> None:
    rng = random.Random(11)
    a, b = run("A", rng), run("B", rng)
    alone = compare(a, b, Policy())
    assert alone.raw_only
    with_prior = compare(a, b, Policy(noise_prior=prior()))
    assert with_prior.prior is not None and with_prior.prior.used
    assert with_prior.whole is not None and with_prior.whole.from_prior
    assert {c.outcome for c in with_prior.cells} == {"equivalent"}
    lines = "\n".join(with_prior.noise_lines())
    assert "Noise measured before this compare (test history): 60 runs of 20 build(s)" in lines
    assert "Pooled with this compare's own noise" in lines
    page = compare_markdown(with_prior)
    assert "(t on the history's run-level sd " in page
    assert "degrees of freedom, the history's alone)" in page


def test_one_cell_20_pct_slower_is_changed_with_one_run_a_side() -> None:
    rng = random.Random(12)
    slow = KEYS[5]
    a, b = run("A", rng), run("B", rng, slower={slow: 1.2})
    c = compare(a, b, Policy(noise_prior=prior()))
    by = {x.key: x.outcome for x in c.cells}
    assert by[slow] == "changed"
    assert [k for k, o in by.items() if o != "equivalent"] == [slow]


def test_runs_noisier_than_their_history_do_not_use_it() -> None:
    rng = random.Random(13)
    a, b = run("A", rng, own_sd=0.02), run("B", rng, own_sd=0.02)
    c = compare(a, b, Policy(noise_prior=prior()))
    assert c.prior is not None and not c.prior.used
    assert c.prior.why_not is not None and "noisier than the history's" in c.prior.why_not
    assert c.raw_only  # 1 run a side, its own noise only: nothing can be judged
    assert "Not used: this compare's runs are noisier" in "\n".join(c.noise_lines())
    # the raw Δ page says it too: a prior given and set aside is never left unsaid
    assert "Not used: this compare's runs are noisier" in compare_markdown(c)


def test_a_run_level_measured_today_is_never_pooled_with_the_historys() -> None:
    """With 2 runs a side the whole-run test is the compare's own: a host whose run level
    varies more today is judged at today's noise, not at its history's."""
    rng = random.Random(14)
    a = merge_runs([run("A1", rng, level=0.0), run("A2", rng, level=0.2)], "A")
    b = merge_runs([run("B1", rng, level=0.25), run("B2", rng, level=-0.05)], "B")
    own = compare(a, b, Policy())
    given = compare(a, b, Policy(noise_prior=prior()))
    assert own.whole is not None and given.whole is not None
    assert not given.whole.from_prior
    assert given.whole.sd_log == own.whole.sd_log
    assert given.whole.p_value == own.whole.p_value
    assert not given.whole.changed


def test_the_changes_spread_leaves_out_a_changed_cell() -> None:
    rng = random.Random(15)
    changes = [rng.gauss(0.0, 0.01) for _ in range(40)]
    quiet = noise_prior.spread_of_changes(changes)
    loud = noise_prior.spread_of_changes([*changes[:-1], 0.5])
    assert quiet is not None and loud is not None
    assert quiet[0] == pytest.approx(0.01 / math.sqrt(2.0), rel=0.25)
    assert loud[0] == pytest.approx(quiet[0], rel=0.1)
    assert loud[1] == 38.0
    assert noise_prior.spread_of_changes([0.1, 0.2]) is None


def _measure(
    runs: dict[str, list[RunFigures]],
) -> tuple[sequential.Measure, list[tuple[str, int, int]]]:
    taken: list[tuple[str, int, int]] = []

    def measure(side: sequential.Side, trial: int, cells: frozenset[Key] | None) -> RunFigures:
        whole = runs[side][trial - 1]
        kept = whole.cells if cells is None else {k: whole.cells[k] for k in cells}
        taken.append((side, trial, len(kept)))
        return dataclasses.replace(whole, cells=kept, planned=cells)

    return measure, taken


def _sides(seed: int, slower: dict[Key, float] | None = None) -> dict[str, list[RunFigures]]:
    rng = random.Random(seed)
    return {
        "a": [run(f"A{i}", rng) for i in range(5)],
        "b": [run(f"B{i}", rng, slower=slower) for i in range(5)],
    }


def test_decide_with_a_prior_looks_first_at_one_run_a_side() -> None:
    measure, taken = _measure(_sides(21))
    out = sequential.run(measure, Policy(noise_prior=prior()), goal="decide")
    assert out.plan == sequential.PRIOR_STAGES
    assert taken == [("a", 1, len(KEYS)), ("b", 1, len(KEYS))]
    assert {how for _, how in out.closed.values()} == {"equivalent"}
    measure, taken = _measure(_sides(21))
    without = sequential.run(measure, Policy(), goal="decide")
    assert without.plan == sequential.DECIDE_STAGES
    assert len(taken) >= 4


def test_decide_whose_history_is_set_aside_at_1_plus_1_goes_on_to_its_next_look() -> None:
    """Runs noisier than their history: the first look is raw Δ, which says nothing of what
    more runs need (it had said "more than 100,000 runs a side" and stopped there)."""
    rng = random.Random(5)
    sides = {side: [run(f"{side}{i}", rng, own_sd=0.02) for i in range(5)] for side in "ab"}
    first = compare(sides["a"][0], sides["b"][0], Policy(noise_prior=prior()))
    assert first.raw_only and first.prior is not None and not first.prior.used
    assert sequential.beyond_budget(first, frozenset(KEYS), 5) is None
    measure, taken = _measure(sides)
    out = sequential.run(measure, Policy(noise_prior=prior()), goal="decide")
    # 2 + 2 and on: each side's second run, with every cell still open
    assert taken[2:4] == [("a", 2, len(KEYS)), ("b", 2, len(KEYS))]
    assert not out.comparison.raw_only and out.budget_need != 0


def test_a_change_everywhere_seen_on_the_historys_run_level_closes_no_cell() -> None:
    """Every cell 10 % slower with 1 run a side: the whole-run test (on the history's run
    level) flags it, but the look closes nothing as changed; the next runs' own levels do."""
    sides = _sides(22, slower=dict.fromkeys(KEYS, 1.10))
    first = compare(sides["a"][0], sides["b"][0], Policy(noise_prior=prior()))
    assert first.whole is not None and first.whole.from_prior and first.whole.changed
    assert first.whole.p_value <= sequential.EARLY_CHANGE_P
    assert sequential.decided(first) == {}
    measure, taken = _measure(sides)
    out = sequential.run(measure, Policy(noise_prior=prior()), goal="decide")
    # 1 + 1, then every cell again (all open): their runs have levels of their own
    assert taken[:4] == [("a", 1, 20), ("b", 1, 20), ("a", 2, 20), ("b", 2, 20)]
    assert out.comparison.whole is not None and not out.comparison.whole.from_prior
    assert {how for _, how in out.closed.values()} == {"changed"}


def test_values_from_runs_without_a_level_of_their_own_carry_its_noise() -> None:
    """A later look's run of a few open cells gets its side's mean level: its run's own
    deviation stays in its values, and the cell's test counts it (run sd² a value)."""
    key = KEYS[0]
    a = dataclasses.replace(
        decode_cell(key, 1.0), trials={"ttft_s": (0.050, 0.0502, 0.0499)}, runs=(0, 1, 2)
    )
    b = dataclasses.replace(
        decode_cell(key, 1.0), trials={"ttft_s": (0.0508, 0.0507, 0.0511)}, runs=(0, 1, 2)
    )
    pooled = stats.PooledNoise(0.005, 100, True, 10)
    metric = BY_NAME["ttft_s"]
    known = figure_delta(metric, a, b, Policy(), pooled=pooled)
    unknown = figure_delta(
        metric, a, b, Policy(), pooled=pooled, level_less=(2, 2), run_noise=(0.01, 10.0)
    )
    # se² = 0.005² (2/3) + 0.01² (2/9 + 2/9): one trial's sd sqrt(0.005² + 0.01² x 2/3)
    assert unknown.sd_log == pytest.approx(math.sqrt(0.005**2 + 0.01**2 * 2 / 3))
    assert known.sd_log == pytest.approx(0.005)
    assert unknown.p_value is not None and known.p_value is not None
    assert unknown.p_value > known.p_value
    assert unknown.df is not None and unknown.df < 100


def test_a_cell_stopped_as_equivalent_is_reported_as_judged_at_its_look() -> None:
    """The twin's card matrix with its default noise (1 % a cell, no run level), nothing
    changed, a history of 3 builds run 3 times: 23 cells stop equivalent at 1 + 1, the
    other 17 at 2 + 2 (runs of those cells only). Judged again on every run at the end,
    cells of the first look came out not resolved (the noise pooled over the cells left
    open, chosen for looking noisier); each keeps the verdict its look gave it."""
    profile = profiles.load("published")
    base = vp.simulate_card(profile, vp.CARD / vp.CARD_NAME)
    found = decide_power._history(profile, base, 3)

    def measure(side: sequential.Side, trial: int, cells: frozenset[Key] | None) -> RunFigures:
        seed = vp._seeds(3, "A" if side == "a" else "B", trial)[-1]
        return decide_power._restrict(vp.side(profile, base, [seed], side), cells)

    out = sequential.run(measure, Policy(noise_prior=found), goal="decide")
    assert sorted(look for look, _ in out.closed.values()) == [1] * 23 + [2] * 17
    assert {c.outcome for c in out.comparison.cells if c.key in out.closed} == {"equivalent"}
    assert headline.outcome(out.comparison) == "equivalent"


def test_the_attestation_of_a_compare_says_the_noise_it_was_given_and_whether_used() -> None:
    rng = random.Random(11)
    a, b = run("A", rng), run("B", rng)
    used = attest.compare_body(compare(a, b, Policy(noise_prior=prior())), Exit.OK)
    assert used["noise_prior"]["source"] == "test history"
    assert used["noise_prior"]["runs"] == 60 and used["noise_prior"]["used"] is True
    assert used["noise_prior"]["why_not"] is None
    loud = run("A", rng, own_sd=0.02), run("B", rng, own_sd=0.02)
    refused = attest.compare_body(compare(*loud, Policy(noise_prior=prior())), Exit.OK)
    assert refused["noise_prior"]["used"] is False
    assert "noisier than the history's" in refused["noise_prior"]["why_not"]
    assert attest.compare_body(compare(a, b, Policy()), Exit.OK)["noise_prior"] is None


def test_the_compare_page_says_the_noise_it_was_given() -> None:
    rng = random.Random(11)
    a, b = run("A", rng), run("B", rng)
    shown = "".join(page.compare_page([compare(a, b, Policy(noise_prior=prior()))]))
    assert "Noise measured before this compare (test history): 60 runs of 20 build(s)" in shown
    assert "Noise measured before" not in "".join(page.compare_page([compare(a, b, Policy())]))


def test_a_prior_given_to_a_compare_of_too_few_cells_is_said_not_used() -> None:
    rng = random.Random(16)
    a, b = run("A", rng), run("B", rng)
    fa, fb = (dataclasses.replace(r, cells={k: r.cells[k] for k in KEYS[:2]}) for r in (a, b))
    c = compare(fa, fb, Policy(noise_prior=prior()))
    assert c.prior is not None and not c.prior.used
    assert c.prior.why_not is not None and "fewer than 3 cells" in c.prior.why_not
    assert c.raw_only
