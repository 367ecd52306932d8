"""False alarms and power of `bench compare` on a corpus of real, identical runs.

The corpus (tools/noise_corpus.py, tests/data/noise_corpus/<engine>/runs/*/) holds runs of
one unchanged server, each its own server start. Any split of them into k runs for A and k
other runs for B is an A/A comparison with the server's real noise: a factor shared by
the cells of a run, cells with different noise, heavy tails, whatever drift the recording
saw. For k = 2 ... 6:

- false alarms: the share of splits in which compare flags anything. Splits share runs, so
  they are not independent comparisons: next to the interval a sample of that many
  independent comparisons would have (Wilson, optimistic), each rate carries a 95 %
  interval over runs (`Rate.runs_interval`): the rate over splits is a U-statistic of the
  runs, and its variance to first order comes from how much the rate differs between the
  splits holding one run and those holding another. A first-order figure: when 2k is
  close to the number of runs (k = 6 of 12: every split uses every run) it is still
  optimistic, and no resampling of 12 runs can do better. That interval is the one the
  targets are judged by;
- power in one cell: one random figure of one random cell of B made worse by the MDE the
  verdict printed for it in the A/A comparison of the same split; the share in which that
  figure is flagged as regressed;
- power everywhere: every figure of B made worse by the MDE printed for a change of the
  whole run (the run-level model), or by the median MDE printed over the figures (today's
  statistics, which print no such MDE); the share in which the verdict says the whole run
  is slower (run-level model) or flags a regression anywhere (today's).

Splits are a seeded random sample (or all of them when there are fewer), so the same corpus
and seed give the same table.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import random
import statistics
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench import stats
from bench.twin import noise
from bench.verdict import runlevel, sequential
from bench.verdict.cells import BY_NAME, Cell, Key, MetricSpec, RunFigures
from bench.verdict.compare import Comparison, Policy, compare
from bench.verdict.run_source import load_run, merge_runs

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "noise_corpus"


def load(folder: Path) -> list[RunFigures]:
    """The runs of one engine's corpus folder, in the order of their folder names."""
    paths = sorted(p.parent for p in (folder / "runs").glob("*/results.json"))
    return [dataclasses.replace(load_run(p), name=p.name) for p in paths]


def engines(root: Path = CORPUS) -> list[Path]:
    return sorted(p for p in root.iterdir() if (p / "runs").is_dir()) if root.is_dir() else []


def splits(n: int, k: int, limit: int, seed: int) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Ordered pairs of disjoint k-subsets of range(n): all when there are at most
    `limit`, else `limit` distinct ones drawn with `seed`."""
    if 2 * k > n:
        return []
    total = math.comb(n, k) * math.comb(n - k, k)
    if total <= limit:
        out = []
        for a in itertools.combinations(range(n), k):
            rest = [i for i in range(n) if i not in a]
            out += [(a, b) for b in itertools.combinations(rest, k)]
        return out
    rng = random.Random(seed)
    seen: set[tuple[tuple[int, ...], tuple[int, ...]]] = set()
    while len(seen) < limit:
        picked = rng.sample(range(n), 2 * k)
        seen.add((tuple(sorted(picked[:k])), tuple(sorted(picked[k:]))))
    return sorted(seen)


def _worse(metric: str, value: float, pct: float) -> float:
    f = 1.0 + pct / 100.0
    return value / f if BY_NAME[metric].higher_is_better else value * f


def planted(run: RunFigures, pct: float, where: tuple[Key, str] | None = None) -> RunFigures:
    """RUN made worse by pct %: in one (cell, figure), or everywhere (None)."""
    cells: dict[Key, Cell] = {}
    for key, cell in run.cells.items():
        trials = {
            m: tuple(_worse(m, v, pct) for v in vs) if where is None or where == (key, m) else vs
            for m, vs in cell.trials.items()
        }
        cells[key] = dataclasses.replace(cell, trials=trials)
    return dataclasses.replace(run, cells=cells)


def wilson(k: int, n: int) -> tuple[float, float]:
    if n == 0:
        return (0.0, 1.0)
    z = 1.96
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(centre - half, 0.0), min(centre + half, 1.0)


def share(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k}/{n} = {k / n:.1%} ({lo:.1%}–{hi:.1%})" if n else "—"


Split = tuple[tuple[int, ...], tuple[int, ...]]


@dataclass(frozen=True)
class Rate:
    """A share of splits with its jackknife-over-runs interval (see the module docstring)."""

    hits: tuple[bool, ...]
    splits: tuple[Split, ...]
    runs: int

    @property
    def value(self) -> float:
        return sum(self.hits) / len(self.hits) if self.hits else math.nan

    def runs_interval(self) -> tuple[float, float]:
        """95 %: rate ± 1.96 sd, the sd a U-statistic of the runs has to first order
        (Hoeffding): d² zeta / n for kernels of d = 2k runs out of n, zeta the variance over
        runs j of the rate among the splits that hold j (less its own sampling part), plus
        the sampling of splits, p (1 - p) / N."""
        p, total, n = self.value, len(self.hits), self.runs
        if not total:
            return (0.0, 1.0)
        d = len(self.splits[0][0]) + len(self.splits[0][1])
        means: list[float] = []
        noise: list[float] = []
        for j in range(n):
            held = [h for h, (a, b) in zip(self.hits, self.splits, strict=True) if j in a + b]
            if held:
                means.append(sum(held) / len(held))
                noise.append(p * (1 - p) / len(held))
        mean = math.fsum(means) / len(means)
        zeta = max(
            math.fsum((x - mean) ** 2 for x in means) / len(means) - statistics.mean(noise), 0.0
        )
        half = 1.96 * math.sqrt(d * d / n * zeta + p * (1 - p) / total)
        return max(p - half, 0.0), min(p + half, 1.0)

    def text(self) -> str:
        if not self.hits:
            return "—"
        k, n = sum(self.hits), len(self.hits)
        lo, hi = self.runs_interval()
        wlo, whi = wilson(k, n)
        return f"{k}/{n} = {k / n:.1%} (runs {lo:.1%}–{hi:.1%}; independent {wlo:.1%}–{whi:.1%})"


@dataclass(frozen=True)
class Row:
    k: int
    false_alarms: Rate
    power_cell: Rate
    power_all: Rate
    mde_cell_pct: float  # median printed MDE of a figure in one cell
    mde_all_pct: float  # median MDE of a change everywhere (see the module docstring)


def _mde_all(c: Comparison) -> float | None:
    if c.whole is not None:
        return c.whole.mde_pct
    mdes = [f.mde_pct for x in c.cells for f in x.figures if f.mde_pct is not None]
    return statistics.median(mdes) if mdes else None


def _regressed(c: Comparison, key: Key, metric: MetricSpec) -> bool:
    """Whether C flags METRIC of the cell KEY as regressed (the planted change found)."""
    cell = next(x for x in c.cells if x.key == key)
    return any(g.metric is metric and g.mark == "regressed" for g in cell.figures)


def _everywhere_found(c: Comparison) -> bool:
    if c.policy.run_level and c.whole is not None:
        return c.whole.changed and c.whole.delta_pct > 0
    return any(f.mark == "regressed" for x in c.cells for f in x.figures)


def _sides(runs: list[RunFigures], split: Split) -> tuple[RunFigures, RunFigures]:
    return merge_runs([runs[i] for i in split[0]], "A"), merge_runs(
        [runs[i] for i in split[1]], "B"
    )


def evaluate(
    runs: list[RunFigures],
    k: int,
    policy: Policy,
    *,
    limit: int = 300,
    alarms_limit: int | None = None,
    seed: int = 27,
) -> Row | None:
    """False alarms on `alarms_limit` splits (default `limit`), power on the first `limit`
    of them (a seeded sample: the first `limit` are a random sample too)."""
    n_alarms = max(alarms_limit or limit, limit)
    chosen = splits(len(runs), k, n_alarms, seed + k)
    if not chosen:
        return None
    random.Random(seed * 7 + k).shuffle(chosen)
    rng = random.Random(seed * 1000 + k)
    alarms: list[bool] = []
    hit_cell: list[bool] = []
    hit_all: list[bool] = []
    cell_splits: list[Split] = []
    all_splits: list[Split] = []
    mdes_cell: list[float] = []
    mdes_all: list[float] = []
    for i, split in enumerate(chosen):
        a, b = _sides(runs, split)
        c = compare(a, b, policy)
        alarms.append(bool(c.flagged))
        if i >= limit:
            continue
        figs = [(x.key, f) for x in c.cells for f in x.figures if f.mde_pct is not None]
        if figs:
            key, f = rng.choice(figs)
            assert f.mde_pct is not None
            mdes_cell.append(f.mde_pct)
            changed = compare(a, planted(b, f.mde_pct, (key, f.metric.name)), policy)
            hit_cell.append(_regressed(changed, key, f.metric))
            cell_splits.append(split)
        everywhere = _mde_all(c)
        if everywhere is not None:
            mdes_all.append(everywhere)
            hit_all.append(_everywhere_found(compare(a, planted(b, everywhere), policy)))
            all_splits.append(split)
    n = len(runs)
    return Row(
        k,
        Rate(tuple(alarms), tuple(chosen), n),
        Rate(tuple(hit_cell), tuple(cell_splits), n),
        Rate(tuple(hit_all), tuple(all_splits), n),
        statistics.median(mdes_cell) if mdes_cell else math.nan,
        statistics.median(mdes_all) if mdes_all else math.nan,
    )


def table(
    runs: list[RunFigures], ks: range, limit: int, seed: int, *, alarms_limit: int | None = None
) -> Iterator[str]:
    """Markdown rows: k, then today's and the run-level statistics side by side (false
    alarms of the run-level model on `alarms_limit` splits, everything else on `limit`)."""
    yield (
        "| k a side | false alarms, today's | false alarms, run-level | "
        "power one cell, today's | power one cell, run-level | "
        "power everywhere, today's | power everywhere, run-level | "
        "median MDE one cell (today's / run-level) | median MDE everywhere (today's / run-level) |"
    )
    yield "|---|---|---|---|---|---|---|---|---|"
    for k in ks:
        old = evaluate(runs, k, Policy(run_level=False), limit=limit, seed=seed)
        new = evaluate(runs, k, Policy(), limit=limit, alarms_limit=alarms_limit, seed=seed)
        if old is None or new is None:
            continue
        yield (
            f"| {k} | {old.false_alarms.text()} | {new.false_alarms.text()} | "
            f"{old.power_cell.text()} | {new.power_cell.text()} | "
            f"{old.power_all.text()} | {new.power_all.text()} | "
            f"{old.mde_cell_pct:.1f} % / {new.mde_cell_pct:.1f} % | "
            f"{old.mde_all_pct:.1f} % / {new.mde_all_pct:.1f} % |"
        )


def every_figure(runs: list[RunFigures], ks: Sequence[int], limit: int, seed: int) -> Iterator[str]:
    """Power in one cell with nothing left to chance but the runs: in each of `limit` splits
    (the seeded sample `evaluate` draws, all of them when there are fewer), every figure of
    every cell in turn made worse by the MDE the A/A comparison printed for it. Markdown: a
    row a k (the share over every split and figure, its interval over runs, the lowest and
    highest figure), then a row a k and figure."""
    policy = Policy()
    detail: list[str] = []
    yield (
        "| k a side | splits | power one cell at its printed MDE, every figure of every cell | "
        "lowest figure | highest figure |"
    )
    yield "|---|---|---|---|---|"
    for k in ks:
        chosen = splits(len(runs), k, limit, seed + k)
        random.Random(seed * 7 + k).shuffle(chosen)
        hits: list[bool] = []
        held: list[Split] = []
        by_figure: dict[tuple[Key, str], list[bool]] = {}
        for split in chosen[:limit]:
            a, b = _sides(runs, split)
            c = compare(a, b, policy)
            for x in c.cells:
                for f in x.figures:
                    if f.mde_pct is None:
                        continue
                    changed = compare(a, planted(b, f.mde_pct, (x.key, f.metric.name)), policy)
                    hit = _regressed(changed, x.key, f.metric)
                    hits.append(hit)
                    held.append(split)
                    by_figure.setdefault((x.key, f.metric.name), []).append(hit)
        if not hits:
            continue
        shares = {w: sum(h) / len(h) for w, h in by_figure.items()}
        low, high = min(shares, key=shares.__getitem__), max(shares, key=shares.__getitem__)
        yield (
            f"| {k} | {len(chosen[:limit])} | {Rate(tuple(hits), tuple(held), len(runs)).text()} | "
            f"{_figure(low)} {shares[low]:.1%} | {_figure(high)} {shares[high]:.1%} |"
        )
        detail += [
            f"| {k} | {_figure(w)} | {sum(h)}/{len(h)} = {shares[w]:.1%} |"
            for w, h in sorted(by_figure.items())
        ]
    yield ""
    yield "| k a side | figure | power at its printed MDE |"
    yield "|---|---|---|"
    yield from detail


def _figure(where: tuple[Key, str]) -> str:
    (phase, context, concurrency), metric = where
    return f"{phase} {context} × {concurrency} {metric}"


def sequential_table(runs: list[RunFigures], draws: int, seed: int) -> Iterator[str]:
    """The sequential design (`bench.verdict.sequential`) on the corpus: each draw a seeded
    order of the runs, A's trials the first STAGES[-1] of it, B's the next; a later stage's
    run is that run restricted to the open cells. Power: B's runs with one random figure of
    one cell made worse by the MDE the fixed design (3 + 3, the same first runs) printed."""
    last_a, last_b = sequential.STAGES[-1]
    if last_a + last_b > len(runs):
        return
    rng = random.Random(seed)
    alarms: list[bool] = []
    hits: list[bool] = []
    used: list[Split] = []
    spent = 0
    fixed_cost = 0
    for _ in range(draws):
        order = rng.sample(range(len(runs)), last_a + last_b)
        split: Split = (tuple(order[:last_a]), tuple(order[last_a:]))
        a3, b3 = _sides(runs, (split[0][:3], split[1][:3]))
        fixed = compare(a3, b3, Policy())
        figs = [(x.key, f) for x in fixed.cells for f in x.figures if f.mde_pct is not None]
        key, f = rng.choice(figs)
        assert f.mde_pct is not None
        change = (key, f.metric.name, f.mde_pct)
        out = sequential.run(_measure(runs, split, None), Policy(), stages=sequential.STAGES)
        alarms.append(bool(out.comparison.flagged))
        spent += sum(out.measurements.values())
        fixed_cost += 2 * sequential.FIXED_TRIALS * len(out.measurements)
        hit = sequential.run(
            _measure(runs, split, change), Policy(), stages=sequential.STAGES
        ).comparison
        hits.append(_regressed(hit, key, f.metric))
        used.append(split)
    n = len(runs)
    stages = ", ".join(f"{a}+{b}" for a, b in sequential.STAGES)
    yield (
        "| design | draws | false alarms | power one cell at the fixed design's printed MDE | "
        "cell measurements (share of fixed 3 + 3) |"
    )
    yield "|---|---|---|---|---|"
    yield (
        f"| sequential ({stages}) | {draws} | {Rate(tuple(alarms), tuple(used), n).text()} | "
        f"{Rate(tuple(hits), tuple(used), n).text()} | {spent / draws:.1f} "
        f"({spent / fixed_cost:.0%}) |"
    )


def _measure(
    runs: list[RunFigures], split: Split, change: tuple[Key, str, float] | None
) -> sequential.Measure:
    def measure(side: sequential.Side, trial: int, cells: frozenset[Key] | None) -> RunFigures:
        run = runs[split[0 if side == "a" else 1][trial - 1]]
        if side == "b" and change is not None:
            run = planted(run, change[2], (change[0], change[1]))
        if cells is None:
            return run
        kept = {k: c for k, c in run.cells.items() if k in cells}
        return dataclasses.replace(run, cells=kept, planned=cells)

    return measure


@dataclass(frozen=True)
class NoiseFit:
    """The corpus's run-to-run noise in the twin's terms (`bench.twin.noise`)."""

    noise_shared: float  # scale of the run level's log (a Student t's scale when df > 0)
    noise_shared_df: float  # 0: normal
    noise_run: float  # median over figures of a cell's sd once the run's level is out
    noise_run_range: tuple[float, float]  # smallest and largest of those sds
    level_sd: float  # sd of the runs' levels
    level_kurtosis: float  # excess kurtosis of the runs' levels
    drift_per_run: float  # slope of the run level over the recording order (log per run)
    runs: int


def fit(runs: list[RunFigures]) -> NoiseFit:
    """Run levels and residual spreads of a corpus, every run one side of itself."""
    side = merge_runs(runs, "corpus")
    found = runlevel.items(side, side)
    lv = runlevel.levels(side, side, found)
    order = sorted(lv.a)
    u = [lv.a[r] for r in order]
    n = len(u)
    mean_u = math.fsum(u) / n
    var_u = math.fsum((x - mean_u) ** 2 for x in u) / (n - 1)
    m4 = math.fsum((x - mean_u) ** 4 for x in u) / n
    m2 = math.fsum((x - mean_u) ** 2 for x in u) / n
    kurt = m4 / (m2 * m2) - 3.0 if m2 > 0 else 0.0
    # Student t: excess kurtosis 6 / (df - 4); its sd is scale x sqrt(df / (df - 2)).
    df = 4.0 + 6.0 / kurt if kurt > 0 else 0.0
    scale = math.sqrt(var_u * (df - 2.0) / df) if df > 0 else math.sqrt(var_u)
    xs = list(range(n))
    mx = math.fsum(xs) / n
    slope = math.fsum((x - mx) * (y - mean_u) for x, y in zip(xs, u, strict=True)) / math.fsum(
        (x - mx) ** 2 for x in xs
    )
    residual = runlevel.without_levels(side, lv.every_a, found)
    sds = []
    for key, m in found:
        logs = [math.log(v) for v in residual.cells[key].trials[m]]
        if len(logs) >= 2:
            sds.append(math.sqrt(stats.sample_variance(logs)))
    return NoiseFit(
        round(scale, 4),
        round(df, 1),
        round(statistics.median(sds), 4),
        (round(min(sds), 4), round(max(sds), 4)),
        math.sqrt(var_u),
        kurt,
        slope,
        n,
    )


def fit_line(f: NoiseFit) -> str:
    tails = f"Student t, {f.noise_shared_df:g} df" if f.noise_shared_df else "normal"
    return (
        f"Noise: a run's level (shared by all its cells) varies by {f.level_sd * 100:.1f} % "
        f"(sd of its log; excess kurtosis {f.level_kurtosis:+.1f}, fitted as {tails}, scale "
        f"{f.noise_shared * 100:.1f} %); a cell's own noise beyond it {f.noise_run * 100:.1f} % "
        f"(median over figures; {f.noise_run_range[0] * 100:.1f}–"
        f"{f.noise_run_range[1] * 100:.1f} %); drift {f.drift_per_run * 100:+.2f} % a run "
        f"over the recording order."
    )


def write_fit(name: str, f: NoiseFit, folder: Path = noise.FITS) -> Path:
    """FOLDER/NAME.json (default bench/twin/noise_fits/): the twin's noise fields from this
    corpus."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.json"
    doc = {
        "source": f"tests/data/noise_corpus/{name} ({f.runs} runs), fitted by make verdict-power",
        "noise_shared": f.noise_shared,
        "noise_shared_df": f.noise_shared_df,
        "noise_run": f.noise_run,
        "noise_trial": 0.0,
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def blocked(runs: list[RunFigures], ks: range) -> Iterator[str]:
    """Drift: A = k consecutive runs of the recording, B = the next k (every start)."""
    yield "| k a side | blocked splits | flagging anything, today's | the same, run-level |"
    yield "|---|---|---|---|"
    for k in ks:
        starts = range(len(runs) - 2 * k + 1)
        if not starts:
            continue
        counts = [0, 0]
        for i in starts:
            a = merge_runs(runs[i : i + k], "A")
            b = merge_runs(runs[i + k : i + 2 * k], "B")
            for j, policy in enumerate((Policy(run_level=False), Policy())):
                counts[j] += bool(compare(a, b, policy).flagged)
        n = len(starts)
        yield f"| {k} | {n} | {counts[0]} of {n} | {counts[1]} of {n} |"
