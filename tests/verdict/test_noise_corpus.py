"""The noise corpus: its format takes runs recorded anywhere, and resampling it is exact."""

from __future__ import annotations

import json
import random
from pathlib import Path

from bench.card.model import Card
from bench.verdict.compare import Policy
from bench.verdict.run_figures import from_results
from tests.support.synth import make_results
from tools import corpus_power


def _write(root: Path, name: str, results_json: str, env: object) -> None:
    folder = root / "gpu-host" / "runs" / name
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(results_json)
    if env is not None:
        (folder / "environment.json").write_text(json.dumps(env))


def test_runs_recorded_elsewhere_are_read_from_their_results_json_alone(
    card: Card, tmp_path: Path
) -> None:
    # A GPU host's A/A runs: results.json only, or with the orchestrator's environment.json.
    for i in range(6):
        results = make_results(card, noise=0.01, seed=i, contexts={"8K", "16K"})
        env = {"server_start": {"ready_after_s": 300.0 + i}} if i % 2 else None
        _write(tmp_path, f"host-a-{i}", results.model_dump_json(), env)
    [folder] = corpus_power.engines(tmp_path)
    runs = corpus_power.load(folder)
    assert [r.name for r in runs] == [f"host-a-{i}" for i in range(6)]
    assert [r.start_s for r in runs] == [(), (301.0,), (), (303.0,), (), (305.0,)]
    assert all(r.trust == "unsigned" for r in runs)
    row = corpus_power.evaluate(runs, 3, Policy(), limit=1000, seed=1)
    assert row is not None
    assert len(row.false_alarms.hits) == 20  # every split of 6 runs into 3 + 3: C(6, 3)
    lo, hi = row.false_alarms.runs_interval()
    assert 0.0 <= lo <= row.false_alarms.value <= hi <= 1.0
    fit = corpus_power.fit(runs)
    assert fit.runs == 6


def test_splits_are_all_of_them_or_a_seeded_sample() -> None:
    every = corpus_power.splits(6, 2, 1000, 0)
    assert len(every) == 15 * 6  # C(6, 2) x C(4, 2), ordered (A, B)
    assert all(not set(a) & set(b) for a, b in every)
    sample = corpus_power.splits(12, 4, 50, 7)
    assert len(sample) == len(set(sample)) == 50
    assert sample == corpus_power.splits(12, 4, 50, 7)
    assert corpus_power.splits(5, 3, 10, 0) == []


def test_wilson_interval_of_a_rate() -> None:
    lo, hi = corpus_power.wilson(0, 100)
    assert lo == 0.0 and 0.036 < hi < 0.038
    lo, hi = corpus_power.wilson(5, 100)
    assert 0.021 < lo < 0.022 and 0.111 < hi < 0.113


def test_the_interval_over_runs_widens_when_one_run_makes_the_alarms() -> None:
    # Every split holding run 0 flags, no other: the rate is a fact about one run, and the
    # interval over runs says so, where one over independent comparisons would not.
    chosen = corpus_power.splits(12, 3, 2000, 0)
    hits = tuple(0 in a + b for a, b in chosen)
    rate = corpus_power.Rate(hits, tuple(chosen), 12)
    lo, hi = rate.runs_interval()
    wlo, whi = corpus_power.wilson(sum(hits), len(hits))
    assert hi - lo > 3 * (whi - wlo)
    # Spread evenly over the runs, the same rate is as sure as its splits allow.
    rng = random.Random(3)
    even = corpus_power.Rate(tuple(rng.random() < rate.value for _ in chosen), tuple(chosen), 12)
    elo, ehi = even.runs_interval()
    assert ehi - elo < 1.5 * (whi - wlo)


def test_power_at_every_figure_plants_each_figure_of_each_cell_in_every_split(card: Card) -> None:
    runs = [
        from_results(make_results(card, noise=0.02, seed=i, contexts={"8K"}), name=f"r{i}")
        for i in range(6)
    ]
    lines = list(corpus_power.every_figure(runs, [2], limit=1000, seed=1))
    head = [line for line in lines if line.startswith("| 2 | ")]
    # every split of 6 runs into 2 + 2 (90), each with every figure that printed an MDE
    summary = head[0].split(" | ")
    assert summary[1] == "90"
    planted, total = (int(x) for x in summary[2].split(" = ")[0].split("/"))
    figures = head[1:]
    assert total == sum(int(row.split(" | ")[2].split("/")[1].split(" ")[0]) for row in figures)
    assert total % 90 == 0 and total // 90 == len(figures) >= 4
    assert 0 < planted <= total
