"""Live metrics while `bench run` measures: OpenTelemetry export and a Prometheus endpoint.

observer    the sweep's side: the scope a request runs in (cell, point, trial, phase), the
            run's facts, and the fan-out to the sinks below; imports no third-party library
semconv     one finished request in the OpenTelemetry GenAI semantic conventions' terms:
            metric names, units, bucket boundaries and attributes (no third-party library)
otel        `--otel-url`: OTLP/HTTP metrics through the OpenTelemetry SDK (owns opentelemetry)
prometheus  `--metrics-port`: the run's own progress for scraping (owns prometheus_client)
flags       the two flags on `bench run`'s parser, and the sinks they open before anything
            is measured

Both sinks need the `live` extra (`pip install 'bench[live]'`); without it a run that asks
for one stops with one line before the server is asked anything. `bench.run` talks to
`observer` only, so no measuring module imports OpenTelemetry or prometheus_client.
"""
