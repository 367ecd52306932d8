"""A dataset workload run for real: `bench run --workload FILE` (the sharegpt-qps preset's
shape, fewer requests, on the shipped sample) against the twin (profile tiny, speed 10), as
the product's own processes. Every point completes; schedule.jsonl's prompts are the
dataset's texts byte for byte, in the order the seed draws them in this process too; each
request's output is its conversation's length (ignore_eos)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from bench.results import Results
from bench.workload.schedule import dataset_of, plan_point
from bench.workload_spec import load_workload
from tests.support import procs
from tests.support.twinproc import start_twin

pytestmark = pytest.mark.integration  # a real twin and a real `bench run`

REQUESTS = 12
WORKLOAD = f"""
name = "sharegpt-twin"
seed = 0

[arrivals]
kind = "rate"
rates = [8.0, inf]
process = "poisson"
requests = {REQUESTS}

[prompts]
source = "sharegpt"
path = "sharegpt-sample"

[lengths]
ignore_eos = true
"""


def test_a_sharegpt_workload_runs_on_the_twin_and_sends_the_datasets_texts(
    tmp_path: Path,
) -> None:
    spec, out = tmp_path / "sharegpt-twin.toml", tmp_path / "run"
    spec.write_text(WORKLOAD, encoding="utf-8")
    mark = procs.new_mark()
    with start_twin("tiny", speed=10.0) as twin:
        proc = procs.bench("run", "--url", twin.url, "--workload", str(spec), "--out", str(out),
                           mark=mark, env=procs.bench_env(mark))  # fmt: skip
        rc, _, stderr = procs.finish(proc, 240)
    assert rc == 0, stderr[-3000:]
    results = Results.model_validate_json((out / "results.json").read_text(encoding="utf-8"))
    assert results.state == "complete" and results.workload is not None
    points = results.workload.points
    assert [(p.index, p.requests, p.completed) for p in points] == [
        (0, REQUESTS, REQUESTS), (1, REQUESTS, REQUESTS),
    ]  # fmt: skip

    workload = load_workload(spec)
    assert results.workload.workload.prompts == workload.prompts  # its sha256 recorded
    data = dataset_of(workload)
    schedule = [json.loads(line) for line in (out / "schedule.jsonl").read_text().splitlines()]
    assert len(schedule) == 2 * REQUESTS
    for point, p in zip(points, (0, 1), strict=True):
        rows = [r for r in schedule if r["point"] == p]
        planned = plan_point(workload, p)
        assert [r["group"] for r in rows] == [q.group for q in planned]
        for row in rows:
            text = data.prompt(row["group"])
            assert row["prompt_sha256"] == hashlib.sha256(text.encode()).hexdigest()
            assert row["input_tokens"] == -(-len(text) // 4)
        assert point.output_tokens == sum(r["output_tokens"] for r in rows)  # the data's
