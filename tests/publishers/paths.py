"""The publisher fixtures' paths (tests/data/publishers/: each folder's README says which
figures are published and where from)."""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "publishers"
MLPERF_SERVER = (
    DATA / "mlperf" / "results" / "H200-SXM-141GBx8_TRT" / "llama2-70b-99" / "Server"
    / "performance" / "run_1" / "mlperf_log_summary.txt"
)  # fmt: skip
MLPERF_SYSTEM = DATA / "mlperf" / "systems" / "H200-SXM-141GBx8_TRT.json"
