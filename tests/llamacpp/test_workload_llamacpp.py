"""The same open-loop rate sweep against llama.cpp's server (its session's one start): the
engine is detected, every request of every point completes, and the tokens come from
llama.cpp's own per-chunk count (`timings.predicted_n`; it sends usage only at a stream's
end), so TTFT and TPOT are read from real per-token times."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.results import Results
from tests.llamacpp.server import LlamaServer
from tests.run.test_run_twin import bench, finish
from tests.support.workloads import rate_toml

pytestmark = [pytest.mark.llamacpp, pytest.mark.integration]

SWEEP = rate_toml("llamacpp-sweep", (1, 2, 4), 20, (64, 128), seed=5, range_ratio=0.5)


def test_a_rate_sweep_measures_every_point_of_llama_cpp(
    llama_server: LlamaServer, tmp_path: Path
) -> None:
    workload = tmp_path / "sweep.toml"
    workload.write_text(SWEEP)
    out = tmp_path / "run"
    rc, stdout, stderr = finish(
        bench("--url", llama_server.url, "--workload", str(workload), "--out", str(out)),
        timeout_s=600,
    )
    assert rc == 0, stderr[-3000:]
    results = Results.model_validate_json((out / "results.json").read_bytes())
    assert results.server.engine == "llamacpp" and results.workload is not None
    points = results.workload.points
    assert [p.offered_rate for p in points] == [1.0, 2.0, 4.0]
    for p in points:
        assert p.completed == p.requests == 20 and not p.failures_by_kind, p
        assert p.output_tokens >= 20 * 64 and p.ttft is not None
        assert p.tpot is not None and p.tpot.p50 > 0, p.notes  # per-chunk counts: timed
    assert "## Workload llamacpp-sweep" in stdout
    assert len((out / "schedule.jsonl").read_text().splitlines()) == 60
