"""`make verdict-power` runs and prints its tables (a few comparisons only here)."""

from __future__ import annotations

import pytest

from tools import verdict_power as power

pytestmark = pytest.mark.timeout(300)


def test_verdict_power_prints_false_alarms_power_mde_and_server_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert power.main(["--comparisons", "3", "--mde-samples", "1"]) == 0
    out = capsys.readouterr().out
    assert "| fixed, 3 trials a side | " in out and "| sequential (" in out
    assert "% of fixed" in out and "server starts" in out
    assert "| Total tok/s | none: no noise estimate (raw Δ only) |" in out
    assert "| Prefill TTFT |" in out
