"""`python -m tools.gpu_check.load SECONDS`: keep every GPU busy with matmuls for SECONDS.

Run as its own process by the GPU check, so that importing torch or a stuck CUDA call
can only cost its time-out. Prints one JSON line: what ran (or why nothing did: no
torch, no GPU) and the matmul rate reached, so the telemetry beside it is read against a
known load. Without torch or a GPU it prints why and exits 0: the telemetry is then of an
idle GPU, and the check says so.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

_N = 8192  # bf16 8192^3 matmuls: ~1.1 TFLOP each, milliseconds on a data-centre GPU


def _load(seconds: float) -> dict[str, Any]:
    try:
        import torch
    except ImportError as exc:
        return {"ran": False, "why": f"torch is not importable ({exc})"}
    if not torch.cuda.is_available():
        return {"ran": False, "why": "torch sees no GPU", "torch": str(torch.__version__)}
    devices = [torch.device("cuda", i) for i in range(torch.cuda.device_count())]
    pairs = [
        (torch.randn(_N, _N, device=d, dtype=torch.bfloat16),
         torch.randn(_N, _N, device=d, dtype=torch.bfloat16))
        for d in devices
    ]  # fmt: skip
    done = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for a, b in pairs:
            a @ b
        for d in devices:
            torch.cuda.synchronize(d)
        done += 1
    spent = time.perf_counter() - start
    return {
        "ran": True,
        "torch": str(torch.__version__),
        "torch_cuda": str(torch.version.cuda),
        "gpus": len(devices),
        "seconds": round(spent, 3),
        "matmuls_per_gpu": done,
        "tflops_per_gpu": round(done * 2 * _N**3 / spent / 1e12, 1),
    }


def main(argv: list[str]) -> int:
    seconds = float(argv[0]) if argv else 30.0
    start = time.monotonic()
    found = _load(seconds)
    # Without a load the window lasts as long all the same: telemetry of the idle GPU.
    time.sleep(max(0.0, seconds - (time.monotonic() - start)))
    print(json.dumps(found), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
