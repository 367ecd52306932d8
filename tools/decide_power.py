"""`make decide-power`: the sequential compare aimed at a decision beside fixed designs.

For each noise of the twin (`published`, the card's 40 valid cells, virtual time: the runs
`tools.verdict_power` simulates) and for each real-noise corpus (tests/data/noise_corpus),
four designs on the same seeded runs:

- fixed 2 + 2 and fixed 3 + 3: every cell measured in every run, one compare at the end;
- decide (`bench.verdict.sequential`, goal "decide", `--order decide`): looks at 2+2, 3+3,
  5+5; a cell stops when EQUIVALENT within ±5 % (each one-sided test at alpha / 4 at the
  first two looks, alpha / 2 at the last) or CHANGED at p <= 0.001; the compare stops when
  no open cell can be decided within 4 x the budget of 5 a side;
- decide, history prior (`--order decide --noise-from HISTORY`): the same with the host's
  noise measured before the compare (`bench.verdict.noise_prior`, from 3 builds run 3 times
  each, seeds of their own: each compare its own history), so its first look is at 1+1
  (each one-sided test at alpha / 6 at the first three looks, alpha / 2 at the last); a
  look on the history's run level closes no cell on a change everywhere. Twin only: the
  corpora's 12 runs are all A's and B's.

Truths, each its own comparisons:

- A/A: nothing changed. A false alarm is a compare that ends CHANGED; "every cell decided"
  a compare that ends EQUIVALENT; the share of cells equivalent is over all compares' cells;
- one cell 6 % worse in every figure (B's latencies x 1.06, rates / 1.06): that cell called
  EQUIVALENT within ±5 % is the error the margin exists to prevent;
- one figure of one cell worse by the MDE the fixed 3 + 3 compare printed for it on the same
  seeds (as `make verdict-power` plants it): that cell called CHANGED is the power;
- A/A and one cell 6 % worse again on a host whose run level varies NOISIER (3) times as
  much as its history says (the history as before): what a prior that is out of date costs.

Server time: a run costs a server start (START_S, stated: the compare budget's estimate
of a 4-GPU vLLM start) plus the server seconds of the cells it measured (the twin's virtual
sweep); for the corpora, runs and cell measurements are counted instead (each corpus run
was one start of a loaded 2-core machine, not a 4-GPU one).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from bench.twin import noise
from bench.twin import profile as profiles
from bench.twin.profile import Profile
from bench.verdict import budget, headline, noise_prior, sequential
from bench.verdict.cells import Key, RunFigures
from bench.verdict.compare import Comparison, Policy, compare
from bench.verdict.noise_prior import NoisePrior
from bench.verdict.run_source import merge_runs
from tools import corpus_power
from tools import verdict_power as vp

START_S = budget.START_ESTIMATE_S
SIX_PCT = 6.0
DESIGNS = ("fixed 2 + 2", "fixed 3 + 3", "decide", "decide, history prior")
# The history a prior is estimated from: HISTORY_BUILDS builds of the same twin, each run
# HISTORY_RUNS times (seeds of their own), as `bench.verdict.noise_prior` reads a host's series.
HISTORY_BUILDS = 3
HISTORY_RUNS = 3
# A host noisier than its history: its run level varies this many times as much today.
NOISIER = 3.0


@dataclass
class DesignTally:
    """One design under one truth: outcomes and cost over its comparisons."""

    compares: int = 0
    changed: int = 0  # compares that ended CHANGED
    equivalent: int = 0  # compares that ended EQUIVALENT
    cells: int = 0
    cells_equivalent: int = 0
    target_changed: int = 0  # the planted cell ended CHANGED
    target_equivalent: int = 0  # the planted cell ended EQUIVALENT
    seconds: list[float] = dataclasses.field(default_factory=list)
    runs: list[int] = dataclasses.field(default_factory=list)
    measurements: list[int] = dataclasses.field(default_factory=list)
    prior_used: int = 0  # compares whose last look used the prior (its check passed)

    def add(self, c: Comparison, target: Key | None, cost: tuple[float, int, int]) -> None:
        self.compares += 1
        out = headline.outcome(c)
        self.changed += out == "changed"
        self.equivalent += out == "equivalent"
        compared = headline.compared(c)
        self.cells += len(compared)
        self.cells_equivalent += sum(x.outcome == "equivalent" for x in compared)
        if target is not None:
            cell = next(x for x in c.cells if x.key == target)
            self.target_changed += cell.outcome == "changed"
            self.target_equivalent += cell.outcome == "equivalent"
        self.seconds.append(cost[0])
        self.runs.append(cost[1])
        self.measurements.append(cost[2])


def _worse_cell(run: RunFigures, key: Key, pct: float) -> RunFigures:
    for metric in run.cells[key].trials if key in run.cells else ():
        run = corpus_power.planted(run, pct, (key, metric))
    return run


Plant = Callable[[RunFigures], RunFigures]
Source = Callable[[str, int], RunFigures]  # (side "a"/"b", trial from 1) -> the whole run


def _restrict(run: RunFigures, cells: frozenset[Key] | None) -> RunFigures:
    if cells is None:
        return run
    kept = {k: c for k, c in run.cells.items() if k in cells}
    return dataclasses.replace(run, cells=kept, planned=cells)


def _fixed(
    source: Source, n: int, cost: Callable[[RunFigures], float]
) -> tuple[Comparison, tuple[float, int, int]]:
    a = [source("a", t) for t in range(1, n + 1)]
    b = [source("b", t) for t in range(1, n + 1)]
    c = compare(merge_runs(a, "A"), merge_runs(b, "B"), Policy())
    seconds = sum(cost(r) for r in (*a, *b))
    return c, (seconds, 2 * n, sum(len(r.cells) for r in (*a, *b)))


def _decide(
    source: Source, cost: Callable[[RunFigures], float], prior: NoisePrior | None = None
) -> tuple[Comparison, tuple[float, int, int]]:
    spent: list[RunFigures] = []

    def measure(side: sequential.Side, trial: int, cells: frozenset[Key] | None) -> RunFigures:
        run = _restrict(source(side, trial), cells)
        spent.append(run)
        return run

    out = sequential.run(measure, Policy(noise_prior=prior), goal="decide")
    seconds = sum(cost(r) for r in spent)
    return out.comparison, (seconds, len(spent), sum(out.measurements.values()))


def _tally(
    sources: Iterator[tuple[Source, Key | None, NoisePrior | None]],
    cost: Callable[[RunFigures], float],
) -> dict[str, DesignTally]:
    out = {d: DesignTally() for d in DESIGNS}
    for source, target, prior in sources:
        for n, name in ((2, DESIGNS[0]), (3, DESIGNS[1])):
            c, spent = _fixed(source, n, cost)
            out[name].add(c, target, spent)
        c, spent = _decide(source, cost)
        out[DESIGNS[2]].add(c, target, spent)
        if prior is not None:
            c, spent = _decide(source, cost, prior)
            out[DESIGNS[3]].add(c, target, spent)
            out[DESIGNS[3]].prior_used += bool(c.prior is not None and c.prior.used)
    return out


HEAD = (
    "| truth | design | compares | CHANGED | EQUIVALENT (every cell) | cells equivalent | "
    "the planted cell | server time, mean (share of fixed 3 + 3) | runs, mean | "
    "cell measurements, mean |\n|---|---|---|---|---|---|---|---|---|---|"
)


def _rows(truth: str, tallies: dict[str, DesignTally], planted: bool, timed: bool) -> Iterator[str]:
    ref = statistics.fmean(tallies[DESIGNS[1]].seconds) if timed else 0.0
    for name in DESIGNS:
        t = tallies[name]
        n = t.compares
        if not n:
            continue
        shown = name
        if name == DESIGNS[3]:
            shown = f"{name} (its noise used at the last look in {t.prior_used}/{n})"
        target = (
            f"CHANGED {corpus_power.share(t.target_changed, n)}; "
            f"EQUIVALENT {corpus_power.share(t.target_equivalent, n)}"
            if planted
            else "—"
        )
        if timed:
            s = statistics.fmean(t.seconds)
            time_text = f"{s / 3600:.2f} h ({s / ref:.0%})"
        else:
            time_text = "—"
        yield (
            f"| {truth} | {shown} | {n} | {corpus_power.share(t.changed, n)} | "
            f"{corpus_power.share(t.equivalent, n)} | "
            f"{t.cells_equivalent}/{t.cells} = {t.cells_equivalent / max(t.cells, 1):.1%} | "
            f"{target} | {time_text} | {statistics.fmean(t.runs):.2f} | "
            f"{statistics.fmean(t.measurements):.0f} |"
        )


def _history(profile: Profile, base: vp.Base, i: int) -> NoisePrior | None:
    """Compare I's prior: HISTORY_BUILDS builds of the twin, HISTORY_RUNS runs each, seeds
    apart from A's and B's."""
    seeds = iter(range(1_000_000 * i + 3000, 1_000_000 * i + 4000))
    builds = [
        [vp.side(profile, base, [next(seeds)], "H") for _ in range(HISTORY_RUNS)]
        for _ in range(HISTORY_BUILDS)
    ]
    return noise_prior.estimate(builds, f"{HISTORY_BUILDS} x {HISTORY_RUNS} simulated runs")


def twin_report(name: str, n: int) -> Iterator[str]:
    profile = profiles.load("published")
    if name != "default":
        profile = noise.with_fit(profile, name)
    noisier = profile.model_copy(update={"noise_shared": profile.noise_shared * NOISIER})
    base = vp.simulate_card(profile, vp.CARD / vp.CARD_NAME)
    keys = sorted(base.figures)
    priors = [_history(profile, base, i) for i in range(n)]

    def cost(run: RunFigures) -> float:
        return START_S + sum(base.server_s[k] for k in run.cells)

    def source(i: int, plant_b: Plant | None, today: Profile = profile) -> Source:
        def get(side: str, trial: int) -> RunFigures:
            label = "A" if side == "a" else "B"
            run = vp.side(today, base, [vp._seeds(i, label, trial)[-1]], label)
            return plant_b(run) if plant_b is not None and side == "b" else run

        return get

    rng = random.Random(44)
    said = "its default noise" if name == "default" else f"the noise fit {name}"
    yield f"\n## Twin (published) with {said}\n"
    yield HEAD
    aa = ((source(i, None), None, priors[i]) for i in range(n))
    yield from _rows("A/A", _tally(aa, cost), False, True)
    six = [rng.choice(keys) for _ in range(n)]

    def six_worse(i: int) -> Plant:
        return lambda r: _worse_cell(r, six[i], SIX_PCT)

    truth = f"one cell {SIX_PCT:g} % worse"
    worse = ((source(i, six_worse(i)), six[i], priors[i]) for i in range(n))
    yield from _rows(truth, _tally(worse, cost), True, True)
    changes = []
    for i in range(n):
        c, _ = _fixed(source(i, None), 3, cost)
        figs = [(x.key, f) for x in c.cells for f in x.figures if f.mde_pct is not None]
        key, f = rng.choice(figs)
        assert f.mde_pct is not None
        changes.append((key, f.metric.name, f.mde_pct))

    def at_mde(i: int) -> Plant:
        key, metric, pct = changes[i]
        return lambda r: corpus_power.planted(r, pct, (key, metric))

    truth = "one figure worse by fixed 3 + 3's printed MDE"
    hit = _tally(((source(i, at_mde(i)), changes[i][0], priors[i]) for i in range(n)), cost)
    yield from _rows(truth, hit, True, True)
    if profile.noise_shared > 0:
        x = f"{NOISIER:g} x"
        aa = ((source(i, None, noisier), None, priors[i]) for i in range(n))
        yield from _rows(f"A/A, run level {x} the history's", _tally(aa, cost), False, True)
        worse = ((source(i, six_worse(i), noisier), six[i], priors[i]) for i in range(n))
        yield from _rows(
            f"one cell {SIX_PCT:g} % worse, run level {x} the history's",
            _tally(worse, cost),
            True,
            True,
        )
    mdes = sorted(pct for _, _, pct in changes)
    yield (
        f"\nThe printed MDEs planted: median {statistics.median(mdes):.1f} %, "
        f"{sum(m < 5.0 for m in mdes)} of {n} under the ±5 % margin (a change within the "
        "margin called EQUIVALENT is right)."
    )


def corpus_report(engine: str, draws: int) -> Iterator[str]:
    runs = corpus_power.load(corpus_power.CORPUS / engine)
    last = max(sequential.DECIDE_STAGES[-1])
    if 2 * last > len(runs):
        return
    rng = random.Random(27)
    orders = [rng.sample(range(len(runs)), 2 * last) for _ in range(draws)]

    def source(order: list[int]) -> Source:
        def get(side: str, trial: int) -> RunFigures:
            return runs[order[(0 if side == "a" else last) + trial - 1]]

        return get

    yield (
        f"\n## Corpus {engine}: {len(runs)} real runs, {draws} seeded orders "
        f"(A: the first {last}, B: the next {last})\n"
    )
    yield HEAD
    yield from _rows(
        "A/A", _tally(((source(o), None, None) for o in orders), lambda r: 0.0), False, False
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.decide_power")
    p.add_argument("--comparisons", type=int, default=300, help="a truth, a twin noise")
    p.add_argument("--draws", type=int, default=100, help="orders of each corpus's runs")
    p.add_argument(
        "--noise", action="append", help="twin noises (default: quiet-gpu, default, vllm-cpu)"
    )
    args = p.parse_args(argv)
    print(__doc__.split("\n\n", 1)[1].strip())
    print(f"\nA server start: {START_S:.0f} s. Shares with their 95 % Wilson intervals.")
    for name in args.noise or ["quiet-gpu", "default", "vllm-cpu"]:
        for line in twin_report(name, args.comparisons):
            print(line, flush=True)
    for engine in ("vllm-cpu", "llamacpp"):
        for line in corpus_report(engine, args.draws):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
