"""`bench run`'s live-metrics and server-trace flags, and what they open before anything
is measured.

    --otel-url URL          OTLP/HTTP metrics to URL (bench.live.otel): a collector's base
                            URL (http://host:4318, /v1/metrics is added) or the full metrics
                            URL (any other path is kept as given)
    --otel-interval S       seconds between exports (default 5)
    --metrics-port N        serve the run's progress for Prometheus on N (bench.live.prometheus)
    --metrics-host ADDR     the address it listens on (default 0.0.0.0)
    --otlp-traces-port N    receive the server's spans over OTLP/HTTP on N, POST /v1/traces
                            (bench.live.span_receiver), joined to the requests at the end
    --otlp-traces-host ADDR the address it listens on (default 127.0.0.1)
    --otlp-traces-wait S    at the end, wait at most S seconds for spans still to come
                            (default 10: vLLM exports in batches every 5 s)

`open_live` checks the flags, imports the sinks' libraries (missing: one line naming
`pip install 'bench[live]'`, exit 7) and binds the metrics port (taken: one line, exit 2),
all before the server under test is asked anything; `open_receiver` does the same for the
trace receiver. The flags change no setting of the run: `--resume` takes them too.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from bench.errors import ToolMissing, UsageError
from bench.live.observer import LiveMetrics, LiveSink
from bench.stream.traceparent import SentTraces

if TYPE_CHECKING:
    from bench.live.span_receiver import SpanReceiver

DEFAULT_INTERVAL_S = 5.0
INTERVAL_RANGE_S = (0.1, 3600.0)
METRICS_PATH = "/v1/metrics"
DEFAULT_TRACES_WAIT_S = 10.0
TRACES_WAIT_RANGE_S = (0.0, 600.0)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--otel-url",
        default=None,
        metavar="URL",
        help="send live OpenTelemetry metrics (GenAI semantic conventions) over OTLP/HTTP to "
        "this collector, e.g. http://127.0.0.1:4318 (/v1/metrics is added to a URL without a "
        "path); needs bench[live]",
    )
    p.add_argument(
        "--otel-interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="S",
        help="seconds between two OTLP exports",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="N",
        help="serve the run's own progress (cells done and left, the current cell, tokens, "
        "requests by outcome, ETA) for Prometheus on this port; needs bench[live]",
    )
    p.add_argument(
        "--metrics-host",
        default="0.0.0.0",  # noqa: S104 - an exporter's usual address (bench.live.prometheus)
        metavar="ADDR",
        help="the address --metrics-port listens on (127.0.0.1: this machine only)",
    )
    p.add_argument(
        "--otlp-traces-port",
        type=int,
        default=None,
        metavar="N",
        help="receive the server's trace spans over OTLP/HTTP (POST /v1/traces) on this port "
        "and join them to the requests by trace id: per cell, the server's queue time and "
        "time to first token beside the client's (start vLLM with --otlp-traces-endpoint "
        "http://HOST:N/v1/traces and OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf); "
        "needs bench[live]",
    )
    p.add_argument(
        "--otlp-traces-host",
        default="127.0.0.1",
        metavar="ADDR",
        help="the address --otlp-traces-port listens on (0.0.0.0: a server on another machine "
        "or container)",
    )
    p.add_argument(
        "--otlp-traces-wait",
        type=float,
        default=DEFAULT_TRACES_WAIT_S,
        metavar="S",
        help="after the last request, wait at most this many seconds for spans still to come "
        "(vLLM exports them in batches every 5 s)",
    )


def otlp_endpoint(url: str) -> str:
    """The metrics URL of `--otel-url`: /v1/metrics added to a base URL, else as given."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--otel-url {url!r} is not an http(s):// URL",
            hint="e.g. --otel-url http://127.0.0.1:4318",
        )
    if parts.username is not None or parts.password is not None:
        raise UsageError(f"--otel-url {url!r}: no user:password@ in it")
    path = parts.path if parts.path not in ("", "/") else METRICS_PATH
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def check(args: argparse.Namespace) -> None:
    """The flags' values, refused by name."""
    interval = args.otel_interval
    lo, hi = INTERVAL_RANGE_S
    if not (math.isfinite(interval) and lo <= interval <= hi):
        raise UsageError(f"--otel-interval {interval:g} is not a number of seconds from {lo:g} "
                         f"to {hi:g}")  # fmt: skip
    if args.metrics_port is not None and not 0 < args.metrics_port < 65536:
        raise UsageError(f"--metrics-port {args.metrics_port} is not a TCP port (1 to 65535)")
    if args.otel_url is not None:
        otlp_endpoint(args.otel_url)
    port = args.otlp_traces_port
    if port is not None and not 0 < port < 65536:
        raise UsageError(f"--otlp-traces-port {port} is not a TCP port (1 to 65535)")
    wait = args.otlp_traces_wait
    lo, hi = TRACES_WAIT_RANGE_S
    if not (math.isfinite(wait) and lo <= wait <= hi):
        raise UsageError(f"--otlp-traces-wait {wait:g} is not a number of seconds from {lo:g} "
                         f"to {hi:g}")  # fmt: skip


def open_live(args: argparse.Namespace) -> LiveMetrics:
    """The sinks the flags ask for, open (the metrics port bound); none: a LiveMetrics
    that does nothing."""
    check(args)
    want_otel, want_prom = args.otel_url is not None, args.metrics_port is not None
    if not (want_otel or want_prom):
        return LiveMetrics()
    try:
        if want_prom:
            from bench.live import prometheus
        if want_otel:
            from bench.live import otel
    except ImportError as exc:
        flag = "--otel-url" if want_otel else "--metrics-port"
        raise ToolMissing(
            f"{flag} needs {exc.name or 'a library'}, which is not installed",
            hint="pip install 'bench[live]'",
        ) from None
    sinks: list[LiveSink] = []
    if want_prom:
        sinks.append(prometheus.PrometheusSink(args.metrics_port, args.metrics_host))
    if want_otel:
        sinks.append(otel.OtelSink(otlp_endpoint(args.otel_url), interval_s=args.otel_interval))
    return LiveMetrics(tuple(sinks))


def open_receiver(args: argparse.Namespace, sent: SentTraces) -> SpanReceiver | None:
    """The trace receiver `--otlp-traces-port` asks for, listening (None without the flag);
    `sent` starts remembering the trace ids the run draws."""
    check(args)
    if args.otlp_traces_port is None:
        return None
    try:
        from bench.live import span_receiver
    except ImportError as exc:
        raise ToolMissing(
            f"--otlp-traces-port needs {exc.name or 'a library'}, which is not installed",
            hint="pip install 'bench[live]'",
        ) from None
    receiver = span_receiver.SpanReceiver(sent)
    receiver.listen(args.otlp_traces_host, args.otlp_traces_port)
    sent.remember = True
    return receiver
