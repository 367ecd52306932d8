"""`bench run`'s live-metrics flags, and the sinks they open before anything is measured.

    --otel-url URL        OTLP/HTTP metrics to URL (bench.live.otel): a collector's base
                          URL (http://host:4318, /v1/metrics is added) or the full metrics
                          URL (any other path is kept as given)
    --otel-interval S     seconds between exports (default 5)
    --metrics-port N      serve the run's progress for Prometheus on N (bench.live.prometheus)
    --metrics-host ADDR   the address it listens on (default 0.0.0.0)

`open_live` checks the flags, imports the sinks' libraries (missing: one line naming
`pip install 'bench[live]'`, exit 7) and binds the metrics port (taken: one line, exit 2),
all before the server under test is asked anything. The flags change no setting of the
run: `--resume` takes them too.
"""

from __future__ import annotations

import argparse
import math
from urllib.parse import urlsplit, urlunsplit

from bench.errors import ToolMissing, UsageError
from bench.live.observer import LiveMetrics, LiveSink

DEFAULT_INTERVAL_S = 5.0
INTERVAL_RANGE_S = (0.1, 3600.0)
METRICS_PATH = "/v1/metrics"


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
