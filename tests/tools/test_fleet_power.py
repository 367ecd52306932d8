"""`make fleet-power` at a small size: the harness runs the product's rule on simulated twin
fleets and its table says what the rule does (no false alarm in a few fleets of equals, the
node 10 % slower everywhere always named)."""

from __future__ import annotations

import pytest

from tools import fleet_power


def test_fleet_power_small(capsys: pytest.CaptureFixture[str]) -> None:
    args = ["--fleets", "20", "--nodes", "4", "--slow", "10", "--slow-from-64", "10"]
    assert fleet_power.main(args) == 0
    out = capsys.readouterr().out
    rows = {line.split(" | ")[1]: line for line in out.splitlines() if line.startswith("| 4 |")}
    assert set(rows) == {
        "all equal",
        "one 10 % slower everywhere",
        "one 10 % slower at ≥ 64 requests only",
    }
    assert "| 20/20 = 100.0%" in rows["one 10 % slower everywhere"]
    assert "| 20/20 = 100.0%" in rows["one 10 % slower at ≥ 64 requests only"]
    # 20 fleets of equals: at a 1 % rate, more than 2 named would be a broken rule.
    named = int(rows["all equal"].split(" | ")[3].split("/")[0])
    assert named <= 2
