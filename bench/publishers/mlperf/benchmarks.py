"""The LLM benchmarks bench reproduces: each one's server limits (loadgen/mlperf.conf) and
what it runs; which one a summary is of.

Where they were read (MLCommons' own sources, read to learn, nothing copied):

- Real summaries: mlcommons/inference_results_v4.1 `closed/NVIDIA/results/H200-SXM-141GBx8_TRT/
  llama2-70b-99/{Server,Offline}/performance/run_1/mlperf_log_summary.txt`, and the system
  description beside them, `closed/NVIDIA/systems/H200-SXM-141GBx8_TRT.json` (fields
  `accelerator_model_name`, `accelerators_per_node`, `number_of_nodes`, `framework`,
  `system_name`, `submitter`, `division`, `status` ...). A submission keeps the summary at
  `results/<system>/<benchmark>/Server/performance/run_1/`, and the summary itself names no
  benchmark (the reference harness's SUT is "PySUT"), so the benchmark comes from `select`
  (benchmark=llama2-70b-99), else from those folders, else from a SUT name that contains it.
- Limits: mlcommons/inference `loadgen/mlperf.conf` (at b0662794362b, the v6.1 seed):
  `*.Server.target_latency_percentile = 99`, `*.Server.min_duration = 600000` (ms), and per
  benchmark `<model>.Server.ttft_latency` / `tpot_latency` in ms (BENCHMARKS below). Models
  and datasets: the READMEs under `language/<benchmark>/` and the docs index there.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.errors import CardError
from bench.publishers.mlperf.summary import _fail

# loadgen/mlperf.conf: *.Server.target_latency_percentile = 99; results.cc: confidence 0.99.
SERVER_PERCENTILE = 99.0
EARLY_STOPPING_CONFIDENCE = 0.99
MAX_QUERIES = 10**10


@dataclass(frozen=True)
class Benchmark:
    """One LLM benchmark's server limits (loadgen/mlperf.conf) and what it runs."""

    ttft_ms: float
    tpot_ms: float
    model: str
    dataset: str
    samples: int  # performance_sample_count_override in mlperf.conf
    about: str


# Server limits in ms, (TTFT, TPOT): mlcommons/inference loadgen/mlperf.conf at b0662794362b
# ("<name>.Server.ttft_latency = ...", "<name>.Server.tpot_latency = ...").
_LIMITS_MS: dict[str, tuple[float, float]] = {
    "llama2-70b": (2000, 200),
    "llama2-70b-interactive": (450, 40),
    "mixtral-8x7b": (2000, 200),
    "llama3_1-405b": (6000, 175),
    "llama3_1-405b-interactive": (4500, 80),
    "llama3_1-8b": (2000, 100),
    "llama3_1-8b-interactive": (500, 30),
    "deepseek-r1": (2000, 80),
    "deepseek-r1-interactive": (1500, 15),
    "gpt-oss-120b": (3000, 80),
    "gpt-oss-120b-interactive": (2000, 15),
}
# What each runs: the model (the README under language/<benchmark>/), the dataset as bench names it,
# its performance set's size (mlperf.conf's performance_sample_count_override) and in words
# (the docs index, the READMEs).
_RUNS: dict[str, tuple[str, str, int, str]] = {
    "llama2-70b": (
        "meta-llama/Llama-2-70b-chat-hf", "open-orca", 24576,
        "OpenOrca, GPT-4 split, max_seq_len 1024",
    ),
    "mixtral-8x7b": (
        "mistralai/Mixtral-8x7B-Instruct-v0.1", "open-orca+gsm8k+mbxp", 15000,
        "5,000 samples each of OpenOrca (GPT-4), GSM8K and MBXP",
    ),
    "llama3_1-405b": (
        "meta-llama/Llama-3.1-405B-Instruct", "mlperf-llama3.1-405b", 8313,
        "MLCommons' 8,313-sample long-context set",
    ),
    "llama3_1-8b": (
        "meta-llama/Llama-3.1-8B-Instruct", "cnn-dailymail", 13368,
        "CNN / Daily Mail summarization",
    ),
    "deepseek-r1": (
        "deepseek-ai/DeepSeek-R1", "mlperf-deepseek-r1", 4388,
        "AIME, MATH500, GPQA, MMLU-Pro and LiveCodeBench",
    ),
    "gpt-oss-120b": (
        "openai/gpt-oss-120b", "mlperf-gpt-oss-120b", 6396, "MLCommons' gpt-oss set",
    ),
}  # fmt: skip
BENCHMARKS: dict[str, Benchmark] = {
    name: Benchmark(ttft, tpot, *_RUNS[name.removesuffix("-interactive")])
    for name, (ttft, tpot) in _LIMITS_MS.items()
}
# Longest first, so "llama2-70b-interactive" is found before "llama2-70b" in a SUT name.
_BY_LENGTH = sorted(BENCHMARKS, key=len, reverse=True)


def _norm(name: str) -> str:
    return name.strip().lower().replace("llama3.1", "llama3_1")


def _base(name: str) -> str | None:
    """The mlperf.conf name of a benchmark as a submission names it (llama2-70b-99.9,
    llama3.1-405b, llama3_1-405b ...), or None."""
    base = re.sub(r"-99(?:\.9)?$", "", _norm(name))
    return base if base in BENCHMARKS else None


def _path_parts(path: Path) -> tuple[str | None, str | None]:
    """(system, benchmark) from results/<system>/<benchmark>/Server/performance/run_N/."""
    parts = path.absolute().parts
    if len(parts) >= 6 and re.fullmatch(r"run_\d+", parts[-2]) and parts[-3] == "performance":
        return parts[-6], parts[-5]
    return None, None


def _benchmark(path: Path, select: Mapping[str, str], sut: str | None) -> tuple[str, str]:
    """(the benchmark as named, its mlperf.conf name)."""
    known = ", ".join(sorted(BENCHMARKS))
    _, from_path = _path_parts(path)
    if "benchmark" in select:
        named = select["benchmark"]
        base = _base(named)
        if base is None:
            raise CardError(
                f"select benchmark={named!r}: not an LLM benchmark bench knows; "
                f"give one of: {known}"
            )
        if from_path is not None and _base(from_path) not in (None, base):
            raise _fail(
                path,
                f"select benchmark={named!r} but the file lies under "
                f"{from_path!r}; give the file of that benchmark",
            )
        return named, base
    if from_path is not None and (base := _base(from_path)) is not None:
        return from_path, base
    if sut:
        low = _norm(sut)
        for base in _BY_LENGTH:
            if re.search(rf"(?<![a-z0-9]){re.escape(base)}(?![a-z0-9])", low):
                return base, base
    raise _fail(
        path,
        f"the summary does not name its benchmark (SUT name {sut!r}); give it as "
        f"select benchmark=NAME, one of: {known}",
    )
