"""Issue 14: the twin has run-to-run noise, seeded per run, per run and per trial, 0 possible."""

from __future__ import annotations

import math
import statistics

import pytest

from bench.twin import noise, virtual
from bench.twin import profile as profiles


def test_noise_is_seeded_per_run_shared_by_trials_and_can_be_off() -> None:
    p = profiles.load("published")
    assert (p.noise_run, p.noise_trial) == (0.007, 0.007)
    f = noise.cell_factor(p, 7, 0, 8192, 64)
    assert f == noise.cell_factor(p, 7, 0, 8192, 64)  # seeded
    assert f != noise.cell_factor(p, 8, 0, 8192, 64)  # another run
    assert f != noise.cell_factor(p, 7, 1, 8192, 64)  # another trial
    assert noise.cell_factor(noise.without_noise(p), 7, 1, 8192, 64) == 1.0
    # Trials of one run share the run's part: they spread less than runs do.
    logs = [
        [math.log(noise.cell_factor(p, run, t, 8192, 64)) for t in range(3)] for run in range(400)
    ]
    within = statistics.fmean(statistics.variance(x) for x in logs)
    total = statistics.variance([x[0] for x in logs])
    assert within == pytest.approx(0.007**2, rel=0.2)
    assert total == pytest.approx(0.007**2 * 2, rel=0.2)  # about 1 % of each figure


def test_virtual_cells_scale_with_their_factor() -> None:
    p = profiles.load("published")
    _, [base] = virtual.run_row(p, 8192, [16])
    _, [noisy] = virtual.run_row(p, 8192, [16], run_seed=3, trial=1)
    f = noise.cell_factor(p, 3, 1, 8192, 16)
    assert f != 1.0
    assert noisy.figures.tbt_s == pytest.approx(base.figures.tbt_s * f, rel=0.003)
    assert noisy.figures.total_tok_s == pytest.approx(base.figures.total_tok_s / f, rel=0.01)
    quiet = noise.without_noise(p)
    _, [same] = virtual.run_row(quiet, 8192, [16], run_seed=3, trial=1)
    assert same.figures.tbt_s == pytest.approx(base.figures.tbt_s, rel=1e-9)


def test_live_twin_run_noise_scales_step_costs_per_cell_and_seed() -> None:
    p = profiles.load("published")
    live = noise.for_live_run(p, 5)
    f = noise.cell_factor(p, 5, 0, 8192, 64)
    assert live.decode_step_seconds(64, 8192) == pytest.approx(p.decode_step_seconds(64, 8192) * f)
    assert live.decode_step_seconds(64, 8192) != noise.for_live_run(p, 6).decode_step_seconds(
        64, 8192
    )
    g = noise.cell_factor(p, 5, 0, 8192, 0)
    assert live.prefill_seconds_per_token(8192) == pytest.approx(
        p.prefill_seconds_per_token(8192) * g
    )
    quiet = noise.for_live_run(noise.without_noise(p), 5)
    assert quiet.decode_step_seconds(64, 8192) == p.decode_step_seconds(64, 8192)


def test_twin_serve_takes_run_noise() -> None:
    import argparse

    from bench.twin import command as twin_cli

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    twin_cli.register(sub)
    args = parser.parse_args(["twin", "serve", "--run-noise", "--seed", "3"])
    assert args.run_noise and args.seed == 3


def test_the_shared_factor_moves_every_cell_of_a_run_together_with_heavy_tails() -> None:
    p = profiles.load("published").model_copy(
        update={"noise_run": 0.0, "noise_trial": 0.0, "noise_shared": 0.2, "noise_shared_df": 5.0}
    )
    # One factor per run, the same in every cell of it.
    assert noise.cell_factor(p, 3, 0, 8192, 1) == noise.cell_factor(p, 3, 0, 65536, 64)
    logs = [math.log(noise.cell_factor(p, run, 0, 8192, 1)) for run in range(4000)]
    # A Student t with 5 df scaled by 0.2: sd 0.2 x sqrt(5/3), excess kurtosis 6 / (5 - 4).
    sd = statistics.pstdev(logs)
    assert sd == pytest.approx(0.2 * math.sqrt(5 / 3), rel=0.1)
    m = statistics.fmean(logs)
    kurtosis = statistics.fmean((x - m) ** 4 for x in logs) / sd**4 - 3.0
    assert kurtosis > 2.0  # a normal's is 0
    assert noise.cell_factor(noise.without_noise(p), 3, 0, 8192, 1) == 1.0


def test_a_noise_fit_replaces_only_the_noise() -> None:
    p = profiles.load("published")
    assert "vllm-cpu" in noise.fit_names()
    for name in noise.fit_names():
        fitted = noise.with_fit(p, name)
        assert fitted.noise_shared > 0 and fitted.noise_run != p.noise_run
        assert fitted.decode_step_s == p.decode_step_s
        assert noise.cell_factor(fitted, 1, 0, 8192, 1) != noise.cell_factor(p, 1, 0, 8192, 1)
