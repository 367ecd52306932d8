"""The sequential design's stages, chosen with the server start's cost in view
(bench.verdict.stage_plan), and re-validated on the twin in virtual time."""

from __future__ import annotations

import itertools
import math

import pytest

from bench.twin import profile as profiles
from bench.verdict import budget, sequential, stage_plan
from bench.verdict.compare import ALPHA, POWER, Policy
from bench.verdict.run_source import merge_runs
from tools import corpus_power
from tools import verdict_power as power

pytestmark = pytest.mark.timeout(300)


def _recorded() -> tuple[stage_plan.Costs, int]:
    """What the vllm-cpu corpus recorded: its runs' mean start and sweep, its cells."""
    runs = corpus_power.load(corpus_power.CORPUS / "vllm-cpu")
    side = merge_runs(runs, "corpus")
    start = math.fsum(side.start_s) / len(side.start_s)
    sweep = math.fsum(side.server_s) / len(side.server_s)
    return stage_plan.Costs(start, sweep, "the corpus"), len(side.cells)


def test_the_recorded_costs_are_what_compare_prints_for_the_corpus() -> None:
    costs, cells = _recorded()
    # over all 12 runs (bench compare of runs 01-06 prints 53 s and 47 s, their means)
    assert round(costs.start_s) == 63 and round(costs.sweep_s) == 48 and cells == 6


def test_a_large_start_cost_gives_a_larger_first_stage_and_fewer_starts() -> None:
    # The published card's matrix (40 cells, a sweep of 1,435 s on the twin): a start of
    # the vllm-cpu corpus's recorded 53 s, and one of 30,000 s (21 sweeps; at α = 0.04 the
    # larger first stage pays from about 24,700 s, 17 sweeps).
    cheap = stage_plan.choose(stage_plan.Costs(53.0, 1435.0, "recorded"), 40)
    dear = stage_plan.choose(stage_plan.Costs(30000.0, 1435.0, "stated"), 40)
    assert cheap.stages == ((2, 1), (2, 2), (3, 3), (5, 5))
    assert dear.stages == ((2, 2), (3, 2), (3, 3), (4, 3), (5, 5))
    assert sum(dear.stages[0]) > sum(cheap.stages[0])  # a larger first stage
    assert dear.expected_starts < cheap.expected_starts  # fewer starts when nothing changed
    # ... bought with sweeps: at a free start the dear plan would cost more
    free = stage_plan.Costs(0.0, 1435.0, "x")
    level = cheap.level
    assert (
        stage_plan.evaluate(dear.stages, free, 40, level).expected_s
        > stage_plan.evaluate(cheap.stages, free, 40, level).expected_s
    )


def test_every_plan_ends_at_five_runs_a_side() -> None:
    """The twin measured the model's power as optimistic for shorter plans (stage_plan.LAST)."""
    assert all(s[-1] == stage_plan.LAST == (5, 5) for s in stage_plan.candidates())
    costs, cells = _recorded()
    assert stage_plan.choose(costs, cells).stages == ((2, 1), (2, 2), (3, 3), (5, 5))


@pytest.mark.parametrize("cells", [6, 40])
def test_the_chosen_plan_spends_fewer_starts_as_a_start_costs_more(cells: int) -> None:
    """The expected time is linear in the start's cost, so the best plan's starts cannot
    grow with it (and its sweeps cannot shrink): a check of the minimisation itself."""
    prior = stage_plan.CHANGE_PRIOR
    starts = []
    sweeps = []
    for start in (0.0, 10.0, 53.0, 300.0, 1435.0, 6000.0, 30000.0):
        plan = stage_plan.choose(stage_plan.Costs(start, 1435.0, "x"), cells)
        zero = stage_plan.evaluate(plan.stages, stage_plan.Costs(0.0, 1435.0, "x"), cells,
                                   plan.level)  # fmt: skip
        starts.append((1 - prior) * plan.expected_starts + prior * sum(plan.stages[-1]))
        sweeps.append(zero.expected_s)
    assert all(b <= a + 1e-9 for a, b in itertools.pairwise(starts))
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(sweeps))
    if cells == 40:  # with 6 cells one plan is best at every cost
        assert starts[-1] < starts[0]


@pytest.mark.parametrize("start", [0.0, 53.0, 600.0, budget.START_ESTIMATE_S * 40])
def test_every_chosen_plan_keeps_the_error_rates(start: float) -> None:
    plan = stage_plan.choose(stage_plan.Costs(start, 1435.0, "x"), 40)
    assert plan.power >= POWER + stage_plan.POWER_MARGIN
    # no stage before the last can settle a cell and flag it: false alarms <= the level
    assert all(stage_plan.settles_without_alarm(s, plan.level) for s in plan.stages[:-1])
    assert plan.level == pytest.approx(ALPHA / 2 / (4 * 40))


def test_a_plan_the_error_rates_rule_out_is_never_chosen() -> None:
    level = ALPHA / 2 / 160
    # 2+1 then 3+3 alone: too many changed cells settled at 2+1 for 80 % power
    short = stage_plan.evaluate(((2, 1), (3, 3)), stage_plan.STATED_COSTS, 40, level)
    assert short.power < POWER
    # 5+5 before a last stage could settle a cell that it flags
    assert not stage_plan.settles_without_alarm((5, 5), level)
    assert stage_plan.settles_without_alarm((3, 3), level)
    for start in (0.0, 1e6):
        chosen = stage_plan.choose(stage_plan.Costs(start, 1435.0, "x"), 40)
        assert chosen.stages != short.stages and (5, 5) not in chosen.stages[:-1]


def test_the_model_power_of_the_fixed_design_is_its_80_percent() -> None:
    level = ALPHA / 2 / 160
    assert stage_plan.fixed_power(3, level) == pytest.approx(POWER, abs=1e-9)
    fixed = stage_plan.evaluate(((3, 3),), stage_plan.STATED_COSTS, 40, level)
    assert fixed.power == pytest.approx(POWER, abs=0.01)  # Monte Carlo, 20,000 draws


def test_the_plan_prints_its_expected_time_and_the_fixed_designs_with_starts() -> None:
    plan = stage_plan.choose(stage_plan.Costs(53.0, 47.0, "the runs recorded"), 6)
    (line,) = plan.lines()
    assert line.startswith(
        "Stages 2+1, 2+2, 3+3, 5+5, chosen for a server start of 53 s and a sweep of 47 s "
        "(the runs recorded), 6 cells: expected server time "
    )
    n = plan.fixed_trials
    assert n == 4  # the plan's power is above 3 + 3's 80 %
    assert plan.fixed_s == pytest.approx(2 * n * (53.0 + 47.0))
    assert f"{n} + {n} runs): {plan.fixed_s / 3600:.2f} h with {2 * n} server starts." in line
    assert plan.unchanged_s < plan.fixed_s and plan.changed_s < plan.fixed_s


def test_costs_out_of_range_are_refused() -> None:
    for bad in (math.nan, -1.0, math.inf, 1e12):
        with pytest.raises(ValueError, match="a cost lies between 0 and 1e9 s"):
            stage_plan.Costs(bad, 10.0, "x")
    with pytest.raises(ValueError, match="at least one cell"):
        stage_plan.choose(stage_plan.STATED_COSTS, 0)


@pytest.mark.parametrize("start", [53.0, 30000.0])
def test_the_chosen_plans_keep_their_error_rates_on_the_twin(
    published: tuple[profiles.Profile, power.Base], start: float
) -> None:
    """Re-validated in virtual time with make verdict-power's own machinery: the plan for
    this start cost on the twin, 20 A/A comparisons and 20 with one figure of one cell made
    worse by the fixed design's printed MDE (a short check; make verdict-power runs 300)."""
    profile, base = published
    costs = power.twin_costs(base, start)
    n = 20
    alarms = hits = 0
    plans = set()
    for i in range(n):
        aa = power.sequential(profile, base, i, costs=costs)
        alarms += bool(aa.comparison.flagged)
        plans.add(aa.plan)
        fixed = power.fixed(profile, base, i, 3)
        cell = fixed.cells[(7 * i) % len(fixed.cells)]
        f = cell.figures[i % len(cell.figures)]
        assert f.mde_pct is not None
        changed = power.sequential(profile, base, i, (cell.key, f.metric.name, f.mde_pct), costs)
        hit = next(x for x in changed.comparison.cells if x.key == cell.key)
        hits += any(g.metric is f.metric and g.mark == "regressed" for g in hit.figures)
    expected = stage_plan.choose(costs, len(base.figures)).stages
    assert plans == {expected}
    assert alarms <= 2  # 5 % of 20 is 1; 2 or fewer in 92 % of samples at 5 %
    assert hits >= 14  # 80 % of 20 is 16; 14 or more in 91 % of samples at 80 %


def test_sequential_replans_after_the_first_stage_with_the_recorded_costs() -> None:
    costs, cells = _recorded()
    runs = corpus_power.load(corpus_power.CORPUS / "vllm-cpu")
    calls: list[tuple[str, int]] = []

    def measure(side: sequential.Side, trial: int, open_cells: object) -> object:
        calls.append((side, trial))
        return runs[trial - 1 if side == "a" else 6 + trial - 1]

    # stated: a 6,000 s start; the runs record 53 s, so after the first stage the rest is
    # planned for 53 s among the plans that begin with the first stage run
    out = sequential.run(
        measure,  # type: ignore[arg-type]
        Policy(),
        costs=stage_plan.Costs(6000.0, costs.sweep_s, "stated"),
        cells=cells,
    )
    first = stage_plan.choose(stage_plan.Costs(6000.0, costs.sweep_s, "stated"), cells).stages[0]
    assert out.plan[0] == first
    if out.stages > 1:
        assert out.chosen is not None
        assert "the starts the runs recorded" in out.chosen.costs.source
        assert out.chosen.costs.start_s == pytest.approx(costs.start_s, rel=0.3)
    assert out.lines()[0].startswith("Stages ")
