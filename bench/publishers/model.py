"""A point another publisher measured, as a card: what ran, on what, under which traffic,
and the figures with the publisher's own names, units and definitions.

One card is one published point (InferenceX: one row of its database, one configuration
at one concurrency; vLLM's dashboard: one serving test of one commit; MLPerf: one
system's server-scenario result). Figures keep the publisher's units (`PublishedFigure`:
ms stay ms), so a card exported back gives the publisher's numbers unchanged; `definition`
says in words what the publisher measured and `computed_as` names the way
`bench.publishers.metrics` computes the same figure from our own records (None: we cannot).
A publisher that gives one sample a point (`samples_published`) gives no variance: a
reproduction's interval is ours alone, and the verdict says so.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

PUBLISHER_CARD_SCHEMA_VERSION = 1

Publisher = Literal["inferencex", "vllm-dashboard", "mlperf"]
PUBLISHERS: tuple[Publisher, ...] = ("inferencex", "vllm-dashboard", "mlperf")
# closed: C streams, each sends its next request when its last one ends; poisson / gamma:
# open loop at a request rate (gamma's shape is `burstiness`); burst: every request at once
# (a rate of inf); server: MLPerf's server scenario (Poisson at the rate the result names).
Arrivals = Literal["closed", "poisson", "gamma", "burst", "server"]
# How the computed figure is defined (bench.publishers.metrics.COMPUTED): the publisher's
# definition, computed from our per-request records.
ComputedAs = Literal[
    "input_output_tok_s_per_gpu",  # (input + output tokens) / duration / GPUs (InferenceX)
    "output_tok_s",  # output tokens / duration
    "output_tok_s_per_gpu",
    "total_tok_s",  # (input + output tokens) / duration
    "request_rate",  # completed requests / duration
    "interactivity",  # 1000 / TPOT in ms: tokens a second a user sees (InferenceX)
    "ttft_mean_ms",
    "ttft_median_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",  # TPOT excludes the first token: (latency - TTFT) / (tokens - 1)
    "tpot_median_ms",
    "tpot_p99_ms",
    "itl_mean_ms",
    "itl_median_ms",
    "itl_p99_ms",
    "e2el_mean_ms",
    "e2el_median_ms",
    "e2el_p99_ms",
    "mlperf_tokens_per_s",  # output tokens a second, valid only with the constraints met
    "mlperf_ttft_p99_ns",  # LoadGen's p99 first-token latency, whole ns
    "mlperf_tpot_p99_ns",  # LoadGen's p99 time per output token, whole ns
    # The same latency statistics in seconds (InferenceX publishes them so).
    "ttft_mean_s",
    "ttft_median_s",
    "ttft_p99_s",
    "tpot_mean_s",
    "tpot_median_s",
    "tpot_p99_s",
    "itl_mean_s",
    "itl_median_s",
    "itl_p99_s",
    "e2el_mean_s",
    "e2el_median_s",
    "e2el_p99_s",
]


class _FrozenPublished(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def _finite(value: float | None, what: str) -> float | None:
    if value is not None and not math.isfinite(value):
        raise ValueError(f"{what} {value!r} is not a finite number")
    return value


class PublishedFigure(_FrozenPublished):
    """One figure as the publisher printed it."""

    name: str = Field(description="the publisher's own name: tput_per_gpu, median_ttft_ms")
    value: float
    unit: str = Field(description="the publisher's unit: tok/s/gpu, ms, tok/s, req/s")
    definition: str = Field(description="what the publisher measured, in words")
    computed_as: ComputedAs | None = Field(
        default=None, description="how bench computes it from our records; None: it cannot"
    )

    @field_validator("value")
    @classmethod
    def _value(cls, v: float) -> float:
        if not (math.isfinite(v) and 0.0 <= v <= 1e12):
            raise ValueError(f"figure value {v!r} is not a finite number in 0..1e12")
        return v


class PublishedWorkload(_FrozenPublished):
    """The traffic the point was measured under, as far as the publisher says."""

    arrivals: Arrivals
    dataset: str = Field(description="random, sharegpt, ... as the publisher names it")
    concurrency: int | None = Field(default=None, ge=1, description="closed: streams; else cap")
    request_rate: float | None = Field(default=None, gt=0, description="req/s; inf: burst")
    burstiness: float | None = Field(default=None, gt=0, description="gamma's shape; 1: Poisson")
    input_tokens: int | None = Field(default=None, ge=1, description="ISL, the target")
    output_tokens: int | None = Field(default=None, ge=1, description="OSL, the target")
    # Random lengths: uniform on [range_ratio x L, L] (InferenceX's client); None: fixed or
    # not said. `length_rule` says the publisher's own rule in words.
    range_ratio: float | None = Field(default=None, ge=0, le=1)
    length_rule: str | None = None
    num_prompts: int | None = Field(default=None, ge=1)
    warmups: int | None = Field(default=None, ge=0)
    ignore_eos: bool | None = None
    prefix_caching: bool | None = None
    min_duration_s: float | None = Field(default=None, gt=0)

    @field_validator("request_rate")
    @classmethod
    def _rate(cls, v: float | None) -> float | None:
        if v is not None and math.isnan(v):
            raise ValueError("request rate is not a number")
        return v


class PublishedConstraint(_FrozenPublished):
    """A limit the result is valid only under (MLPerf: p99 TTFT and TPOT), judged as the
    publisher judges it (MLPerf: binomial early stopping at `confidence`)."""

    figure: Literal["ttft", "tpot"]
    percentile: float = Field(gt=0, lt=100)
    limit_ms: float = Field(gt=0)
    confidence: float | None = Field(default=None, gt=0, lt=1)

    @field_validator("limit_ms")
    @classmethod
    def _limit(cls, v: float) -> float:
        return _finite(v, "limit") or v


# Flags whose value is a secret: a published command's value of one is never kept (a card
# is written to a file; the key a publisher's server took is nobody's business).
SECRET_FLAGS = ("--api-key", "--hf-token", "--token", "--ssl-keyfile-password")
REDACTED = "<redacted>"


def redact_flags(words: tuple[str, ...]) -> tuple[str, ...]:
    """WORDS with every secret flag's value replaced by REDACTED (`--api-key K`, `--api-key=K`)."""
    out: list[str] = []
    hide = False
    for w in words:
        if hide:
            out.append(REDACTED)
            hide = False
            continue
        name, eq, _ = w.partition("=")
        if name in SECRET_FLAGS:
            out.append(f"{name}={REDACTED}" if eq else w)
            hide = not eq
            continue
        out.append(w)
    return tuple(out)


class PublishedEngine(_FrozenPublished):
    name: str | None = None  # vllm, sglang, trt-llm ...
    version: str | None = None
    commit: str | None = None
    image: str | None = None
    launch_flags: tuple[str, ...] = ()
    parallelism: dict[str, int] = Field(
        default_factory=dict, description="tp, ep, dp, pp ... as the publisher gives them"
    )

    @field_validator("launch_flags")
    @classmethod
    def _no_secrets(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        return redact_flags(v)


class PublisherCard(_FrozenPublished):
    schema_version: int = PUBLISHER_CARD_SCHEMA_VERSION
    publisher: Publisher
    source: str = Field(description="file name the card was read from")
    point_id: str = Field(description="the publisher's id of this point, or one we made")
    date: str | None = None
    model: str
    precision: str | None = None
    gpu_model: str | None = None
    gpu_count: int | None = Field(default=None, ge=1, description="GPUs the figures are over")
    nodes: int | None = Field(default=None, ge=1)
    engine: PublishedEngine
    workload: PublishedWorkload
    figures: tuple[PublishedFigure, ...]
    constraints: tuple[PublishedConstraint, ...] = ()
    samples_published: int = Field(default=1, ge=1, description="samples behind each figure")
    # What a reproduction needs that the publisher did not give ("launch flags", "image").
    missing: tuple[str, ...] = ()
    # Parts of the result we do not reproduce, each with why (MLPerf's accuracy run, a
    # disaggregated multi-node point).
    not_reproducible: tuple[str, ...] = ()
    # Everything else the row said, as text, so nothing published is lost.
    extra: dict[str, str] = Field(default_factory=dict)

    def figure(self, name: str) -> PublishedFigure | None:
        return next((f for f in self.figures if f.name == name), None)
