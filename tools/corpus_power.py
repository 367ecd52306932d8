"""False alarms and power of `bench compare` on a corpus of real, identical runs.

The corpus (tools/noise_corpus.py, tests/data/noise_corpus/<engine>/runs/*/) holds runs of
one unchanged server, each its own server start. Any split of them into k runs for A and k
other runs for B is an A/A comparison with the server's real noise: a factor shared by
the cells of a run, cells with different noise, heavy tails, whatever drift the recording
saw. For k = 2 ... 6:

- false alarms: the share of splits in which compare flags anything, with its 95 % Wilson
  interval. Splits share runs, so they are not independent: the interval is the one a
  sample of that many independent comparisons would have, a little optimistic;
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
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bench import stats
from bench.twin import noise
from bench.verdict import runlevel
from bench.verdict.cells import BY_NAME, Cell, Key, RunFigures
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


@dataclass(frozen=True)
class Row:
    k: int
    splits: int
    false_alarms: int
    power_cell: int
    power_all: int
    mde_cell_pct: float  # median printed MDE of a figure in one cell
    mde_all_pct: float  # median MDE of a change everywhere (see the module docstring)


def _mde_all(c: Comparison) -> float | None:
    if c.whole is not None:
        return c.whole.mde_pct
    mdes = [f.mde_pct for x in c.cells for f in x.figures if f.mde_pct is not None]
    return statistics.median(mdes) if mdes else None


def _everywhere_found(c: Comparison) -> bool:
    if c.policy.run_level and c.whole is not None:
        return c.whole.changed and c.whole.delta_pct > 0
    return any(f.mark == "regressed" for x in c.cells for f in x.figures)


def evaluate(
    runs: list[RunFigures], k: int, policy: Policy, *, limit: int = 300, seed: int = 27
) -> Row | None:
    chosen = splits(len(runs), k, limit, seed + k)
    if not chosen:
        return None
    rng = random.Random(seed * 1000 + k)
    alarms = hit_cell = hit_all = 0
    mdes_cell: list[float] = []
    mdes_all: list[float] = []
    for ia, ib in chosen:
        a = merge_runs([runs[i] for i in ia], "A")
        b = merge_runs([runs[i] for i in ib], "B")
        c = compare(a, b, policy)
        alarms += bool(c.flagged)
        figs = [(x.key, f) for x in c.cells for f in x.figures if f.mde_pct is not None]
        if figs:
            key, f = rng.choice(figs)
            assert f.mde_pct is not None
            mdes_cell.append(f.mde_pct)
            changed = compare(a, planted(b, f.mde_pct, (key, f.metric.name)), policy)
            cell = next(x for x in changed.cells if x.key == key)
            hit_cell += any(g.metric is f.metric and g.mark == "regressed" for g in cell.figures)
        everywhere = _mde_all(c)
        if everywhere is not None:
            mdes_all.append(everywhere)
            hit_all += _everywhere_found(compare(a, planted(b, everywhere), policy))
    return Row(
        k,
        len(chosen),
        alarms,
        hit_cell,
        hit_all,
        statistics.median(mdes_cell) if mdes_cell else math.nan,
        statistics.median(mdes_all) if mdes_all else math.nan,
    )


def table(runs: list[RunFigures], ks: range, limit: int, seed: int) -> Iterator[str]:
    """Markdown rows: k, then today's and the run-level statistics side by side."""
    yield (
        "| k a side | splits | false alarms, today's | false alarms, run-level | "
        "power one cell, today's | power one cell, run-level | "
        "power everywhere, today's | power everywhere, run-level | "
        "median MDE one cell (today's / run-level) | median MDE everywhere (today's / run-level) |"
    )
    yield "|---|---|---|---|---|---|---|---|---|---|"
    for k in ks:
        old = evaluate(runs, k, Policy(run_level=False), limit=limit, seed=seed)
        new = evaluate(runs, k, Policy(), limit=limit, seed=seed)
        if old is None or new is None:
            continue
        n = old.splits
        yield (
            f"| {k} | {n} | {share(old.false_alarms, n)} | {share(new.false_alarms, n)} | "
            f"{share(old.power_cell, n)} | {share(new.power_cell, n)} | "
            f"{share(old.power_all, n)} | {share(new.power_all, n)} | "
            f"{old.mde_cell_pct:.1f} % / {new.mde_cell_pct:.1f} % | "
            f"{old.mde_all_pct:.1f} % / {new.mde_all_pct:.1f} % |"
        )


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


def write_fit(name: str, f: NoiseFit) -> Path:
    """bench/twin/noise_fits/NAME.json: the twin's noise fields from this corpus."""
    path = noise.FITS / f"{name}.json"
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
