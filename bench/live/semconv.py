"""One finished request in the terms of the OpenTelemetry GenAI semantic conventions.

Metrics (histograms, one value per request, recorded when its stream ends; `HISTOGRAMS` gives
each its unit, description and advised bucket boundaries):

    gen_ai.client.operation.duration              s        request written to stream end
    gen_ai.client.token.usage                     {token}  prompt tokens (gen_ai.token.type
                                                           "input") and output tokens
                                                           ("output"), the server's usage
    gen_ai.client.operation.time_to_first_chunk   s        request written to the first
                                                           chunk with text (results.json's
                                                           TTFT)
    gen_ai.client.operation.time_per_output_chunk s        the request's mean time between
                                                           chunks after its first

The convention records time_per_output_chunk once per chunk. Here it is once per request,
the mean of its gaps: one histogram record costs the SDK about 7 us, and per chunk that would
put 30 ms of work on the event loop at the end of each 4,096-token request of the card, while
128 other streams are being timed. The sum over requests is therefore not the sum of all
gaps; results.json's `itl` has that.

Attributes, on every metric:

    gen_ai.operation.name   "chat" (--api chat) or "text_completion" (--api completions)
    gen_ai.provider.name    the engine detected (vllm, sglang, llamacpp, trtllm), else "unknown"
    gen_ai.request.model    the model the requests name
    server.address, server.port   the server under test
    error.type              the failure's kind (results.json's failures_by_kind names), or
                            "cancelled" for a stream the client ended (a window's end, a
                            point's bound); absent for a completed request
    bench.run.id            results.json's run_id
    bench.phase             cell, point, warmup, scout or setup (bench.live.observer)
    bench.cell / bench.point   "CONTEXT:C" of a decode cell (a scout's context label) / a
                               workload point's index; absent outside them
    bench.trial             results.json's trial (from 0); absent in setup
    bench.outcome           completed, failed or cancelled

Times are client seconds, as in results.json: against a server run N x fast (the twin's
speed factor) a server second is N of them.

Output tokens counted only after a cell, through a tokenizer (an engine that streams no
counts, bench.stream.tokens), are not known when the stream ends: such a request records no
output token usage. Bucket boundaries are the conventions' advice.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from bench.live.observer import LiveRun, LiveScope
from bench.stream.records import RequestRecord

OPERATION_DURATION = "gen_ai.client.operation.duration"
TOKEN_USAGE = "gen_ai.client.token.usage"  # noqa: S105 - a metric name, not a secret
TIME_TO_FIRST_CHUNK = "gen_ai.client.operation.time_to_first_chunk"
TIME_PER_OUTPUT_CHUNK = "gen_ai.client.operation.time_per_output_chunk"
SECONDS = "s"
TOKENS = "{token}"

DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)  # fmt: skip
TOKEN_BUCKETS = tuple(float(4**i) for i in range(14))  # 1, 4, 16, ... 67,108,864
FIRST_CHUNK_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
                       2.5, 5.0, 7.5, 10.0)  # fmt: skip
PER_CHUNK_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)
# The four histograms: name -> (unit, description, advised bucket boundaries).
HISTOGRAMS: dict[str, tuple[str, str, tuple[float, ...]]] = {
    OPERATION_DURATION: (SECONDS, "GenAI operation duration.", DURATION_BUCKETS),
    TOKEN_USAGE: (TOKENS, "Number of input and output tokens used.", TOKEN_BUCKETS),
    TIME_TO_FIRST_CHUNK: (SECONDS, "Time to receive the first chunk.", FIRST_CHUNK_BUCKETS),
    TIME_PER_OUTPUT_CHUNK: (
        SECONDS,
        "Mean time per output chunk after the first, one value per request.",
        PER_CHUNK_BUCKETS,
    ),
}

Outcome = Literal["completed", "failed", "cancelled"]
Attributes = dict[str, str | int]


@dataclass(frozen=True, slots=True)
class FinishedRequest:
    """What one record says when its stream ends; None: the request has no such figure."""

    outcome: Outcome
    error_type: str | None
    duration_s: float | None
    first_chunk_s: float | None
    per_chunk_s: float | None
    input_tokens: int | None
    output_tokens: int | None


def finished(record: RequestRecord) -> FinishedRequest:
    """The figures of `record` (its stream over)."""
    if record.failure is not None:
        outcome: Outcome = "failed"
        error_type: str | None = record.failure.kind.value
    elif record.cancelled:
        outcome, error_type = "cancelled", "cancelled"
    else:
        outcome, error_type = ("completed", None) if record.finished else ("failed", "no_done")
    chunks = record.chunk_s
    per_chunk = (chunks[-1] - chunks[0]) / (len(chunks) - 1) if len(chunks) >= 2 else None
    return FinishedRequest(
        outcome=outcome,
        error_type=error_type,
        duration_s=None if record.end_s is None else record.end_s - record.ttft_from_s,
        first_chunk_s=record.ttft_s,
        per_chunk_s=per_chunk,
        input_tokens=record.prompt_tokens,
        # Text kept for a tokenizer is counted after the cell (module docstring).
        output_tokens=None if record.texts else record.tokens,
    )


def operation_name(api: str) -> str:
    return "chat" if api == "chat" else "text_completion"


def attributes(run: LiveRun, scope: LiveScope, request: FinishedRequest) -> Attributes:
    """Every metric's attributes for one request (module docstring)."""
    found: Attributes = {
        "gen_ai.operation.name": operation_name(run.api),
        "gen_ai.provider.name": run.provider,
        "gen_ai.request.model": run.model,
        "server.address": run.server_address,
        "server.port": run.server_port,
        "bench.run.id": run.run_id,
        "bench.phase": scope.phase,
        "bench.outcome": request.outcome,
    }
    if scope.trial is not None:
        found["bench.trial"] = scope.trial
    if scope.cell is not None:
        found["bench.cell"] = scope.cell
    if scope.point is not None:
        found["bench.point"] = scope.point
    if request.error_type is not None:
        found["error.type"] = request.error_type
    return found


def token_attributes(base: Attributes, token_type: Literal["input", "output"]) -> Attributes:
    return {**base, "gen_ai.token.type": token_type}
