"""`make verdict-power`: does `bench compare` keep its promises on the twin, in virtual time?

1. The card's matrix is run once on the twin's engine in virtual time (no sockets, no
   sleeps: `bench.twin.virtual`), giving each valid cell's figures and the server seconds
   it costs (scout, readiness gate, window).
2. A "run" of one side is that matrix with the twin's run-to-run noise for its seed
   (`bench.twin.noise`: a factor per cell, drawn per run and per trial; every step f times
   as long = throughput / f, latencies x f, which `tests/verdict/test_twin_noise.py`
   checks against a virtual run with the scaled profile). Each trial is its own run (a
   separate bundle, as `make compare-commits` makes them).
3. A/A: N comparisons of two sides from the same profile; the fraction in which compare
   flags anything (the false-alarm rate of the whole matrix).
4. Power: N comparisons in which one random cell's figure of B is made worse by the MDE
   the tool printed for it in the A/A comparison with the same seeds; the fraction in
   which that figure of that cell is flagged.
5. The MDE per figure (median and worst over cells) at 1, 3 and 5 trials a side.
6. Server time per verdict: fixed 3 trials a side vs a sequential design (below), at the
   false-alarm rate and power each reaches, measured the same way.

Sequential design: `bench.verdict.sequential`, the scheduler `make compare-images` and
`make compare-commits` use with ORDER=sequential, each trial a virtual run of the same
seeds as the fixed design's (its first 3 trials a side are the fixed design's).
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import bench.cards
from bench.card.figures import context_tokens
from bench.card.parse import read_card
from bench.run.plan import PUBLISHED_CONTEXTS, PUBLISHED_PREFILL_ONLY
from bench.run.prompts import context_label, fit
from bench.twin import noise, virtual
from bench.twin import profile as profiles
from bench.twin.engine import TwinScheduler
from bench.twin.profile import Profile
from bench.verdict import budget
from bench.verdict import sequential as sequential_mod
from bench.verdict.cells import BY_NAME, Cell, Key, RunFigures, context_order, metrics_of
from bench.verdict.compare import Comparison, Policy, compare
from bench.verdict.stage_plan import Costs
from tools import corpus_power

CARD = Path(bench.cards.__file__).parent
CARD_NAME = "qwen3.5-397b-a17b-int4_4x-rtxpro6000_vllm-73a5831127a9.txt"


@dataclass(frozen=True)
class Base:
    figures: dict[Key, dict[str, float]]  # noiseless figures at server speed
    server_s: dict[Key, float]  # server seconds one measurement of the cell costs


def prompt_sizes(profile: Profile, max_tokens: int) -> dict[tuple[str, bool], int]:
    """(row label, decode?) -> the prompt tokens `bench run` sends for the published
    contexts on this server: the card's 251K row is 256K trimmed to fit max_model_len
    (257,984 tokens, not 251 x 1024), and the twin's TTFT depends on it."""
    out: dict[tuple[str, bool], int] = {}
    rows = [(n, True) for n in PUBLISHED_CONTEXTS] + [(n, False) for n in PUBLISHED_PREFILL_ONLY]
    for word, decode in rows:
        nominal = context_tokens(word)
        prompt = fit(nominal, profile.max_model_len, max_tokens if decode else 1)
        out[(context_label(nominal, prompt), decode)] = prompt
    return out


def simulate_card(profile: Profile, card_path: Path) -> Base:
    card = read_card(card_path)
    quiet = noise.without_noise(profile)
    sizes = prompt_sizes(profile, card.max_output_tokens or 4096)
    figures: dict[Key, dict[str, float]] = {}
    server_s: dict[Key, float] = {}
    rows: dict[str, list[int]] = {}
    for c in card.matrix:
        if c.status == "valid":
            rows.setdefault(c.context, []).append(c.concurrency)
    for ctx, levels in rows.items():
        tokens = sizes.get((ctx, True), context_tokens(ctx))
        scout, cells = virtual.run_row(quiet, tokens, sorted(levels))
        for cell in cells:
            key: Key = ("decode", ctx, cell.concurrency)
            f = cell.figures
            figures[key] = {
                "total_tok_s": f.total_tok_s,
                "per_request_tok_s": f.per_request_tok_s,
                "ttft_s": f.ttft_s,
                "tbt_s": f.tbt_s,
            }
            server_s[key] = cell.gate_s + f.measured_for_s
        first = ("decode", ctx, min(levels))
        server_s[first] += scout
    for p in card.prefill:
        tokens = sizes.get((p.context, p.context in rows), context_tokens(p.context))
        ttft = virtual.prefill_ttft_s(TwinScheduler(quiet, 0), virtual.prompt_ids(tokens, 1))
        key = ("prefill", p.context, 1)
        figures[key] = {"prefill_tok_s": tokens / ttft, "prefill_ttft_s": ttft}
        server_s[key] = ttft if p.context not in rows else 0.0  # decode rows' scouts are it
    return Base(figures, server_s)


def _value(base: float, metric: str, f: float) -> float:
    return base / f if BY_NAME[metric].kind == "throughput" else base * f


def side(
    profile: Profile,
    base: Base,
    seeds: list[int],
    name: str,
    *,
    counts: dict[Key, int] | None = None,
    change: tuple[Key, str, float] | None = None,
) -> RunFigures:
    """One side: a run per seed (its trial 0), cell `key` measured counts[key] times."""
    cells: dict[Key, Cell] = {}
    for key, figs in base.figures.items():
        n = len(seeds) if counts is None else counts[key]
        conc = key[2] if key[0] == "decode" else 0
        factors = [
            noise.cell_factor(profile, s, 0, context_tokens(key[1]), conc) for s in seeds[:n]
        ]
        trials = {m: tuple(_value(v, m, f) for f in factors) for m, v in figs.items()}
        if change is not None and change[0] == key:
            metric, pct = change[1], change[2]
            worse = 1 - pct / 100 if BY_NAME[metric].higher_is_better else 1 + pct / 100
            trials[metric] = tuple(v * worse for v in trials[metric])
        cells[key] = Cell(key[0], key[1], key[2], "valid", None, trials)  # type: ignore[arg-type]
    return run_of(name, cells)


def run_of(name: str, cells: dict[Key, Cell]) -> RunFigures:
    """A simulated run at server speed holding `cells`."""
    return RunFigures(
        name=name,
        kind="run",
        speed_factor=1.0,
        metadata={},
        cells=cells,
        contexts=context_order(k[1] for k in cells),
        concurrencies=tuple(sorted({k[2] for k in cells if k[0] == "decode"})),
    )


def _seeds(i: int, label: str, n: int) -> list[int]:
    return [1_000_000 * i + (1000 if label == "A" else 2000) + k for k in range(n)]


def fixed(
    profile: Profile, base: Base, i: int, n: int, change: tuple[Key, str, float] | None = None
) -> Comparison:
    a = side(profile, base, _seeds(i, "A", n), "A")
    b = side(profile, base, _seeds(i, "B", n), "B", change=change)
    return compare(a, b, Policy())


def twin_costs(base: Base, start_s: float = budget.START_ESTIMATE_S) -> Costs:
    """A start as the compare's budget states it, a sweep of the card's matrix on the twin."""
    sweep = _cell_seconds(base, lambda k: 1)
    return Costs(start_s, sweep, f"a stated start, the twin's sweep {sweep:.0f} s")


def sequential(
    profile: Profile,
    base: Base,
    i: int,
    change: tuple[Key, str, float] | None = None,
    costs: Costs | None = None,
) -> sequential_mod.SequentialOutcome:
    """Comparison i by the product's sequential scheduler, each trial a virtual run, its
    stages chosen for COSTS (default: `twin_costs`)."""

    def measure(which: str, trial: int, cells: frozenset[Key] | None) -> RunFigures:
        label = "A" if which == "a" else "B"
        seed = _seeds(i, label, trial)[-1]
        run = side(profile, base, [seed], label, change=change if which == "b" else None)
        if cells is None:
            return run
        kept = {k: c for k, c in run.cells.items() if k in cells}
        return dataclasses.replace(run, cells=kept, planned=cells)

    return sequential_mod.run(
        measure, Policy(), costs=costs or twin_costs(base), cells=len(base.figures)
    )


def _ci(k: int, n: int) -> str:
    """k of n with its 95 % Wilson interval."""
    z = 1.96
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return f"{k}/{n} = {p:.1%} (95 % CI {centre - half:.1%}–{centre + half:.1%})"


def _cell_seconds(base: Base, counts: Callable[[Key], int]) -> float:
    return sum(base.server_s[k] * counts(k) for k in base.figures)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tools.verdict_power")
    p.add_argument("--profile", default="published")
    p.add_argument("--card", type=Path, default=CARD / CARD_NAME)
    p.add_argument("--comparisons", type=int, default=300)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--mde-samples", type=int, default=20)
    p.add_argument(
        "--corpus-splits",
        type=int,
        default=200,
        help="k-vs-k splits of each engine's corpus per k (0: leave the corpus out)",
    )
    p.add_argument(
        "--corpus-alarm-splits",
        type=int,
        default=600,
        help="k-vs-k splits per k for the run-level model's false alarms (power: --corpus-splits)",
    )
    p.add_argument(
        "--sequential-draws",
        type=int,
        default=100,
        help="orders of each corpus's runs for the sequential design (0: none)",
    )
    p.add_argument(
        "--fitted-comparisons",
        type=int,
        default=100,
        help="comparisons per k on the twin with each noise fit, for power (0: none)",
    )
    p.add_argument(
        "--fitted-alarm-comparisons",
        type=int,
        default=1000,
        help="A/A comparisons per k on the twin with each noise fit, for false alarms",
    )
    p.add_argument(
        "--twin-only",
        action="store_true",
        help="only the twin: with each noise fit in bench/twin/noise_fits, then default noise",
    )
    p.add_argument(
        "--every-figure",
        type=int,
        nargs="*",
        default=[],
        metavar="K",
        help="for these k, each corpus's power in one cell at every figure of every cell "
        "(no figure drawn at random), on --every-figure-splits splits",
    )
    p.add_argument("--every-figure-splits", type=int, default=1000)
    p.add_argument("--corpus", type=Path, default=corpus_power.CORPUS, help="the noise corpus")
    p.add_argument("--corpus-only", action="store_true", help="leave the default twin out")
    p.add_argument(
        "--fits-dir",
        type=Path,
        default=noise.FITS,
        help="where each corpus's fitted noise is written (default: the twin's noise fits)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    t0 = time.monotonic()
    fitted = Fitted(args.fitted_comparisons, args.fitted_alarm_comparisons)
    if args.twin_only:
        fits_report(args.card, fitted)
    else:
        corpus_report(
            args.corpus,
            Sizes(
                args.corpus_splits,
                args.corpus_alarm_splits,
                args.sequential_draws,
                tuple(args.every_figure),
                args.every_figure_splits,
            ),
            fitted,
            args.card,
            args.fits_dir,
        )
    if args.corpus_only:
        return 0
    profile = profiles.load(args.profile)
    base = simulate_card(profile, args.card)
    n, N = args.trials, args.comparisons
    print(
        f"twin profile {profile.name}: noise {profile.noise_run * 100:g} % per run + "
        f"{profile.noise_trial * 100:g} % per trial (per cell); {len(base.figures)} valid "
        f"cells of the card; {N} comparisons each; {n} trials a side (one run each)"
    )
    names = [m.name for ph in ("decode", "prefill") for m in metrics_of(ph)]
    # A/A and power, fixed design.
    aa_flagged = 0
    power_hits = 0
    rng = random.Random(14)
    changes: list[tuple[Key, str, float]] = []
    for i in range(N):
        c = fixed(profile, base, i, n)
        aa_flagged += bool(c.flagged)
        cell = rng.choice(list(base.figures))
        metric = rng.choice(list(base.figures[cell]))
        printed = next(
            f.mde_pct
            for x in c.cells
            if x.key == cell
            for f in x.figures
            if f.metric.name == metric
        )
        assert printed is not None
        change = (cell, metric, printed)
        changes.append(change)
        changed = fixed(profile, base, i, n, change)
        hit = next(x for x in changed.cells if x.key == cell)
        power_hits += any(f.metric.name == metric and f.mark == "regressed" for f in hit.figures)
    print()
    print("| design | A/A: comparisons flagging anything | power at the printed MDE | "
          "cell measurements per verdict | server time per verdict |")  # fmt: skip
    print("|---|---|---|---|---|")
    fixed_s = _cell_seconds(base, lambda k: 2 * n)
    print(
        f"| fixed, {n} trials a side | {_ci(aa_flagged, N)} | "
        f"{_ci(power_hits, N)} | {2 * n * len(base.figures)} | "
        f"{fixed_s / 3600:.2f} h + {2 * n} server starts |"
    )
    _sequential_row(profile, base, changes, fixed_s)
    _mde_table(profile, base, names, args.mde_samples)
    print(f"\nwall {time.monotonic() - t0:.0f} s")
    return 0


@dataclass(frozen=True)
class Sizes:
    splits: int  # per k: power, and today's statistics' false alarms
    alarm_splits: int  # per k: the run-level model's false alarms
    sequential_draws: int
    every_figure: tuple[int, ...] = ()  # k's whose power is measured at every figure
    every_figure_splits: int = 0  # on this many splits a k


@dataclass(frozen=True)
class Fitted:
    comparisons: int  # per k and fit: power (0: the twin with the fits is left out)
    alarm_comparisons: int  # per k and fit: false alarms (at least `comparisons`)


def corpus_report(
    root: Path, sizes: Sizes, fitted: Fitted, card: Path, fits_dir: Path = noise.FITS
) -> None:
    """Each engine's corpus of real runs: its noise, the k-vs-k table, the sequential design,
    the fit written to FITS_DIR (default bench/twin/noise_fits/), and the twin with that
    noise; then the twin with every other fit (the published ones, e.g. quiet-gpu)."""
    folders = corpus_power.engines(root)
    for folder in folders:
        runs = corpus_power.load(folder)
        fit = corpus_power.fit(runs)
        print(f"\n## Corpus {folder.name}: {len(runs)} runs, each its own server start\n")
        print(corpus_power.fit_line(fit))
        corpus_power.write_fit(folder.name, fit, fits_dir)
        if sizes.splits:
            print()
            for line in corpus_power.table(
                runs, range(2, 7), sizes.splits, 27, alarms_limit=sizes.alarm_splits
            ):
                print(line, flush=True)
            print()
            for line in corpus_power.blocked(runs, range(2, 7)):
                print(line)
        if sizes.sequential_draws:
            print()
            for line in corpus_power.sequential_table(runs, sizes.sequential_draws, 27):
                print(line, flush=True)
        if sizes.every_figure:
            print()
            every = sizes.every_figure_splits
            for line in corpus_power.every_figure(runs, sizes.every_figure, every, 27):
                print(line, flush=True)
    fits_report(card, fitted)


def fits_report(card: Path, fitted: Fitted) -> None:
    """The twin (published) with every noise fit in bench/twin/noise_fits, k = 2 ... 6."""
    if not fitted.comparisons:
        return
    for name in noise.fit_names():
        profile = noise.with_fit(profiles.load("published"), name)
        print(f"\n## Twin (published) with the noise fit {name} ({noise.fit_source(name)})\n")
        print(
            f"false alarms on {max(fitted.alarm_comparisons, fitted.comparisons)} A/A "
            f"comparisons a k, power on the first {fitted.comparisons}\n"
        )
        base = simulate_card(profile, card)
        for line in fitted_table(
            profile, base, fitted.comparisons, alarms=fitted.alarm_comparisons
        ):
            print(line, flush=True)


def fitted_table(
    profile: Profile, base: Base, n: int, ks: range = range(2, 7), *, alarms: int = 0
) -> list[str]:
    """k-vs-k comparisons of the card's matrix on the twin (each side's runs fresh seeds):
    false alarms on max(ALARMS, N) A/A comparisons, power on the first N of them. A rate
    near the 5 % the design allows needs about 1,000 for the upper end of its 95 % interval
    to show under 7 %; power, well away from its bound, needs fewer."""
    out = [
        "| k a side | false alarms | power one cell | power everywhere | "
        "median MDE one cell | median MDE everywhere |",
        "|---|---|---|---|---|---|",
    ]
    rng = random.Random(27)
    total = max(alarms, n)
    for k in ks:
        flagged = cell_hits = all_hits = 0
        mdes_cell: list[float] = []
        mdes_all: list[float] = []
        for i in range(total):
            a = side(profile, base, _seeds(50_000 + i, "A", k), "A")
            b = side(profile, base, _seeds(50_000 + i, "B", k), "B")
            c = compare(a, b, Policy())
            flagged += bool(c.flagged)
            if i >= n:
                continue
            key = rng.choice(list(base.figures))
            metric = rng.choice(list(base.figures[key]))
            f = next(
                f for x in c.cells if x.key == key for f in x.figures if f.metric.name == metric
            )
            assert f.mde_pct is not None
            mdes_cell.append(f.mde_pct)
            hit = compare(a, corpus_power.planted(b, f.mde_pct, (key, metric)), Policy())
            cell_hits += any(
                g.metric.name == metric and g.mark == "regressed"
                for x in hit.cells
                if x.key == key
                for g in x.figures
            )
            if c.whole is not None:
                mdes_all.append(c.whole.mde_pct)
                every = compare(a, corpus_power.planted(b, c.whole.mde_pct), Policy())
                all_hits += bool(every.whole and every.whole.changed and every.whole.delta_pct > 0)
        out.append(
            f"| {k} | {corpus_power.share(flagged, total)} | {corpus_power.share(cell_hits, n)} | "
            f"{corpus_power.share(all_hits, n)} | {statistics.median(mdes_cell):.1f} % | "
            f"{statistics.median(mdes_all):.1f} % |"
        )
    return out


def _sequential_row(
    profile: Profile, base: Base, changes: list[tuple[Key, str, float]], fixed_s: float
) -> None:
    """The product's sequential scheduler (bench.verdict.sequential) on the same seeds."""
    N = len(changes)
    seq_aa = seq_power = 0
    seq_measurements = 0
    seq_s = 0.0
    starts = 0
    plans: set[str] = set()
    chosen = None
    for i in range(N):
        s = sequential(profile, base, i)
        seq_aa += bool(s.comparison.flagged)
        seq_measurements += sum(s.measurements.values())
        seq_s += _cell_seconds(base, lambda k, m=s.measurements: m.get(k, 0))  # type: ignore[misc]
        starts += len(s.trials)
        plans.add(", ".join(f"{a}+{b}" for a, b in s.plan))
        chosen = chosen or s.chosen
        cell, metric, _ = changes[i]
        t = sequential(profile, base, i, changes[i])
        hit = next(x for x in t.comparison.cells if x.key == cell)
        seq_power += any(f.metric.name == metric and f.mark == "regressed" for f in hit.figures)
    print(
        f"| sequential ({' or '.join(sorted(plans))}) | {_ci(seq_aa, N)} | "
        f"{_ci(seq_power, N)} | {seq_measurements / N:.0f} (mean) | "
        f"{seq_s / N / 3600:.2f} h = {seq_s / N / fixed_s:.0%} of fixed, "
        f"+ {starts / N:.1f} server starts (mean) |"
    )
    if chosen is not None:
        print()
        print("\n".join(chosen.lines()))


def _mde_table(profile: Profile, base: Base, names: list[str], samples: int) -> None:
    """The MDE each figure gets with 3 and 5 trials a side (median and worst cell)."""
    print()
    print("| figure | MDE 1 trial a side | MDE 3 trials (median / worst) | "
          "MDE 5 trials (median / worst) |")  # fmt: skip
    print("|---|---|---|---|")
    table: dict[int, dict[str, list[float]]] = {}
    for trials in (3, 5):
        table[trials] = {m: [] for m in names}
        for i in range(samples):
            c = fixed(profile, base, 10_000 + i, trials)
            for x in c.cells:
                for f in x.figures:
                    if f.mde_pct is not None:
                        table[trials][f.metric.name].append(f.mde_pct)
    for m in names:
        cols = []
        for trials in (3, 5):
            v = table[trials][m]
            cols.append(f"{statistics.median(v):.1f} % / {max(v):.1f} %" if v else "—")
        print(
            f"| {BY_NAME[m].label} | none: no noise estimate (raw Δ only) | {cols[0]} | {cols[1]} |"
        )


if __name__ == "__main__":
    sys.exit(main())
