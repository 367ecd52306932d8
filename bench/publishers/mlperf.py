"""An MLPerf Inference server-scenario LLM result (LoadGen's log summary) as a card, and back;
and LoadGen's early-stopping test.

Where the format was read (MLCommons' own sources, read to learn, nothing copied):

- mlcommons/inference `loadgen/results.cc` (`PerformanceSummary::LogSummary`; read at
  b66003e10e2d) writes the summary, `mlperf_log_summary.txt`: a banner "MLPerf Results
  Summary", then one `key : value` per line ("SUT name : ...", "Scenario : Server", "Mode :
  PerformanceOnly"). For the Server scenario of a benchmark with token latencies
  (`use_token_latencies`, every LLM benchmark but GPT-J) it writes "Completed samples per
  second : " and "Completed tokens per second: " with `DoubleToString` (`loadgen/utils.cc`:
  std::fixed, 2 decimals), "Result is : VALID" or "INVALID" and the constraints it judged
  ("Performance constraints satisfied", "Min duration satisfied", "Min queries satisfied",
  "Early stopping satisfied": Yes / NO), "TTFT Early Stopping Result:" and "TPOT Early
  Stopping Result:" with " * Run successful." bullets, then "Additional Stats" with the
  percentiles as integers in ns ("99.00 percentile first token latency (ns) : ", "99.00
  percentile time to output token (ns) : "; the percentile printed with `DoubleToString`, so
  "99.00"), and last "Test Parameters Used" from `loadgen/test_settings_internal.cc`
  (`LogSummary`): "target_qps : ", "ttft_latency (ns): ", "tpot_latency (ns): ",
  "min_duration (ms): ", the seeds, "performance_sample_count : ". Other scenarios write
  other lines: Offline "Samples per second: " / "Tokens per second: ", SingleStream /
  MultiStream "90th percentile latency (ns) : ". Versions differ in labels outside the
  figures (v4.1 and v5.0 print "Min Time to Output Token (ns)", today's LoadGen "Min Time
  per Output Token (ns)") and print "Completed tokens per second" twice, at the top and in
  the stats; `read` takes the first and refuses two that differ.
- The same files' per-sample definitions: TTFT is the time to the SUT's FirstTokenComplete;
  TPOT (`loadgen/logging.cc`) is (latency - TTFT) / (output tokens - 1) per sample, in
  integer ns; a percentile is LoadGen's nearest rank, sorted[floor(samples x 0.99)]; tokens a
  second are all samples' output tokens (as the SUT reported them) over the time to the last
  sample's completion; samples a second are (samples - 1) over that time.
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

What maps to what. Keys are taken with LoadGen's padding blanks collapsed to one ("Completed
samples per second    : 100.35" is "Completed samples per second"). The four published
figures keep those names and their units: "Completed tokens per second" (tok/s,
computed_as mlperf_tokens_per_s), "Completed samples per second" (req/s, request_rate), and
the p99 TTFT and TPOT in ns, exactly as printed: unit "ns", computed_as
mlperf_ttft_p99_ns / mlperf_tpot_p99_ns (LoadGen's percentile of the whole-ns values), so a
reproduction compares the published latencies too, not only the pass of the limits; a card
keeps the publisher's units (so `export` gives back the very digits; the constraints carry
the limits in ms). The p99 TTFT and TPOT limits become `PublishedConstraint`s at percentile 99 and
confidence 0.99, from the summary's own "ttft_latency (ns)" / "tpot_latency (ns)" lines, else
from BENCHMARKS. target_qps is the workload's request rate (arrivals "server": LoadGen's
Poisson schedule), "min_duration (ms)" its min_duration_s. Every other line of the summary,
and the system description's fields, are kept in `extra` as text.

Round trip: a figure's text must be written as LoadGen writes it (2 decimals for the rates, an
integer for the ns; no leading zeros), which `read` checks, so `export(read(x))[name]` is the
summary's text for each figure.

Judging a run of ours against the constraints by LoadGen's early-stopping rule is
`bench.workload.slo`'s (its tests hold it to LoadGen's published counts).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from bench.errors import CardError
from bench.publishers.model import (
    ComputedAs,
    PublishedConstraint,
    PublishedEngine,
    PublishedFigure,
    PublishedWorkload,
    PublisherCard,
)
from bench.publishers.source import read_json, read_text

WHAT = "an MLPerf Inference log summary"
SYSTEM_WHAT = "an MLPerf system description"
MAX_SUMMARY_BYTES = 1 << 20  # LoadGen's summaries are ~3 KiB
MAX_EXTRA_LINES = 200
MAX_EXTRA_VALUE = 500
SELECT_KEYS = ("benchmark", "scenario")

# loadgen/mlperf.conf: *.Server.target_latency_percentile = 99; results.cc: confidence 0.99.
SERVER_PERCENTILE = 99.0
EARLY_STOPPING_CONFIDENCE = 0.99
MAX_QUERIES = 10**10

TOKENS_PER_S = "Completed tokens per second"
SAMPLES_PER_S = "Completed samples per second"
TTFT_P99 = "99.00 percentile first token latency (ns)"
TPOT_P99 = "99.00 percentile time to output token (ns)"
TTFT_LIMIT = "ttft_latency (ns)"
TPOT_LIMIT = "tpot_latency (ns)"
_RATE_TEXT = re.compile(r"(?:0|[1-9][0-9]{0,12})\.[0-9]{2}")  # DoubleToString: fixed, 2
_NS_TEXT = re.compile(r"0|[1-9][0-9]{0,14}")
_NUMBER_TEXT = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,20})?(?:[eE][+-]?[0-9]{1,3})?")


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

ACCURACY_NOT_REPRODUCED = (
    "MLPerf's accuracy run is not reproduced: bench's answers check is its own"
)
_NOT_REPRODUCIBLE = (
    ACCURACY_NOT_REPRODUCED,
    "MLPerf's compliance tests (TEST06 and the others) are not reproduced",
    "LoadGen's query schedule and sample order (its seeds, the equal-issue permutation of "
    "the LLM benchmarks) are not reproduced: bench draws its own Poisson arrivals",
    "LoadGen's early stopping is judged on every query's TTFT and TPOT "
    "(mlperf_log_detail.txt); the summary gives only its verdict, so the published "
    "over-limit counts are not known",
)


# --------------------------------------------------------------------------- the summary


def looks_like(head: str) -> bool:
    """Whether a file's first 4 KiB look like LoadGen's summary (any scenario)."""
    return "MLPerf Results Summary" in head and re.search(r"(?m)^\s*Scenario\s*:", head) is not None


def _fail(path: Path, why: str) -> CardError:
    return CardError(f"{path}: {why}")


def _what_else(text: str) -> str | None:
    """Another publisher's format, named for the error, or None."""
    start = text.lstrip()[:1]
    if start not in ("[", "{"):
        return None
    head = text[:4096]
    if "tput_per_gpu" in head:
        return "InferenceX's database dump (JSON)"
    if any(k in head for k in ("request_throughput", "output_throughput", "ttft_ms")):
        return "a vLLM benchmark result (JSON, --save-result)"
    if "accelerator_model_name" in head or "system_name" in head:
        return "an MLPerf system description (JSON; give it as the system file)"
    return "a JSON document"


@dataclass(frozen=True)
class _Summary:
    values: dict[str, str]  # key (runs of blanks made one) -> its first value
    repeats: dict[str, list[str]]  # keys given more than once -> every value, in file order
    bullets: dict[str, list[str]]  # "TTFT Early Stopping Result" -> its " * " lines


def _parse(text: str) -> _Summary:
    """The summary's `key : value` lines and the bullets under each "... Result:" heading."""
    values: dict[str, list[str]] = {}
    bullets: dict[str, list[str]] = {}
    heading: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("*") and heading is not None:
            bullets.setdefault(heading, []).append(line.lstrip("* ").strip())
            continue
        heading = None
        key, sep, value = line.partition(":")
        key = " ".join(key.split())
        if not sep or not key or key.startswith("*"):
            continue
        value = value.strip()
        if not value and key.endswith("Result"):
            heading = key
        values.setdefault(key, []).append(value)
    return _Summary(
        values={k: v[0] for k, v in values.items()},
        repeats={k: v for k, v in values.items() if len(v) > 1},
        bullets=bullets,
    )


def _one(path: Path, summary: _Summary, key: str) -> str:
    if key not in summary.values:
        raise _fail(
            path,
            f"no {key!r} line: not a complete server-scenario LLM summary; give "
            "the mlperf_log_summary.txt LoadGen wrote",
        )
    seen = sorted(set(summary.repeats.get(key, [])))
    if len(seen) > 1:
        raise _fail(
            path, f"{key!r} is given twice with different values ({seen}): not as LoadGen writes it"
        )
    return summary.values[key]


def _figure_text(path: Path, key: str, text: str, pattern: re.Pattern[str]) -> float:
    if not pattern.fullmatch(text):
        form = "an integer" if pattern is _NS_TEXT else "a number with two decimals"
        raise _fail(
            path,
            f"{key} is {text[:40]!r}, not {form} as LoadGen writes it; give the "
            "summary as LoadGen wrote it",
        )
    return float(text)


def _setting(path: Path, values: dict[str, str], key: str) -> float | None:
    text = values.get(key)
    if text is None:
        return None
    if not _NUMBER_TEXT.fullmatch(text):
        raise _fail(
            path, f"{key} is {text[:40]!r}, not a number; give the summary as LoadGen wrote it"
        )
    value = float(text)
    if not math.isfinite(value) or value <= 0:
        raise _fail(path, f"{key} is {text[:40]!r}: LoadGen's server runs set it above 0")
    return value


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


def _check_select(select: Mapping[str, str]) -> None:
    unknown = sorted(set(select) - set(SELECT_KEYS))
    if unknown:
        raise CardError(
            f"unknown select key(s) {', '.join(unknown)} for {WHAT}: the known "
            f"ones are {', '.join(SELECT_KEYS)}"
        )
    scenario = select.get("scenario")
    if scenario is not None and scenario.replace(" ", "").lower() != "server":
        raise CardError(
            f"select scenario={scenario!r}: only the Server scenario is "
            "reproduced; give scenario=Server or leave it out"
        )


def _check_run(path: Path, values: dict[str, str]) -> None:
    scenario = values.get("Scenario")
    if scenario is None:
        raise _fail(path, f"no 'Scenario' line: not {WHAT}; give LoadGen's mlperf_log_summary.txt")
    if scenario.replace(" ", "").lower() != "server":
        raise _fail(
            path,
            f"the {scenario[:40]!r} scenario: only MLPerf's Server scenario is "
            "reproduced; give the Server run's mlperf_log_summary.txt",
        )
    mode = values.get("Mode", "")
    if mode not in ("PerformanceOnly", "Performance", "SubmissionRun"):
        raise _fail(
            path,
            f"mode {mode[:40]!r}: only a performance run's summary holds the "
            "published figures; give performance/run_1/mlperf_log_summary.txt",
        )
    result = values.get("Result is")
    if result == "INVALID":
        said_no = [
            k
            for k in (
                "Performance constraints satisfied",
                "Min duration satisfied",
                "Min queries satisfied",
                "Early stopping satisfied",
            )
            if values.get(k) == "NO"
        ]
        why = f" ({', '.join(said_no)}: NO)" if said_no else ""
        raise _fail(
            path,
            f"LoadGen judged this run INVALID{why}: its figures are not a valid "
            "MLPerf result; give a VALID run's summary",
        )
    if result != "VALID":
        raise _fail(
            path, f"'Result is' is {result!r}, not VALID: give the summary of a finished, VALID run"
        )
    if TOKENS_PER_S not in values:
        raise _fail(
            path,
            f"no {TOKENS_PER_S!r}: not an LLM benchmark's server run (LoadGen "
            "writes it only with token latencies); only LLM benchmarks are reproduced",
        )


# ------------------------------------------------------------------------ the system file


_SYSTEM_EXTRA = (
    "submitter",
    "division",
    "status",
    "system_name",
    "system_type",
    "framework",
    "other_software_stack",
    "accelerator_model_name",
    "accelerator_memory_capacity",
    "accelerator_interconnect",
    "host_processor_model_name",
    "operating_system",
    "sw_notes",
    "hw_notes",
)


def _count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 1 else None
    if isinstance(value, str) and re.fullmatch(r"[1-9][0-9]{0,6}", value.strip()):
        return int(value)
    return None


def _text(value: Any) -> str | None:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        text = str(value).strip()
        return text[:MAX_EXTRA_VALUE] if text and text.upper() != "N/A" else None
    return None


def _engine_name(framework: str | None) -> str | None:
    low = (framework or "").lower()
    for needle, name in (
        ("vllm", "vllm"),
        ("sglang", "sglang"),
        ("tensorrt-llm", "trt-llm"),
        ("tensorrt_llm", "trt-llm"),
        ("trt-llm", "trt-llm"),
        ("trtllm", "trt-llm"),
    ):
        if needle in low:
            return name
    return None


@dataclass(frozen=True)
class _System:
    stem: str
    gpu_model: str | None
    gpus_per_node: int | None
    nodes: int | None
    fields: dict[str, str]


def _read_system(system: Path) -> _System:
    doc = read_json(system, SYSTEM_WHAT)
    if not isinstance(doc, dict) or not ("system_name" in doc or "accelerator_model_name" in doc):
        raise CardError(
            f"{system}: no system_name or accelerator_model_name: not "
            f"{SYSTEM_WHAT}; give systems/<system>.json of the submission"
        )
    fields = {k: t for k in _SYSTEM_EXTRA if (t := _text(doc.get(k))) is not None}
    return _System(
        stem=system.stem,
        gpu_model=fields.get("accelerator_model_name"),
        gpus_per_node=_count(doc.get("accelerators_per_node")),
        nodes=_count(doc.get("number_of_nodes")),
        fields=fields,
    )


# ------------------------------------------------------------------------------ read


def _figures(path: Path, summary: _Summary) -> tuple[PublishedFigure, ...]:
    valid = "valid only with p99 TTFT and TPOT under the benchmark's limits (early stopping "
    valid += "at 99 % confidence)"
    specs: tuple[tuple[str, re.Pattern[str], str, ComputedAs | None, str], ...] = (
        (
            TOKENS_PER_S,
            _RATE_TEXT,
            "tok/s",
            "mlperf_tokens_per_s",
            "output tokens a second: every sample's output tokens, as the SUT reported them, "
            f"over the time from the run's start to the last sample's completion; {valid}",
        ),
        (
            SAMPLES_PER_S,
            _RATE_TEXT,
            "req/s",
            "request_rate",
            "completed samples a second: (samples - 1) over the time to the last sample's "
            "completion (LoadGen counts the last sample as the open end of the range)",
        ),
        (
            TTFT_P99,
            _NS_TEXT,
            "ns",
            "mlperf_ttft_p99_ns",
            "time to first token at the 99th percentile, LoadGen's nearest rank (the sorted "
            "per-sample TTFTs at index floor(0.99 x samples)), in ns as published",
        ),
        (
            TPOT_P99,
            _NS_TEXT,
            "ns",
            "mlperf_tpot_p99_ns",
            "time per output token at the 99th percentile: per sample (latency - TTFT) / "
            "(output tokens - 1) in integer ns, the sorted values at index floor(0.99 x "
            "samples), in ns as published",
        ),
    )
    figures = []
    for key, pattern, unit, computed, definition in specs:
        value = _figure_text(path, key, _one(path, summary, key), pattern)
        figures.append(
            PublishedFigure(
                name=key, value=value, unit=unit, definition=definition, computed_as=computed
            )
        )
    return tuple(figures)


def _constraints(
    path: Path, values: dict[str, str], bench: Benchmark
) -> tuple[tuple[PublishedConstraint, ...], str]:
    limits = []
    source = []
    pairs: tuple[tuple[Literal["ttft", "tpot"], str, float], ...] = (
        ("ttft", TTFT_LIMIT, bench.ttft_ms),
        ("tpot", TPOT_LIMIT, bench.tpot_ms),
    )
    for figure, key, known in pairs:
        ns = _setting(path, values, key)
        if ns is None:
            limit_ms, where = known, "loadgen/mlperf.conf"
        else:
            limit_ms, where = ns / 1e6, "the summary"
        source.append(f"{figure} {limit_ms:g} ms from {where}")
        limits.append(
            PublishedConstraint(
                figure=figure,
                percentile=SERVER_PERCENTILE,
                limit_ms=limit_ms,
                confidence=EARLY_STOPPING_CONFIDENCE,
            )
        )
    return tuple(limits), "; ".join(source)


def _extra(summary: _Summary) -> dict[str, str]:
    extra: dict[str, str] = {}
    bullets = summary.bullets
    for key, value in summary.values.items():
        if len(extra) >= MAX_EXTRA_LINES:
            break
        if key in (TOKENS_PER_S, SAMPLES_PER_S, TTFT_P99, TPOT_P99):
            continue
        text = " ".join(bullets[key]) if key in bullets else value
        if text:
            extra[key[:MAX_EXTRA_VALUE]] = text[:MAX_EXTRA_VALUE]
    return extra


def read(path: Path, select: Mapping[str, str], system: Path | None = None) -> PublisherCard:
    """The card of one MLPerf Inference Server-scenario LLM result: PATH its
    mlperf_log_summary.txt, SYSTEM its systems/<system>.json (optional)."""
    _check_select(select)
    text = read_text(path, WHAT, MAX_SUMMARY_BYTES).removeprefix("\ufeff")
    if "MLPerf Results Summary" not in text:
        other = _what_else(text)
        said = f"this is {other}, " if other else "no 'MLPerf Results Summary' banner: "
        raise _fail(path, f"{said}not {WHAT}; give LoadGen's mlperf_log_summary.txt")
    summary = _parse(text)
    _check_run(path, summary.values)
    sys_info = _read_system(system) if system is not None else None
    try:
        return _card(path, select, summary, sys_info)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or type(exc).__name__
        raise _fail(
            path,
            f"{where}: {first['msg']}: not a result bench can hold; give the "
            "summary as LoadGen wrote it",
        ) from None


def _card(
    path: Path, select: Mapping[str, str], summary: _Summary, sys_info: _System | None
) -> PublisherCard:
    values = summary.values
    named, base = _benchmark(path, select, values.get("SUT name"))
    bench = BENCHMARKS[base]
    figures = _figures(path, summary)
    constraints, limits_from = _constraints(path, values, bench)
    rate = _setting(path, values, "target_qps")
    min_ms = _setting(path, values, "min_duration (ms)")
    from_path, _ = _path_parts(path)
    missing = ["launch flags", "image", "engine version", "precision"]
    not_reproducible = list(_NOT_REPRODUCIBLE)
    extra = _extra(summary)
    extra["benchmark"] = named
    extra["limits"] = limits_from
    extra["limits (loadgen/mlperf.conf)"] = f"ttft {bench.ttft_ms:g} ms, tpot {bench.tpot_ms:g} ms"
    gpu_model = gpu_count = nodes = None
    engine_name = None
    if sys_info is not None:
        extra.update({f"system.{k}": v for k, v in sys_info.fields.items()})
        gpu_model, nodes = sys_info.gpu_model, sys_info.nodes
        if sys_info.gpus_per_node is not None:
            gpu_count = sys_info.gpus_per_node * (nodes or 1)
        engine_name = _engine_name(sys_info.fields.get("framework"))
        if nodes is not None and nodes > 1:
            not_reproducible.append(
                f"a {nodes}-node system: bench reproduces one host's serving, not a "
                "multi-node submission"
            )
    if engine_name is None:
        missing.insert(0, "engine")
    if gpu_model is None:
        missing.append("gpu_model")
    if gpu_count is None:
        missing.append("gpu_count")

    system_id = (sys_info.stem if sys_info else None) or from_path or values.get("SUT name")
    submitter = sys_info.fields.get("submitter") if sys_info else None
    point_id = "/".join(p for p in (submitter, system_id, named, "Server") if p)
    return PublisherCard(
        publisher="mlperf",
        source=path.name,
        point_id=point_id[:MAX_EXTRA_VALUE],
        model=bench.model,
        gpu_model=gpu_model,
        gpu_count=gpu_count,
        nodes=nodes,
        engine=PublishedEngine(name=engine_name),
        workload=PublishedWorkload(
            arrivals="server",
            dataset=bench.dataset,
            request_rate=rate,
            length_rule=f"the benchmark's own samples ({bench.about}; "
            f"{bench.samples:,} in the performance set), their prompt lengths, and "
            "outputs as the model ends them",
            min_duration_s=min_ms / 1000 if min_ms is not None else None,
        ),
        figures=figures,
        constraints=constraints,
        missing=tuple(missing),
        not_reproducible=tuple(not_reproducible),
        extra=extra,
    )


# ---------------------------------------------------------------------------- export


def _format(figure: PublishedFigure) -> str:
    if figure.unit == "ns":
        return str(int(figure.value))
    return f"{figure.value:.2f}"


def export(card: PublisherCard) -> dict[str, str]:
    """The summary's figure lines back, name -> the value text LoadGen wrote."""
    if card.publisher != "mlperf":
        raise CardError(
            f"card {card.point_id!r} is {card.publisher}'s, not MLPerf's: export "
            "it with its own publisher"
        )
    return {f.name: _format(f) for f in card.figures}
