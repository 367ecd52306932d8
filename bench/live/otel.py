"""`bench run --otel-url URL`: the run's requests as OpenTelemetry metrics over OTLP/HTTP.

The one module that imports OpenTelemetry. The GenAI semantic conventions' four histograms
(bench.live.semconv) are recorded once per finished request, from the client's hook, never
per token; the SDK aggregates them in place and its PeriodicExportingMetricReader sends them
every `--otel-interval` seconds from a thread of its own, through the OTLP/HTTP protobuf
exporter, cumulative. The meter provider is the run's own (the process's global one is not
set). Resource: service.name "bench" and service.version (OTEL_RESOURCE_ATTRIBUTES and
OTEL_SERVICE_NAME, when set, add to it as the SDK reads them).

Bounds: one export in flight at a time (the reader's lock); each ends within
EXPORT_TIMEOUT_S, retries included (the exporter's own deadline); nothing queues behind a
slow endpoint: what waits is the aggregation itself, one histogram per attribute set
(phases x cells x trials x outcomes, capped by the SDK's cardinality limit), whatever the
number of requests. At the run's end the meter provider's shutdown makes the last export
(the totals), bounded by CLOSE_BOUND_S; the reader's thread is a daemon thread, so an
endpoint that never answers cannot hold the process.

An endpoint that is down or never answers: the measurement goes on as if there were none
(the exports fail in the reader's thread), and stderr says so once (the event
`live_export_failing`, with the exporter's reason). The SDK's own log lines are kept off
stderr: they would repeat at every interval.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import structlog
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.metrics import Histogram
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
    PeriodicExportingMetricReader,
)
from opentelemetry.sdk.resources import Resource

from bench import __version__
from bench.live import semconv
from bench.live.observer import LiveRun, LiveScope
from bench.stream.records import RequestRecord

EXPORT_TIMEOUT_S = 5.0  # one export, retries included
CLOSE_BOUND_S = 2 * EXPORT_TIMEOUT_S  # the last export at the run's end, and the shutdown
SDK_LOGGER = "opentelemetry"


class _LastWords(logging.Handler):
    """Keeps the SDK's last warning (why an export failed) instead of printing it."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.last = ""

    def emit(self, record: logging.LogRecord) -> None:
        self.last = record.getMessage().splitlines()[0][:300]


def _quiet_sdk() -> _LastWords:
    """The SDK's loggers into one _LastWords, and nowhere else (idempotent)."""
    sdk = logging.getLogger(SDK_LOGGER)
    for h in sdk.handlers:
        if isinstance(h, _LastWords):
            return h
    words = _LastWords()
    sdk.addHandler(words)
    sdk.propagate = False
    return words


class _SaysOnceExporter(MetricExporter):
    """The OTLP exporter, and one warning the first time an export fails."""

    def __init__(self, inner: MetricExporter, on_first_failure: Callable[[], None]) -> None:
        super().__init__()
        self.inner = inner
        self.failures = 0
        self.exports = 0
        self._on_first_failure = on_first_failure

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        result = self.inner.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        self.exports += 1
        if result is not MetricExportResult.SUCCESS:
            self.failures += 1
            if self.failures == 1:
                self._on_first_failure()
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.inner.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.inner.shutdown(timeout_millis=timeout_millis, **kwargs)


class OtelSink:
    def __init__(self, url: str, *, interval_s: float) -> None:
        self.url = url
        self._words = _quiet_sdk()
        self._said = threading.Event()
        self.exporter = _SaysOnceExporter(
            OTLPMetricExporter(endpoint=url, timeout=EXPORT_TIMEOUT_S), self._say_failing
        )
        reader = PeriodicExportingMetricReader(
            self.exporter,
            export_interval_millis=interval_s * 1000,
            export_timeout_millis=EXPORT_TIMEOUT_S * 1000,
        )
        resource = Resource.create({"service.name": "bench", "service.version": __version__})
        self.provider = MeterProvider(metric_readers=[reader], resource=resource)
        meter = self.provider.get_meter("bench.live", __version__)
        made = {
            name: meter.create_histogram(
                name,
                unit=unit,
                description=description,
                explicit_bucket_boundaries_advisory=buckets,
            )
            for name, (unit, description, buckets) in semconv.HISTOGRAMS.items()
        }
        self.duration = made[semconv.OPERATION_DURATION]
        self.tokens = made[semconv.TOKEN_USAGE]
        self.first_chunk = made[semconv.TIME_TO_FIRST_CHUNK]
        self.per_chunk = made[semconv.TIME_PER_OUTPUT_CHUNK]
        self._run: LiveRun | None = None
        self._closed = False

    def run_started(self, run: LiveRun) -> None:
        self._run = run

    def unit_started(self, scope: LiveScope) -> None:
        pass  # a unit shows in its requests' attributes

    def unit_finished(self, scope: LiveScope, status: str) -> None:
        pass

    def request_finished(self, record: RequestRecord, scope: LiveScope) -> None:
        run = self._run
        if run is None or self._closed:
            return
        got = semconv.finished(record)
        attrs = semconv.attributes(run, scope, got)
        _record(self.duration, got.duration_s, attrs)
        _record(self.first_chunk, got.first_chunk_s, attrs)
        _record(self.per_chunk, got.per_chunk_s, attrs)
        if got.input_tokens is not None:
            self.tokens.record(got.input_tokens, semconv.token_attributes(attrs, "input"))
        if got.output_tokens is not None:
            self.tokens.record(got.output_tokens, semconv.token_attributes(attrs, "output"))

    def close(self) -> None:
        """The last export (the totals) and the shutdown, within CLOSE_BOUND_S."""
        if self._closed:
            return
        self._closed = True
        self.provider.shutdown(timeout_millis=CLOSE_BOUND_S * 1000)

    def _say_failing(self) -> None:
        if self._said.is_set():
            return
        self._said.set()
        structlog.get_logger("bench.live").warning(
            "live_export_failing",
            url=self.url,
            reason=self._words.last or "the export failed",
            note="OpenTelemetry export is failing; the run goes on and its results are not "
            "affected (said once)",
        )


def _record(histogram: Histogram, value: float | None, attrs: semconv.Attributes) -> None:
    if value is not None:
        histogram.record(value, attrs)
