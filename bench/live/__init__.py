"""Live metrics while `bench run` measures: OpenTelemetry export and a Prometheus endpoint.

observer    the sweep's side: the scope a request runs in (cell, point, trial, phase), the
            run's facts, and the fan-out to the sinks below; imports no third-party library
semconv     one finished request in the OpenTelemetry GenAI semantic conventions' terms:
            metric names, units, bucket boundaries and attributes (no third-party library)
otel        `--otel-url`: OTLP/HTTP metrics through the OpenTelemetry SDK (owns opentelemetry)
prometheus  `--metrics-port`: the run's own progress for scraping (owns prometheus_client)
flags       the flags on `bench run`'s parser, and the sinks and receiver they open before
            anything is measured

The server's own view, from its trace spans (`--otlp-traces-port`):

server_span    one span of the server as kept: vLLM's attribute names, a line of
               server_spans.jsonl (no third-party library)
span_decode    an OTLP/HTTP trace export's protobuf body -> spans, bounded (owns
               opentelemetry-proto)
span_receiver  the run's OTLP/HTTP receiver (POST /v1/traces) in a thread of its own,
               bounded, writing server_spans.jsonl
span_join      the spans joined to samples.jsonl's requests by trace id: per cell, the
               server's queue time and TTFT beside the client's (results.json's
               `server_spans`)

Both sinks and the receiver need the `live` extra (`pip install 'bench[live]'`); without it
a run that asks for one stops with one line before the server is asked anything.
`bench.run` talks to `observer` (and the receiver) only, so no measuring module imports
OpenTelemetry or prometheus_client.
"""
