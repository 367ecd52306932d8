"""`bench twin serve --otlp-traces-endpoint URL`: a trace span per completed request, as vLLM
makes it (bench.live.server_span has vLLM's side, read from its code).

The one module of the twin that imports OpenTelemetry (the `live` extra); the twin imports
it only when the flag is given, so a twin without it pays nothing. Each request that
completes gets one span named "llm_request", of kind SERVER, from its arrival (the
request's first byte) to its end, whose parent is the incoming `traceparent` (its trace id
is the request's; a missing or malformed header gives a new trace, as in vLLM). Its
attributes are vLLM's names with the twin's own timeline, wall-clock seconds:

    gen_ai.latency.time_in_queue          scheduled - queued (the engine's waiting queue,
                                          after the frontend: vLLM's queued_ts)
    gen_ai.latency.time_to_first_token    first output written - arrival
    gen_ai.latency.e2e                    end - arrival
    gen_ai.latency.time_in_model_prefill  first output - scheduled
    gen_ai.latency.time_in_model_decode   end - first output
    gen_ai.latency.time_in_model_inference  end - scheduled
    gen_ai.usage.prompt_tokens, gen_ai.usage.completion_tokens, gen_ai.request.max_tokens,
    gen_ai.request.id

A twin run N times faster than real time reports the durations it took (not multiplied by
N), on the clock the client measures with.

Spans go through the SDK's BatchSpanProcessor (its own thread; the SDK's defaults, as in
vLLM: a batch every 5 s, OTEL_BSP_* change them) to the OTLP/HTTP protobuf span exporter,
each export bounded by EXPORT_TIMEOUT_S. An endpoint that is down loses the spans, never a
request. `close` sends what is queued, within CLOSE_BOUND_S.
"""

from __future__ import annotations

import logging

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from bench import __version__
from bench.live import server_span as names
from bench.twin.streams import Stream

EXPORT_TIMEOUT_S = 5.0
CLOSE_BOUND_S = 10.0
_NS = 1_000_000_000


class TwinTracer:
    """The twin's spans to one OTLP/HTTP endpoint (module docstring)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        # The SDK logs every failed export; the twin's stderr is for the twin's own words.
        logging.getLogger("opentelemetry").setLevel(logging.CRITICAL)
        resource = Resource.create({"service.name": "bench-twin", "service.version": __version__})
        self.provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        exporter = OTLPSpanExporter(endpoint=endpoint, timeout=EXPORT_TIMEOUT_S)
        self.provider.add_span_processor(BatchSpanProcessor(exporter))
        self.tracer = self.provider.get_tracer("bench.twin", __version__)
        self._propagator = TraceContextTextMapPropagator()
        self.spans = 0

    def finished(self, stream: Stream, end: float) -> None:
        """The span of a request that completed at `end` (wall-clock seconds)."""
        arrival = stream.arrival
        first = stream.first_output or end
        scheduled = stream.scheduled or first
        queued = stream.queued or arrival
        attrs: dict[str, AttributeValue] = {
            names.QUEUE: max(0.0, scheduled - queued),
            names.TTFT: max(0.0, first - arrival),
            names.E2E: max(0.0, end - arrival),
            names.PREFILL: max(0.0, first - scheduled),
            names.DECODE: max(0.0, end - first),
            names.INFERENCE: max(0.0, end - scheduled),
            names.PROMPT_TOKENS: stream.spec.prompt_tokens,
            names.COMPLETION_TOKENS: stream.output_tokens,
            names.MAX_TOKENS: stream.spec.max_tokens,
            names.REQUEST_ID: stream.spec.rid,
        }
        carrier = {"traceparent": stream.traceparent} if stream.traceparent else {}
        context = self._propagator.extract(carrier)
        span = self.tracer.start_span(
            names.SPAN_NAME, context=context, kind=SpanKind.SERVER,
            attributes=attrs, start_time=int(arrival * _NS),
        )  # fmt: skip
        span.end(end_time=int(end * _NS))
        self.spans += 1

    def close(self) -> None:
        """Export what is queued (bounded by CLOSE_BOUND_S), then stop."""
        self.provider.force_flush(timeout_millis=int(CLOSE_BOUND_S * 1000))
        self.provider.shutdown()
