"""A million-row InferenceX dump (bench.publishers.inferencex) is read in bounded memory: a child
process whose address space is capped at 1 GiB finds one row near the end by its id.

The cap is set by the child's first statement, before bench is imported, rather than by a
`preexec_fn` (unsafe in a test process that runs threads: tests/support/capped.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.subprocess, pytest.mark.slow]

ROWS = 1_000_000
WANTED = 999_990
CAP = 1 << 30
REPO = Path(__file__).resolve().parents[2]
# One row of benchmark_results.json as the dump writes it (about 400 bytes); figures from the
# fixture's row 101 (tests/data/publishers/inferencex/README.md), tput_per_gpu varied.
ROW = (
    '{"id":"%d","workflow_run_id":"1","config_id":1,"benchmark_type":"single_turn",'
    '"date":"2025-12-15T00:00:00.000Z","isl":1024,"osl":1024,"conc":%d,'
    '"image":"vllm/vllm-openai:v0.11.2","metrics":{"p99_ttft":0.137629676181823,'
    '"mean_ttft":0.05758172054775059,"median_tpot":0.005222397925913495,'
    '"median_ttft":0.05321004893630743,"tput_per_gpu":%d.5,'
    '"median_intvty":191.48291918507556},"error":null,"server_log_id":null}'
)
CONFIG = (
    '[\n{"id":1,"hardware":"h100","framework":"vllm","model":"gptoss120b","precision":"fp4",'
    '"spec_method":"none","disagg":false,"is_multinode":false,"prefill_tp":2,"prefill_ep":1,'
    '"prefill_dp_attention":false,"prefill_num_workers":0,"decode_tp":2,"decode_ep":1,'
    '"decode_dp_attention":false,"decode_num_workers":0,"num_prefill_gpu":2,'
    '"num_decode_gpu":2}\n]\n'
)
RUN = (
    '[\n{"id":"1","github_run_id":"20218553330","run_attempt":1,"name":"Run Sweep",'
    '"head_sha":"0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d","date":"2025-12-15T00:00:00.000Z"}\n]\n'
)
CHILD = f"""
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({CAP}, {CAP}))
from pathlib import Path
from bench.publishers import inferencex
card = inferencex.read(Path(sys.argv[1]), {{"id": sys.argv[2]}})
tput = card.figure("tput_per_gpu")
# VmHWM: this process image's own peak (ru_maxrss keeps the forking parent's across exec).
peak_kib = next(int(x.split()[1]) for x in open("/proc/self/status") if x.startswith("VmHWM:"))
print(card.point_id, card.workload.concurrency, card.gpu_count, tput and tput.value, peak_kib)
"""


def _write_dump(folder: Path) -> Path:
    """The dump streamed to disk, 10,000 rows a write."""
    path = folder / "benchmark_results.json"
    with path.open("w", encoding="utf-8") as f:
        f.write("[\n")
        for start in range(1, ROWS + 1, 10_000):
            rows = range(start, min(start + 10_000, ROWS + 1))
            text = ",\n".join(ROW % (i, 1 << (i % 8), 1000 + i % 5000) for i in rows)
            f.write(text if start == 1 else ",\n" + text)
        f.write("\n]\n")
    (folder / "configs.json").write_text(CONFIG)
    (folder / "workflow_runs.json").write_text(RUN)
    return path


@pytest.mark.timeout(300)
def test_a_million_rows_in_bounded_memory(tmp_path: Path) -> None:
    path = _write_dump(tmp_path)
    size = path.stat().st_size
    assert 350 * ROWS < size < 450 * ROWS, size
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(WANTED)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    point, conc, gpus, tput, peak_kib = done.stdout.split()
    assert (point, conc, gpus) == (str(WANTED), str(1 << (WANTED % 8)), "2")
    assert float(tput) == 1000 + WANTED % 5000 + 0.5
    # Under the 1 GiB cap, and far below the file's size: the rows are not all held.
    assert int(peak_kib) * 1024 < min(CAP, size) // 2, peak_kib
