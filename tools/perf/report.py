"""The printed tables of `make perf` (the same figures as perf.json)."""

from __future__ import annotations

from typing import Any


def _k(x: float | None) -> str:
    return "—" if x is None else f"{x / 1000:,.1f} k"


def _share(x: float | None) -> str:
    return "—" if x is None else f"{x:.0%}"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{x * 100:+.3f} %"


def capacity_table(rows: list[dict[str, Any]]) -> str:
    out = [
        "Client capacity (medians over passes; tokens/chunks per client CPU-second)",
        "",
        "| regime | client | tok/CPU-s | chunks/CPU-s | tok/s | client core | server core"
        " | counted/sent | limit | ours ÷ vLLM |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for row in rows:
        for c in ("bench", "vllm"):
            f = row.get(c)
            if f is None:
                continue
            ratio = ""
            if c == "bench" and "ratio_tokens_per_cpu_s" in row:
                ratio = f"{row['ratio_tokens_per_cpu_s']:.2f}×"
            limits = f["limits"]
            limit = max(set(limits), key=limits.count)
            out.append(
                f"| {row['regime']} | {'ours' if c == 'bench' else 'vllm bench serve'} "
                f"| {_k(f['tokens_per_cpu_s'])} | {_k(f['chunks_per_cpu_s'])} "
                f"| {_k(f['tokens_per_s'])} | {_share(f['client_core_share'])} "
                f"| {_share(f['server_core_share'])} | {f['min_counted_over_sent']:.4f} "
                f"| {limit} | {ratio} |"
            )
    out.append("")
    out.append(
        "limit: pacing = the server's pace was met; server / client = that process used"
        " ≥ 85 % of its core; machine = neither did (other load on the host)."
    )
    return "\n".join(out)


def fidelity_table(rows: list[dict[str, Any]]) -> str:
    out = [
        "Timing fidelity against the twin's ground truth (median over requests; error ="
        " client ÷ truth − 1, median over passes)",
        "",
        "| streams | client | TTFT truth | TTFT error | TBT truth | TBT error |",
        "|---:|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        for c in ("bench", "vllm"):
            f = row.get(c)
            if f is None:
                continue
            out.append(
                f"| {row['streams']} | {'ours' if c == 'bench' else 'vllm bench serve'} "
                f"| {f['truth_ttft_s'] * 1000:.2f} ms "
                f"| {_pct(f['ttft_error'])} ({f['ttft_error_s'] * 1000:+.2f} ms) "
                f"| {f['truth_tbt_s'] * 1000:.3f} ms "
                f"| {_pct(f['tbt_error'])} ({f['tbt_error_s'] * 1e6:+.1f} µs) |"
            )
    return "\n".join(out)


def sweep_table(s: dict[str, Any]) -> str:
    args = " ".join(s.get("run_args") or []) or "the card's parameters"
    out = [
        f"Sweep efficiency: profile {s['profile']} at speed {s['speed']:g} ({args}), "
        f"{s['cells']} cells, {s['prefills']} prefills",
        "",
        "| part | seconds | share of wall |",
        "|---|---:|---:|",
    ]
    wall = s["wall_s"]
    for name, sec in s["breakdown_s"].items():
        out.append(f"| {name} | {sec:.2f} | {sec / wall:.1%} |")
    out.append(f"| **wall** | {wall:.2f} | 100 % |")
    out.append("")
    out.append(
        f"wall ÷ (measurement windows + cold prefills + readiness holds) = "
        f"**{s['efficiency']:.3f}** (target ≤ 1.10)"
    )
    if s.get("floor_with_this_server") is not None:
        out.append(
            f"with the server's first tokens counted as needed: "
            f"**{s['efficiency_with_first_tokens']:.3f}**; the server's first tokens alone put "
            f"the floor at {s['floor_with_this_server']:.3f}; the sweep's own overhead is "
            f"{s['sweep_overhead_s']:.2f} s ({s['sweep_overhead_s'] / s['needed_s']:.1%} of "
            "what is needed)"
        )
    return "\n".join(out)
