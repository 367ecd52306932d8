"""The live-export part of `make perf` (`make perf-live`): the pairing, ratios, target and
table on figures written by hand; then one tiny real pass (integration): two load
generators at once, one with --otel-url and --metrics-port, each against its perf streamer,
the OTLP receiver and the scrapes in the harness. What is asserted of the real pass is that
every figure was measured, not how fast anything was."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tools.perf import live_cost, report


def _pass(n: int, live: bool, cpu_us: float) -> dict[str, Any]:
    got: dict[str, Any] = {
        "pass": n,
        "live": live,
        "window_s": 18.0,
        "tokens_per_s": 12_800.0,
        "tokens_per_cpu_s": 1e6 / cpu_us,
        "cpu_s_per_token": cpu_us / 1e6,
        "client_core_share": 0.18,
        "server_core_share": 0.13,
        "tokens_sent": 262_144,
        "tokens_counted": 262_144,
        "requests": 512,
        "errors": 0,
    }
    if live:
        got.update(otlp_exports=5, otlp_bytes=20_000, scrapes_ok=4, scrapes_failed=0,
                   scrapes_not_listening=1)  # fmt: skip
    return got


def test_each_passs_on_client_is_divided_by_its_off_client() -> None:
    # In the order they started: off first in passes 1 and 3, on first in pass 2.
    passes = [_pass(1, False, 14.0), _pass(1, True, 14.14), _pass(2, True, 15.6),
              _pass(2, False, 15.0), _pass(3, False, 14.5), _pass(3, True, 14.5)]  # fmt: skip
    got = live_cost.summarize(live_cost.FULL, passes, load=([1.0, 1.1, 1.2], [1.3, 1.2, 1.2]))
    assert got["order"] == ["off", "on", "on", "off", "off", "on"]
    assert got["ratios"] == pytest.approx([1.01, 1.04, 1.0])
    assert got["ratio_median"] == pytest.approx(1.01)
    assert (got["ratio_min"], got["ratio_max"]) == pytest.approx((1.0, 1.04))
    assert got["ratio_of_medians"] == pytest.approx(14.5 / 14.5)
    assert got["met"] is True
    assert got["on"]["otlp_exports"] == 15 and got["on"]["scrapes_ok"] == 12
    assert got["off"]["min_counted_over_sent"] == 1.0
    table = report.live_table(got)
    assert "| off | 14.500 µs |" in table
    assert "median over passes 1.0100 (passes: 1.0100, 1.0400, 1.0000" in table
    assert "Target: on ÷ off ≤ 1.02 (median over passes): **met**." in table
    assert "[1.0, 1.1, 1.2] at the start" in table
    passes[2] = _pass(2, True, 15.0 * 1.05)
    passes[1] = _pass(1, True, 14.0 * 1.03)
    assert live_cost.summarize(live_cost.FULL, passes)["met"] is False


def test_a_refusal_before_the_first_answer_or_after_the_last_is_not_a_failed_scrape() -> None:
    counts = live_cost.scrape_counts
    got = counts(["refused", "refused", "ok", "ok", "refused"])
    assert got == {"scrapes_ok": 2, "scrapes_failed": 0, "scrapes_not_listening": 3}
    # Between two answers a refusal is a failure; a timeout or a bad body is one anywhere.
    got = counts(["failed", "ok", "refused", "failed", "ok", "failed", "refused"])
    assert got == {"scrapes_ok": 2, "scrapes_failed": 4, "scrapes_not_listening": 1}
    assert counts(["refused", "refused"])["scrapes_failed"] == 2  # never answered
    assert counts([]) == {"scrapes_ok": 0, "scrapes_failed": 0, "scrapes_not_listening": 0}


def test_the_plan_is_client_capacitys_128_paced_regime_with_requests_ending_in_the_window() -> None:
    p = live_cost.FULL
    assert (p.streams, p.interval_ms, p.max_tokens, p.passes) == (128, 10.0, 512, 3)
    assert p.requests >= 4  # requests end through the window, not only at its end
    paced_s = p.requests * p.max_tokens * p.interval_ms / 1000
    assert paced_s >= 4 * live_cost.OTEL_INTERVAL_S  # several exports a pass


@pytest.mark.integration
def test_one_tiny_pass_each_way_measures_and_exports(tmp_path: Path) -> None:
    out = tmp_path / "perf.json"
    argv = [sys.executable, "-m", "tools.perf", "--quick", "--no-vllm", "--parts", "live"]
    proc = subprocess.run(
        [*argv, "--out", str(out)], capture_output=True, text=True, check=False, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    got = json.loads(out.read_text())["live"]
    assert got["order"] == ["off", "on"]  # started in this order, run at the same time
    off, on = got["passes"]
    assert off["errors"] == on["errors"] == 0
    assert off["tokens_counted"] == off["tokens_sent"] and on["tokens_counted"] == on["tokens_sent"]
    assert "otlp_exports" not in off
    assert on["otlp_exports"] >= 1 and on["otlp_bytes"] > 0  # the last export at the end, at least
    assert on["scrapes_ok"] >= 1 and on["scrapes_failed"] == 0  # the first as soon as it answers
    assert got["ratio_median"] is not None and got["ratio_median"] > 0
    assert "Live export's cost" in proc.stdout
