"""LoadGen's log summary, mlperf_log_summary.txt: its `key : value` lines and the bullets
under its "... Result:" headings; the figures' text as LoadGen writes it; and the checks
that it is a finished, VALID performance run of the Server scenario.

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
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from bench.errors import CardError

WHAT = "an MLPerf Inference log summary"
MAX_SUMMARY_BYTES = 1 << 20  # LoadGen's summaries are ~3 KiB
MAX_EXTRA_LINES = 200
MAX_EXTRA_VALUE = 500
SELECT_KEYS = ("benchmark", "scenario")

TOKENS_PER_S = "Completed tokens per second"
SAMPLES_PER_S = "Completed samples per second"
TTFT_P99 = "99.00 percentile first token latency (ns)"
TPOT_P99 = "99.00 percentile time to output token (ns)"
TTFT_LIMIT = "ttft_latency (ns)"
TPOT_LIMIT = "tpot_latency (ns)"
_RATE_TEXT = re.compile(r"(?:0|[1-9][0-9]{0,12})\.[0-9]{2}")  # DoubleToString: fixed, 2
_NS_TEXT = re.compile(r"0|[1-9][0-9]{0,14}")
_NUMBER_TEXT = re.compile(r"[0-9]{1,20}(?:\.[0-9]{1,20})?(?:[eE][+-]?[0-9]{1,3})?")


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
