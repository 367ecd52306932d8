"""One real twin run for the report and export tests: `bench run` against `bench twin serve`
(profile tiny, 10x fast), then `bench report`, both as the product's own commands.

Two decode contexts x concurrency 1, 2, 4 (the tiny profile's KV cache fits only some: the
others are over capacity), two trials, so that tables.md has every kind of row.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.procs import bench_cli
from tests.support.twinproc import start_twin

RUN_ARGS = (
    "--contexts", "512", "1K", "--prefill-only-contexts", "--concurrencies", "1", "2", "4",
    "--duration", "5", "--max-tokens", "128", "--trials", "2",
)  # fmt: skip


@pytest.fixture(scope="package")
def twin_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run directory of a finished twin run, with its report.html."""
    run = tmp_path_factory.mktemp("twin-report") / "run"
    env = {**os.environ, "BENCH_API_KEY": "k-report", "BENCH_LOG_FORMAT": "json"}
    with start_twin("tiny", speed=10.0, api_key="k-report") as twin:
        bench_cli("run", "--url", twin.url, *RUN_ARGS, "--out", str(run), env=env)
    bench_cli("report", str(run), env=env)
    return run
