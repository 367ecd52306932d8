"""`make verdict-power` runs and prints its tables (a few comparisons only here)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import verdict_power as power

pytestmark = pytest.mark.timeout(300)


def test_verdict_power_prints_false_alarms_power_mde_and_server_time(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    small = ["--corpus-splits", "3", "--corpus-alarm-splits", "4", "--sequential-draws", "2"]
    args = ["--comparisons", "3", "--mde-samples", "1", "--fitted-comparisons", "2", *small]
    args += ["--fits-dir", str(tmp_path)]  # the fit is written there, not into the source tree
    assert power.main(args) == 0
    out = capsys.readouterr().out
    # The corpus: k = 2..6 with intervals over runs, the sequential design on its runs; the
    # twin with the corpus's noise and with the published quiet-GPU figures.
    assert "| 6 | " in out and "(runs " in out and "independent " in out
    assert out.count("| sequential (2+1, 2+2, 3+3, 5+5) | ") == 2
    assert "with the noise fit vllm-cpu" in out
    assert "with the noise fit quiet-gpu (https://github.com/vllm-project/vllm/issues/53436" in out
    assert "| fixed, 3 trials a side | " in out and "| sequential (" in out
    assert "% of fixed" in out and "server starts" in out
    assert "| Total tok/s | none: no noise estimate (raw Δ only) |" in out
    assert "| Prefill TTFT |" in out
