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


def _ms(x: float | None) -> str:
    return "—" if x is None else f"{x * 1000:.3f} ms"


def _met(met: bool | None) -> str:
    return {True: "**met**", False: "**not met**", None: "not measured"}[met]


def openloop_table(o: dict[str, Any]) -> str:
    """The open-loop part: per offered rate, both clients; the targets; the definitions."""
    s = o["settings"]
    out = [
        f"Open loop against the perf streamer (Poisson arrivals; input {s['input_tokens']}, "
        f"output {s['output_tokens']} tokens; paced {s['streamer_interval_ms']:g} ms, "
        f"{s['streamer_tokens_per_chunk']} token a chunk; medians over {s['passes']} "
        "pass(es), the two clients one after the other in each)",
        "",
        "| offered req/s | requests | client | achieved req/s | output tokens | tok/s "
        "| tok/CPU-s | client core | lateness p50 | lateness p99 (worst pass) | errors "
        "| ours ÷ vLLM |",
        "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in o["rows"]:
        for c in ("bench", "vllm"):
            f = row.get(c)
            if f is None:
                continue
            ratio = ""
            if c == "bench" and row.get("ratio_tokens_per_cpu_s") is not None:
                ratio = f"{row['ratio_tokens_per_cpu_s']:.2f}×"
            if c == "bench":
                p99 = f"{_ms(f['lateness_p99_s'])} ({_ms(f['lateness_p99_worst_s'])})"
                p50 = _ms(f["lateness_p50_s"])
            else:
                p50 = p99 = "—"
            achieved = "—" if f["achieved_rate"] is None else f"{f['achieved_rate']:.2f}"
            tokens = "—" if f["output_tokens"] is None else f"{f['output_tokens']:,.0f}"
            out.append(
                f"| {row['offered_rate']:g} | {row['requests']:,} "
                f"| {'ours' if c == 'bench' else 'vllm bench serve'} | {achieved} | {tokens} "
                f"| {_k(f['tokens_per_s'])} | {_k(f['tokens_per_cpu_s'])} "
                f"| {_share(f['client_core_share'])} | {p50} | {p99} | {f['errors']} | {ratio} |"
            )
    t = o["targets"]
    late, ratio_t = t["lateness_p99"], t["tokens_per_cpu_s_ratio"]
    lowest = "—" if ratio_t["lowest"] is None else f"{ratio_t['lowest']:.2f}×"
    out += [
        "",
        f"Target: our schedule lateness p99 ≤ {_ms(late['target_s'])} at every offered rate up "
        f"to {late['up_to_rate']:g} req/s, every pass: worst {_ms(late['worst_s'])}, "
        f"{_met(late['met'])}.",
        f"Target: tokens per client CPU-second, ours ÷ vLLM's ≥ {ratio_t['target']:g}× at every "
        f"offered rate (median over passes): lowest {lowest}, {_met(ratio_t['met'])}.",
        "",
        "Definitions:",
        "",
    ]
    out += [f"- {name}: {text}" for name, text in o["definitions"].items()]
    return "\n".join(out)


def _us(x: float | None) -> str:
    return "—" if x is None else f"{x * 1e6:.3f} µs"


def _x(x: float | None) -> str:
    return "—" if x is None else f"{x:.4f}"


def live_table(o: dict[str, Any]) -> str:
    """Live export's cost: client CPU per token with --otel-url and --metrics-port off and on."""
    p, load = o["plan"], o["load_average"]
    out = [
        f"Live export's cost at {p['streams']} paced {p['interval_ms']:g} ms streams "
        f"({p['requests']} requests of {p['max_tokens']} tokens back to back per stream; "
        f"--otel-interval {o['otel_interval_s']:g} s, /metrics scraped from its first answer "
        f"every {o['scrape_s']:g} s; "
        f"{p['passes']} pass(es), off and on at the same time in each, started in the order "
        f"{' '.join(o['order'])})",
        "",
        "| live export | client CPU per token | tok/CPU-s | tok/s | client core | counted/sent "
        "| OTLP exports received | scrapes answered | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for side, name in (("off", "off"), ("on", "on (--otel-url, --metrics-port)")):
        f = o[side]
        counted = f["min_counted_over_sent"]
        exports = str(f["otlp_exports"]) if side == "on" else "—"
        scrapes = "—"
        if side == "on":
            failed = f.get("scrapes_failed", 0)
            scrapes = str(f["scrapes_ok"]) + (f" ({failed} failed)" if failed else "")
        out.append(
            f"| {name} | {_us(f['cpu_s_per_token'])} | {_k(f['tokens_per_cpu_s'])} "
            f"| {_k(f['tokens_per_s'])} | {_share(f['client_core_share'])} "
            f"| {'—' if counted is None else f'{counted:.4f}'} | {exports} | {scrapes} "
            f"| {f['errors']} |"
        )
    ratios = ", ".join(f"{r:.4f}" for r in o["ratios"]) or "—"
    out += [
        "",
        f"On ÷ off, client CPU-seconds per token: median over passes {_x(o['ratio_median'])} "
        f"(passes: {ratios}; lowest {_x(o['ratio_min'])}, highest {_x(o['ratio_max'])}); "
        f"ratio of the medians {_x(o['ratio_of_medians'])}.",
        f"Target: on ÷ off ≤ {o['target_ratio']:g} (median over passes): {_met(o['met'])}.",
        f"Load average (1, 5, 15 min): {load['start']} at the start, {load['end']} at the end.",
        "",
        "Definitions:",
        "",
    ]
    out += [f"- {name}: {text}" for name, text in o["definitions"].items()]
    return "\n".join(out)
