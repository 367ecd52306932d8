"""Peers on one server: `bench run --workload`, `vllm bench serve` and AIPerf against one twin
on identical traffic, each tool's own figures set beside the twin's truth log for that tool's
requests, and ours set beside each peer's (`make peers`).

    python -m tools.peers [--rates 2,4] [--prompts 200] [--input 256] [--output 32]
                          [--speed 1] [--seed 0]
                          [--tools ours,ours-completions,vllm-chat,vllm-completions,aiperf]
                          [--quiet-wait 600] [--work DIR]

The markdown goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench.run.workload_text import TokenLine
from tools.peers.runs import AIPERF_VENV, TOOLS, _log, run_tool, tokenizer_dir, versions, wait_quiet
from tools.peers.tables import identical_table, table, truth_table
from tools.peers.traffic import ApiName, Params, write_traffic
from tools.peers.truth import Figures, TrafficSeen, read_truth, traffic_seen, truth_figures, window
from tools.peers.twin import MODEL, fit_words, reset_prefix_cache


def measure(
    args: argparse.Namespace, rates: Sequence[float], tools: Sequence[str], work: Path, tok: Path
) -> tuple[dict[tuple[str, float], tuple[Figures, Figures]], dict[tuple[str, float], TrafficSeen]]:
    """Every tool at every rate against one twin: (each run's figures and its truth, each
    run's traffic as the truth saw it)."""
    truth_path = work / "truth.jsonl"
    rows: dict[tuple[str, float], tuple[Figures, Figures]] = {}
    seen: dict[tuple[str, float], TrafficSeen] = {}
    from bench.twin.process import start_twin

    with start_twin(MODEL, speed=args.speed,
                    extra_args=["--ground-truth-log", str(truth_path)]) as twin:  # fmt: skip
        lines: dict[ApiName, TokenLine] = {
            api: fit_words(twin.url, api) for api in ("chat", "completions")
        }
        for rate in rates:
            p = Params(rate, args.prompts, args.input, args.output, args.speed, args.seed)
            traffic = write_traffic(p, work / f"traffic-{rate:g}", lines)
            for tool in tools:
                here = work / f"{tool}-{rate:g}"
                here.mkdir(parents=True, exist_ok=True)
                _log(f"{tool} at {rate:g} req/s ...")
                reset_prefix_cache(twin.url)
                t0 = time.time()
                got = run_tool(tool, twin.url, p, traffic, work=here, tok=tok)
                time.sleep(1.0)  # the twin writes a line as its request ends
                mine = [x for x in window(read_truth(truth_path), t0, time.time())
                        if int(x["output_tokens"]) == args.output]  # fmt: skip
                truth = truth_figures(mine)
                rows[(tool, rate)] = (got, truth)
                try:
                    seen[(tool, rate)] = traffic_seen(mine, traffic.at_s, args.speed)
                except ValueError as exc:
                    _log(f"{tool} at {rate:g}: traffic not checked: {exc}")
                _log(f"{tool} at {rate:g}: {got} / truth {truth}")
    return rows, seen


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.peers", description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="2,4", help="requests per server second (default 2,4)")
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--input", type=int, default=256)
    ap.add_argument("--output", type=int, default=32)
    ap.add_argument("--speed", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument("--quiet-wait", type=float, default=600.0, help="seconds to wait for quiet")
    ap.add_argument("--work", type=Path, default=None, help="keep every file here")
    args = ap.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    tools = [t for t in args.tools.split(",") if t]
    unknown = set(tools) - set(TOOLS)
    if unknown:
        ap.error(f"unknown tools: {', '.join(sorted(unknown))}")
    if "aiperf" in tools and not (AIPERF_VENV / "bin" / "aiperf").exists():
        _log(f"no AIPerf in {AIPERF_VENV}: measuring without it")
        tools.remove("aiperf")
    work = args.work or Path(tempfile.mkdtemp(prefix="peers-"))
    work.mkdir(parents=True, exist_ok=True)
    tok = tokenizer_dir()
    waited, busy = wait_quiet(args.quiet_wait)
    started = time.monotonic()
    rows, seen = measure(args, rates, tools, work, tok)
    run_s = time.monotonic() - started
    v = versions()
    quiet = (
        "the machine was quiet"
        if not busy
        else f"measured while {', '.join(busy)} still ran (waited {waited:.0f} s)"
    )
    print(f"# Peers on one twin: ours, vLLM's and AIPerf's figures against the truth log\n\n"
          f"`python -m tools.peers {' '.join(argv if argv is not None else sys.argv[1:])}`"
          f" (`make peers`): {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
          f"{run_s / 60:.1f} minutes of runs; {quiet}.\n\n"
          f"Twin profile `{MODEL}` at speed {args.speed:g} (figures in server time); at "
          f"{', '.join(f'{r:g}' for r in rates)} requests/s every tool sent the same "
          f"{args.prompts} prompts on the same schedule: `vllm bench serve`'s Poisson draw "
          f"for seed {args.seed} (rescaled to end at N / R), ours as a trace, AIPerf as a "
          f"fixed schedule; prompts of {args.input} tokens (ours, fitted to the twin's "
          f"/tokenize per endpoint), output {args.output}, ignore_eos; the prefix cache reset "
          f"before each run. Versions: bench {v['bench']}, vllm {v['vllm']}, "
          f"aiperf {v['aiperf']}; tokenizer for the peers: {tok.name}.\n\n"
          f"## Each tool against the truth for its own requests\n\n{table(rows)}\n\n"
          f"## Ours against each peer on identical traffic\n\n{identical_table(rows)}\n\n"
          f"## The requests as the twin counted them\n\n{truth_table(rows, seen)}\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
