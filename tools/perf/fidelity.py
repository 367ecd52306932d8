"""Timing fidelity: a client's median TTFT and time between tokens against the twin's truth.

The twin (`paced` profile: one token every 10 ms per stream) logs, per request, when it
arrived and when each chunk was written (--ground-truth-log). The truth of a request is
TTFT = first chunk − arrival and TBT = (last chunk − first chunk) ÷ (tokens − 1); the
truth of a run is the median over its requests, and a client's error is its own median ÷
the truth − 1. Each client gets a fresh twin and log, pinned like the capacity runs.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tools.perf import procs
from tools.perf.client_capacity import Regime, VllmBench

PROFILE = "paced"
MODEL = "qwen"  # the `paced` profile's served model name


def truth(log: Path) -> tuple[float, float, int]:
    """(median TTFT, median TBT, requests) of the finished requests in a ground-truth log."""
    ttft, tbt = [], []
    for line in log.read_text().splitlines():
        rec = json.loads(line)
        chunks = rec["chunks"]
        if rec["outcome"] != "finished" or not chunks:
            continue
        ttft.append(chunks[0][0] - rec["arrival"])
        n = sum(c[1] for c in chunks)
        if n >= 2:
            tbt.append((chunks[-1][0] - chunks[0][0]) / (n - 1))
    return statistics.median(ttft), statistics.median(tbt), len(ttft)


def _vllm_medians(res: dict[str, Any]) -> tuple[float, float]:
    ttfts: list[float] = res["ttfts"]
    tbt = [
        (lat - t) / (n - 1)
        for lat, t, n in zip(res["latencies"], ttfts, res["output_lens"], strict=True)
        if n >= 2
    ]
    return statistics.median(ttfts), statistics.median(tbt)


def _one(
    client: str,
    regime: Regime,
    *,
    server_cpu: int | None,
    client_cpu: int | None,
    vllm: VllmBench | None,
    tmp: Path,
) -> dict[str, Any]:
    log = tmp / f"truth-{client}.jsonl"
    log.unlink(missing_ok=True)
    argv = [procs.python(), "-m", "bench", "twin", "serve", "--profile", PROFILE, "--port", "0"]
    argv += ["--ground-truth-log", str(log)]
    with procs.serving(argv, server_cpu) as (url, _):
        if client == "bench":
            out = tmp / "loadgen.json"
            cmd = [procs.python(), "-m", "tools.perf.loadgen", "--url", url, "--model", MODEL]
            cmd += ["--streams", str(regime.streams), "--max-tokens", str(regime.max_tokens)]
            cmd += ["--out", str(out)]
            subprocess.run(cmd, check=True, preexec_fn=procs.pin(client_cpu))
            got = json.loads(out.read_text())
            ttft, tbt = got["median_ttft_s"], got["median_tbt_s"]
        else:
            assert vllm is not None
            vllm.start(url, regime, str(tmp), model=MODEL)
            ttft, tbt = _vllm_medians(vllm.result())
    true_ttft, true_tbt, n = truth(log)
    return {
        "requests": n,
        "truth_ttft_s": true_ttft,
        "truth_tbt_s": true_tbt,
        "ttft_s": ttft,
        "tbt_s": tbt,
        "ttft_error": ttft / true_ttft - 1.0,
        "ttft_error_s": ttft - true_ttft,
        "tbt_error_s": tbt - true_tbt,
        "tbt_error": tbt / true_tbt - 1.0,
    }


def run(
    quick: bool,
    passes: int,
    server_cpu: int | None,
    client_cpu: int | None,
    vllm: VllmBench | None,
) -> list[dict[str, Any]]:
    regimes = (
        [Regime("8 streams", 8, 10.0, 1, 50)]
        if quick
        else [Regime("128 streams", 128, 10.0, 1, 512), Regime("1024 streams", 1024, 10.0, 1, 256)]
    )
    rows = []
    with tempfile.TemporaryDirectory(prefix="perf-fidelity-") as d:
        tmp = Path(d)
        for r in regimes:
            row: dict[str, Any] = {"streams": r.streams, "max_tokens": r.max_tokens}
            clients = ["bench", "vllm"] if vllm is not None else ["bench"]
            per: dict[str, list[dict[str, Any]]] = {c: [] for c in clients}
            for n in range(passes):
                for c in clients if n % 2 == 0 else reversed(clients):
                    per[c].append(
                        _one(c, r, server_cpu=server_cpu, client_cpu=client_cpu, vllm=vllm, tmp=tmp)
                    )
                print(f"perf: fidelity pass {n + 1} {r.name}: " + _brief(per), flush=True)
            for c, figs in per.items():
                med = {k: statistics.median(f[k] for f in figs) for k in figs[0]}
                med["passes"] = figs
                row[c] = med
            rows.append(row)
    return rows


def _brief(per: dict[str, list[dict[str, Any]]]) -> str:
    return ", ".join(
        f"{c} TTFT {f[-1]['ttft_error']:+.2%} TBT {f[-1]['tbt_error']:+.3%}" for c, f in per.items()
    )
