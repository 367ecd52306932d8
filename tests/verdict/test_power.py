"""`make verdict-power` runs and prints its tables (a few comparisons only here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.twin import profile as profiles
from tools import corpus_power
from tools import verdict_power as power

pytestmark = pytest.mark.timeout(300)


def test_verdict_power_prints_false_alarms_power_mde_and_server_time(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    small = ["--corpus-splits", "3", "--corpus-alarm-splits", "4", "--sequential-draws", "2"]
    args = ["--comparisons", "3", "--mde-samples", "1", "--fitted-comparisons", "2", *small]
    args += ["--fitted-alarm-comparisons", "3"]
    args += ["--fits-dir", str(tmp_path)]  # the fit is written there, not into the source tree
    assert power.main(args) == 0
    out = capsys.readouterr().out
    # The corpus: k = 2..6 with intervals over runs, the sequential design on its runs; the
    # twin with the corpus's noise and with the published quiet-GPU figures.
    assert "| 6 | " in out and "(runs " in out and "independent " in out
    corpora = corpus_power.engines(corpus_power.CORPUS)
    assert sorted(d.name for d in corpora) == ["llamacpp", "vllm-cpu"]
    # One row for each engine's corpus, one for the twin.
    assert out.count("| sequential (2+1, 2+2, 3+3, 5+5) | ") == len(corpora) + 1
    assert "chosen for a server start of 600 s" in out  # the twin: stages planned
    assert "with the noise fit vllm-cpu" in out
    assert "with the noise fit quiet-gpu (https://github.com/vllm-project/vllm/issues/53436" in out
    assert "| fixed, 3 trials a side | " in out and "| sequential (" in out
    assert "% of fixed" in out and "server starts" in out
    assert "| Total tok/s | none: no noise estimate (raw Δ only) |" in out
    assert "| Prefill TTFT |" in out


def test_twin_only_runs_every_noise_fit_then_the_default_twin(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--twin-only", "--comparisons", "2", "--mde-samples", "1"]
    args += ["--fitted-comparisons", "2", "--fitted-alarm-comparisons", "5"]
    assert power.main(args) == 0
    out = capsys.readouterr().out
    assert "## Corpus" not in out  # no corpus: the twin only
    assert out.index("with the noise fit quiet-gpu") < out.index("twin profile published")
    assert "with the noise fit vllm-cpu" in out
    assert "false alarms on 5 A/A comparisons a k, power on the first 2" in out
    # false alarms over 5 comparisons a k, power over the first 2
    assert "| 6 | " in out and out.count("/5 = ") == 2 * 5
    assert "| fixed, 3 trials a side | " in out


def test_fitted_table_counts_false_alarms_on_more_comparisons_than_power(
    published: tuple[profiles.Profile, power.Base],
) -> None:
    profile, base = published
    (_, _, row) = power.fitted_table(profile, base, 2, range(3, 4), alarms=4)
    cols = [c.strip() for c in row.strip("|").split("|")]
    assert cols[0] == "3" and cols[1].split(" = ")[0].endswith("/4")
    assert cols[2].split(" = ")[0].endswith("/2") and cols[3].split(" = ")[0].endswith("/2")
