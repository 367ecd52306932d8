"""The schema of `results.json`: what one `bench run` measured, and how.

Versioned (`schema_version`); later changes are additive (new optional fields only), so
this bench reads every version in `READABLE_SCHEMA_VERSIONS`:
- 1: the first.
- 2: a cell's GPUs during its window (`CellResult.gpu`: energy and its source, clock-limit
  shares, SM clocks) and its named flags (`CellResult.flags`, e.g. `gpu_throttled`);
  `Measurement.energy_from` and `Measurement.gpu_validity`.
- 3: the answer fingerprint (`Results.fingerprint`, bench.answers): what the server answered
  to a fixed, versioned prompt set before the sweep; None in a run made without it.
- 4: the long-context retrieval check (`Fingerprint.retrieval`, bench.answers): the code
  planted in the fingerprint's context prompts and whether each long context's answer gave
  it; None in a fingerprint made before it.
- 5: a workload run (`Results.workload`, bench.workload_points): the workload as run and
  its points' figures; None in a run of the card's matrix.
- 6: the server's own timings from its trace spans (`Results.server_spans`,
  bench.live.span_join): what the run's OTLP receiver got, dropped and joined, and per cell
  the server's queue time and time to first token beside the client's; None in a run made
  without `--otlp-traces-port`.

Speed convention. A twin can run N times faster than real time (`speed_factor` N, read
from its `/version` or given with `--speed-factor`; 1 for a real server). `bench run`
then scales what it controls by 1/N (the window, the 3 s readiness hold, time-outs), so
that the run covers the same *server* time as a real one. Every duration and rate in
this file is **as measured on the client's clock** (`time.perf_counter`), never rescaled:
at speed 10 a 30 s window shows `measured_for_s` ≈ 3.0 and rates ten times the card's.
To compare with a card measured in real time use `CellFigures.at_server_speed(N)` /
`PrefillSample.at_server_speed(N)`: durations times N, rates divided by N. Both identities of the
card (total = tokens / measured for; per request = 1000 / TBT ms) hold before and after.
`tables.md` is rendered at server speed (identical when N = 1).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from bench import bounds
from bench.answers import Fingerprint
from bench.failures import ErrorKind
from bench.workload_points import WorkloadRun

SCHEMA_VERSION = 6
READABLE_SCHEMA_VERSIONS = (1, 2, 3, 4, 5, 6)

Api = Literal["chat", "completions"]
# valid: measured, numbers reported. invalid: a request failed (stream cut, HTTP error,
# error event), no numbers. over_capacity: not run (C x (context + max_tokens) > KV
# capacity). not_ready: the readiness gate never held, the window was measured anyway and
# the cell is flagged. interrupted: the run stopped during this cell, no numbers.
CellStatus = Literal["valid", "invalid", "over_capacity", "not_ready", "interrupted"]
PrefillStatus = Literal["valid", "invalid", "interrupted", "over_capacity"]
RunState = Literal["running", "complete", "interrupted", "failed"]
# Where the KV capacity came from (bench.run.capacity; the first in this order that is there).
KvSource = Literal[
    "kv_budget",
    "kv_cache_size_tokens",
    "startup_log",
    "num_gpu_blocks_x_block_size",
    "engine_metrics",  # another engine's /metrics (detail and server.facts_source say which)
    "engine_endpoint",  # another engine's endpoint (llama.cpp /props, SGLang /get_server_info)
    "unknown",
]
# The engine behind the URL, as bench.engines.detect found it.
EngineName = Literal["vllm", "sglang", "llamacpp", "trtllm"]
# Where a cell's output tokens were counted from (bench.stream.tokens): usage on every chunk;
# the engine's own per-chunk count (llama.cpp timings.predicted_n); the streamed text
# tokenized with the server's tokenizer, split at token boundaries ("tokenized_text") or,
# where the tokenizer gives no pieces, in proportion to characters ("tokenized_text_share").
TokenSource = Literal["usage", "engine_chunk_count", "tokenized_text", "tokenized_text_share"]
# How the number of requests running on the server was obtained for "Average active".
ActiveSource = Literal["server_metrics", "client_in_flight"]
# How prompt sizes were made exact.
PromptSizing = Literal["tokenize", "usage_calibrated"]
SpeedSource = Literal["flag", "version", "default"]
# A flag on a cell measured with figures whose conditions make them suspect; a verdict treats
# a flagged cell as one that was not ready unless the user accepts the flag by name
# (`--accept gpu_throttled`). gpu_throttled: bench.run.gpu_validity says when.
CellFlag = Literal["gpu_throttled"]
# Where a window's GPU energy came from (bench.host.telemetry): the driver's cumulative
# counter, or nvidia-smi's power samples integrated over the window.
EnergySource = Literal["energy_counter", "power_integral"]
# When a stream's reads arrived: the kernel's receive stamp (bench.stream.http1 on Linux), or the
# client's clock when the read was handed over (httpx: https, or no kernel stamps).
ReadTimes = Literal["kernel_receive_stamp", "client_clock"]


class _ResultsModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunSettings(_ResultsModel):
    """The parameters of the run as requested (the API key is never recorded)."""

    url: str
    api: Api = "chat"
    model: str | None = None  # as requested; None = auto-detected (see ServerInfo.model)
    contexts: tuple[int, ...]  # decode contexts, nominal tokens (8K = 8192)
    prefill_only_contexts: tuple[int, ...] = ()
    concurrencies: tuple[int, ...]
    # (context as given: its label or nominal size, concurrency): only these decode cells of
    # contexts x concurrencies are planned (a sequential compare's later trials); empty = all.
    cells: tuple[tuple[str, int], ...] = ()
    # A workload's points by label (`Arrivals.labels`): only these are measured (a
    # sequential compare's later trials); empty = all.
    points: tuple[str, ...] = ()
    duration_s: float  # the window in server time (30 s on the card)
    max_tokens: int
    trials: int = 1
    kv_budget_tokens: int | None = None
    # as given with --speed-factor; None = auto
    speed_factor: float | None = Field(None, ge=bounds.SPEED_MIN, le=bounds.SPEED_MAX)
    readiness_hold_s: float = 3.0  # server time
    request_timeout_s: float = 600.0  # client time; a read time-out is a failed request
    seed: int = 0
    # Send the answer fingerprint before the sweep (bench.run.fingerprint); --no-fingerprint.
    fingerprint: bool = True


class ServerInfo(_ResultsModel):
    url: str
    model: str
    max_model_len: int
    version: str | None = None  # `version` from /version
    version_payload: dict[str, Any] = Field(default_factory=dict)
    speed_factor: float = Field(1.0, ge=bounds.SPEED_MIN, le=bounds.SPEED_MAX)
    speed_source: SpeedSource = "default"
    has_metrics: bool = False
    has_tokenize: bool = False
    engine: EngineName | None = None  # None: a results.json from before engine detection
    # fact -> where it came from: "metrics:<name>", "endpoint:<path>[ field]",
    # "fallback:<how>" (facts: engine, max_model_len, kv_capacity, running, waiting,
    # spec_decode, prefix_cache, output_tokens, output_tokens_fallback); docs/engines.md
    facts_source: dict[str, str] = Field(default_factory=dict)


class KvCapacity(_ResultsModel):
    tokens: int | None
    source: KvSource
    detail: str  # e.g. "vllm:cache_config_info kv_cache_size_tokens=1234567"


class PlannedContext(_ResultsModel):
    label: str  # "8K", "251K" (see bench.run.prompts.context_label)
    nominal_tokens: int  # as requested: 262144 for "256K"
    prompt_tokens: int  # after trimming to max_model_len - max_tokens - 64
    trimmed: bool
    decode: bool  # False for a prefill-only context
    max_tokens: int  # of its decode requests (1 for prefill-only)
    # Set when even the max_tokens=1 scout does not fit the KV cache: the row is not run.
    scout_reason: str | None = None


class PlannedCell(_ResultsModel):
    context_label: str
    prompt_tokens: int
    concurrency: int
    kv_needed_tokens: int  # C x (context + max_tokens)
    run: bool
    reason: str | None = None  # "needs N KV tokens, the server has M"


class Plan(_ResultsModel):
    contexts: tuple[PlannedContext, ...]
    cells: tuple[PlannedCell, ...]
    kv: KvCapacity
    trials: int = 1
    estimated_duration_s: float  # client (wall) time, including prefill and warm-up
    prompt_sizing: PromptSizing = "tokenize"


class Distribution(_ResultsModel):
    """Order statistics of a sample, in seconds (or tokens for counts)."""

    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float


class PrefillSample(_ResultsModel):
    """The cold scout of a context row: one streaming request with max_tokens=1."""

    context_label: str
    prompt_tokens: int  # from usage.prompt_tokens of the scout itself
    trial: int = 0
    status: PrefillStatus
    reason: str | None = None
    ttft_s: float | None = None
    prefill_tok_s: float | None = None  # prompt_tokens / ttft_s

    def at_server_speed(self, speed_factor: float) -> PrefillSample:
        if self.ttft_s is None or self.prefill_tok_s is None:
            return self
        return self.model_copy(
            update={
                "ttft_s": self.ttft_s * speed_factor,
                "prefill_tok_s": self.prefill_tok_s / speed_factor,
            }
        )


class CellFigures(_ResultsModel):
    """The card's "All measurements" columns, with the card's definitions."""

    total_tok_s: float  # output_tokens / measured_for_s
    per_request_tok_s: float  # 1 / tbt_s (1000 / median TBT in ms)
    ttft_s: float  # median over every request of the cell that produced a token
    tbt_s: float  # median over requests of (t_last - t_first) / (tokens - 1)
    average_active: float
    active_source: ActiveSource
    completed_requests: int  # requests that finished inside the window
    output_tokens: int  # usage tokens received inside the window
    measured_for_s: float  # window start to the last usage chunk inside it

    def at_server_speed(self, speed_factor: float) -> CellFigures:
        n = speed_factor
        return self.model_copy(
            update={
                "total_tok_s": self.total_tok_s / n,
                "per_request_tok_s": self.per_request_tok_s / n,
                "ttft_s": self.ttft_s * n,
                "tbt_s": self.tbt_s * n,
                "measured_for_s": self.measured_for_s * n,
            }
        )


class CellExtras(_ResultsModel):
    """What the card does not show and we add."""

    ttft: Distribution | None = None
    tbt: Distribution | None = None  # per-request token-weighted TBT
    chunk_gap: Distribution | None = None  # every gap between usage chunks, s
    tokens_per_chunk: float | None = None  # mean tokens per usage chunk (MTP > 1)
    spec_decode_acceptance_rate: float | None = None  # accepted / draft tokens
    spec_decode_acceptance_length: float | None = None  # 1 + accepted / drafts
    prefix_cache_hit_rate: float | None = None  # hits / queries over the window
    # hits / queries of the C requests the cell launches together (from just before the
    # launch to when each has its first token; None if a worker had started a second
    # request by then, or without the counters): near 1 backs "TTFT mostly excludes prefill".
    launch_prefix_cache_hit_rate: float | None = None
    requests_started: int = 0  # requests the workers started, warm-up included
    requests_failed: int = 0
    requests_in_window: int = 0  # requests with a token inside the window
    # Every usage token the cell's requests received, warm-up and after-window included
    # (to check against the server's vllm:generation_tokens_total).
    tokens_received: int = 0
    ready_after_s: float | None = None  # from the workers' start to the gate holding
    metrics_samples: int = 0  # /metrics scrapes inside the window
    # The window in the times of samples.jsonl (seconds from the cell's start).
    window_start_s: float | None = None
    window_end_s: float | None = None
    # How the output tokens of this cell were counted (None: before token sources, usage).
    token_source: TokenSource | None = None


class CellGpu(_ResultsModel):
    """The GPUs during a decode cell's window, from nvidia-smi (bench.host.telemetry)."""

    samples: int  # nvidia-smi samples in the window, all GPUs
    energy_j: float | None  # all GPUs over the sampled span; None without two readings a GPU
    energy_per_output_token_j: float | None
    energy_source: EnergySource | None
    # Clock-limit reason -> the largest share of a GPU's samples it was active in.
    throttle_reasons: dict[str, float] = Field(default_factory=dict)
    # GPU index (as text, JSON keys) -> its mean SM clock over the window, MHz.
    mean_sm_clock_mhz: dict[str, float] = Field(default_factory=dict)
    # GPU index -> the steady SM clock it was judged against (bench.run.gpu_validity).
    steady_sm_clock_mhz: dict[str, float] = Field(default_factory=dict)


class CellResult(_ResultsModel):
    context_label: str
    prompt_tokens: int
    concurrency: int
    trial: int = 0
    status: CellStatus
    reason: str | None = None
    figures: CellFigures | None = None  # None unless status is valid or not_ready
    extras: CellExtras | None = None
    started_at_s: float | None = None  # seconds since the run's clock anchor
    failures_by_kind: dict[ErrorKind, int] = Field(
        default_factory=dict,
        description="the cell's failed requests by kind (bench.failures); only kinds "
        "that occurred; empty when none failed (and in results written before it was added)",
    )
    gpu: CellGpu | None = None  # None without GPU telemetry (no nvidia-smi, or schema 1)
    flags: dict[CellFlag, str] = Field(
        default_factory=dict,
        description="named flags on the cell's measurement, each with why (gpu_throttled: "
        "docs/run.md, GPU validity); a verdict treats a flagged cell as not ready unless "
        "the flag is accepted (--accept gpu_throttled)",
    )


class Estimate(_ResultsModel):
    """Mean and 95 % confidence half-width of one figure over trials."""

    mean: float
    ci95: float | None  # None with fewer than 2 trials
    n: int


class CellAggregate(_ResultsModel):
    context_label: str
    concurrency: int
    trials: int  # valid trials aggregated
    total_tok_s: Estimate
    per_request_tok_s: Estimate
    ttft_s: Estimate
    tbt_s: Estimate


class Measurement(_ResultsModel):
    """How things were measured on this run: no silent guesses."""

    output_tokens_from: TokenSource = "usage"
    active_source: ActiveSource = "server_metrics"
    prompt_sizing: PromptSizing = "tokenize"
    kv_source: KvSource = "unknown"
    metrics_available: bool = False
    read_times: ReadTimes = "client_clock"
    ttft_from: Literal["request_written", "request_started"] = "request_started"
    # Where energy per output token came from: energy_counter when every cell's came from the
    # driver's counter, power_integral when any came from sampled power; None without GPUs.
    energy_from: EnergySource | None = None
    # The rule that flags a cell gpu_throttled, as applied (bench.run.gpu_validity.RULE).
    gpu_validity: str | None = None
    speed_convention: str = (
        "durations and rates as measured on the client clock; "
        "multiply durations by speed_factor and divide rates by it for server time"
    )


class ServerTimings(_ResultsModel):
    """One cell (a decode cell, a prefill scout, a workload point: samples.jsonl's phase,
    context, concurrency and trial) as the server's trace spans saw it. Medians over its
    completed requests (`finished` in samples.jsonl) that have the server's span, each
    taken over those same requests, in seconds on the client's clock convention (the
    server's own durations, not rescaled; a twin's are wall-clock seconds)."""

    phase: str
    context: str
    concurrency: int
    trial: int = 0
    completed: int  # completed requests of the cell
    joined: int  # of those, the ones with the server's span
    queue_s: float | None = None  # median gen_ai.latency.time_in_queue
    server_ttft_s: float | None = None  # median gen_ai.latency.time_to_first_token
    client_ttft_s: float | None = None  # median client TTFT of the same requests
    server_e2e_s: float | None = None  # median gen_ai.latency.e2e
    # Joined requests whose server TTFT is larger than the client's: the server counts from
    # before the request was written, or its clock is not the client's (0 for vLLM).
    server_ttft_larger: int = 0


class ServerSpans(_ResultsModel):
    """What the run's OTLP/HTTP trace receiver got (bench.live.span_receiver) and how its
    spans joined the requests of samples.jsonl by trace id (bench.live.span_join)."""

    endpoint: str  # where the receiver listened: http://HOST:PORT/v1/traces
    kept: int = 0  # spans written to server_spans.jsonl
    joined: int = 0  # completed requests with their span, all cells
    completed: int = 0  # completed requests, all cells
    # Dropped, by why: "malformed_body" (not protobuf: 400), "refused_body" (too large,
    # another type or path, no length, too slow), "malformed_span" (bad ids or times),
    # "oversized_span" (too many attributes), "unknown_trace" (a trace id the run never
    # sent), "over_cap" (past a count bound), "duplicate" (more spans of one trace than
    # bench keeps), "late" (after the run stopped listening). Only the reasons that occurred.
    dropped: dict[str, int] = Field(default_factory=dict)
    note: str | None = None  # what the run said about them, once
    cells: tuple[ServerTimings, ...] = ()

    @property
    def joined_share(self) -> float | None:
        return None if not self.completed else self.joined / self.completed


class Results(_ResultsModel):
    schema_version: int = SCHEMA_VERSION
    bench_version: str = Field(
        description="bench's version, from git (setuptools-scm): `+g<commit>` names the commit "
        "of bench that made the run, `.dYYYYMMDD` after it marks a tree with uncommitted "
        "changes (dirty); `bench verify` requires the commit"
    )
    # A file name for `bench export` and pack: never a path (issue 29, M1).
    run_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    created_at: str  # ISO 8601 UTC: the run's one wall-clock anchor
    state: RunState = "running"
    settings: RunSettings
    server: ServerInfo
    plan: Plan
    measurement: Measurement = Field(default_factory=Measurement)
    prefill: tuple[PrefillSample, ...] = ()
    cells: tuple[CellResult, ...] = ()
    aggregates: tuple[CellAggregate, ...] = ()
    # What the server answered before the sweep (schema 3; None before it, or not yet sent).
    fingerprint: Fingerprint | None = None
    # What `bench run --workload` ran and measured (schema 5; None: the card's matrix).
    workload: WorkloadRun | None = None
    # The server's trace spans joined to the requests (schema 6; None: not received).
    server_spans: ServerSpans | None = None

    @property
    def speed_factor(self) -> float:
        return self.server.speed_factor

    def cell(self, context_label: str, concurrency: int, trial: int = 0) -> CellResult | None:
        for c in self.cells:
            if (c.context_label, c.concurrency, c.trial) == (context_label, concurrency, trial):
                return c
        return None
