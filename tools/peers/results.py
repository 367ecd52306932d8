"""The tools' result files: each tool's own four figures as it wrote them, and a client's
figures in server time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tools.peers.truth import Figures


def parse_vllm(result: Mapping[str, Any]) -> Figures:
    """`vllm bench serve --save-result`'s JSON: request_throughput, output_throughput (per
    second of its duration), median_ttft_ms, median_tpot_ms, completed."""
    return Figures(
        req_s=float(result["request_throughput"]),
        out_tok_s=float(result["output_throughput"]),
        ttft_p50_ms=float(result["median_ttft_ms"]),
        tpot_p50_ms=float(result["median_tpot_ms"]),
        n=int(result["completed"]),
    )


def parse_aiperf(result: Mapping[str, Any]) -> Figures:
    """AIPerf's profile_export_aiperf.json: request_throughput.avg, output_token_throughput.avg,
    time_to_first_token.p50 and inter_token_latency.p50 (its per-request (e2e - TTFT) / (out -
    1), vLLM's TPOT), in ms; completed_request_count.avg."""
    return Figures(
        req_s=float(result["request_throughput"]["avg"]),
        out_tok_s=float(result["output_token_throughput"]["avg"]),
        ttft_p50_ms=float(result["time_to_first_token"]["p50"]),
        tpot_p50_ms=float(result["inter_token_latency"]["p50"]),
        n=int(result["completed_request_count"]["avg"]),
    )


def parse_ours(results: Mapping[str, Any]) -> Figures:
    """`bench run --workload`'s results.json, its one point: achieved_rate, output_tok_s,
    ttft.p50 and tpot.p50 (seconds), completed; figures in server time (speed divided out)."""
    (point,) = results["workload"]["points"]
    return Figures(
        req_s=float(point["achieved_rate"]),
        out_tok_s=float(point["output_tok_s"]),
        ttft_p50_ms=float(point["ttft"]["p50"]) * 1e3,
        tpot_p50_ms=float(point["tpot"]["p50"]) * 1e3,
        n=int(point["completed"]),
    )


def to_server_time(f: Figures, speed: float) -> Figures:
    """A client's figures against a twin at `speed` in server time: rates / speed, times x
    speed."""
    return Figures(f.req_s / speed, f.out_tok_s / speed, f.ttft_p50_ms * speed,
                   f.tpot_p50_ms * speed, f.n, f.prompt)  # fmt: skip
