"""The card of one MLPerf Inference Server-scenario LLM result (`read`), and its figures back
as the text LoadGen wrote (`export`).

Where the definitions were read (loadgen/results.cc and loadgen/logging.cc, read to learn):

- The same files' per-sample definitions: TTFT is the time to the SUT's FirstTokenComplete;
  TPOT (`loadgen/logging.cc`) is (latency - TTFT) / (output tokens - 1) per sample, in
  integer ns; a percentile is LoadGen's nearest rank, sorted[floor(samples x 0.99)]; tokens a
  second are all samples' output tokens (as the SUT reported them) over the time to the last
  sample's completion; samples a second are (samples - 1) over that time.

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
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from bench.errors import CardError
from bench.publishers.mlperf.benchmarks import (
    BENCHMARKS,
    EARLY_STOPPING_CONFIDENCE,
    SERVER_PERCENTILE,
    Benchmark,
    _benchmark,
    _path_parts,
)
from bench.publishers.mlperf.summary import (
    _NS_TEXT,
    _RATE_TEXT,
    MAX_EXTRA_LINES,
    MAX_EXTRA_VALUE,
    MAX_SUMMARY_BYTES,
    SAMPLES_PER_S,
    TOKENS_PER_S,
    TPOT_LIMIT,
    TPOT_P99,
    TTFT_LIMIT,
    TTFT_P99,
    WHAT,
    _check_run,
    _check_select,
    _fail,
    _figure_text,
    _one,
    _parse,
    _setting,
    _Summary,
    _what_else,
)
from bench.publishers.mlperf.system import _engine_name, _read_system, _System
from bench.publishers.model import (
    ComputedAs,
    PublishedConstraint,
    PublishedEngine,
    PublishedFigure,
    PublishedWorkload,
    PublisherCard,
)
from bench.publishers.source import read_text

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
