"""Live metrics of a run on a host (`make bench HOST=... OTEL_URL=... METRICS_PORT=...`):
`bench run --otel-url` and `--metrics-port` inside the server container, the metrics port
published on the host (docs/provisioning.md, "Live metrics").

The server container runs on Docker's bridge network (its ports published, the server's on
the host's 127.0.0.1 only), and `bench run` runs in it (provisioning.flow.sweep_exec), so:

- `--metrics-port N`: `bench run` listens on N on the container's every address (its
  `--metrics-host` default, 0.0.0.0), and the container publishes N as the host's port N on
  `--metrics-host ADDR` of the orchestrator (default 0.0.0.0: every address of the host,
  for a Prometheus on the user's network to scrape HOST:N). N must differ from the
  server's own port in the container.
- `--otel-url URL` goes on `bench run`'s command line as given: an http(s) URL with no
  user:password@ and no query string (either may hold a key, and a command line is seen by
  every process of the host); the collector's credentials go in OTEL_EXPORTER_OTLP_HEADERS
  (or OTEL_EXPORTER_OTLP_METRICS_HEADERS), which OpenTelemetry's exporter reads: taken from
  this machine's environment into the exec's environment through the engine's API, never a
  command line. A loopback URL (127.0.0.1, localhost) is refused: inside the container it is
  the container itself.

Every refusal is one line (a UsageError, exit 2) before any host is touched.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from pydantic import SecretStr

from bench.errors import UsageError
from bench.live.flags import otlp_endpoint

ALL_ADDRESSES = "0.0.0.0"  # noqa: S104 - the published port is meant for the user's network
# The OpenTelemetry exporter's own variables for the collector's headers (its credentials).
OTLP_HEADER_VARIABLES = ("OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_METRICS_HEADERS")
# `bench run`'s flags that the orchestrator passes itself: in RUN_ARGS they would skip its
# checks, or bind a port that is not published.
LIVE_FLAGS = ("--otel-url", "--metrics-port", "--metrics-host")
HEADERS_HINT = "put the collector's credentials in OTEL_EXPORTER_OTLP_HEADERS in the environment"


@dataclass(frozen=True)
class LiveChoice:
    """What the orchestrator's live-metrics options asked of every sweep: the OTLP URL, the
    metrics port and the host address it is published on."""

    otel_url: str | None = None
    metrics_port: int | None = None
    metrics_host: str = ALL_ADDRESSES

    def run_args(self) -> tuple[str, ...]:
        """The `bench run` arguments inside the container."""
        out: tuple[str, ...] = ()
        if self.otel_url is not None:
            out += ("--otel-url", self.otel_url)
        if self.metrics_port is not None:
            out += ("--metrics-port", str(self.metrics_port))
        return out

    def published(self) -> dict[int, tuple[str, int]]:
        """Container port → (host address, host port) for the server container."""
        if self.metrics_port is None:
            return {}
        return {self.metrics_port: (self.metrics_host, self.metrics_port)}

    def check_server_port(self, server_port: int, profile: str) -> None:
        """The metrics port cannot be the server's own port in the container."""
        if self.metrics_port == server_port:
            raise UsageError(
                f"--metrics-port {server_port} is the port of the server (launch profile "
                f"{profile}) in the same container",
                hint="give another port",
            )


def choose(
    otel_url: str | None,
    metrics_port: int | None,
    metrics_host: str | None,
    bench_args: tuple[str, ...] = (),
) -> LiveChoice | None:
    """The options as a LiveChoice, checked (module docstring); None when neither URL nor
    port was given."""
    for word in bench_args:
        flag = word.split("=", 1)[0]
        if flag in LIVE_FLAGS:
            raise UsageError(
                f"{flag} after -- (RUN_ARGS) is not passed on as given: the orchestrator "
                "checks the URL and publishes the port",
                hint="give OTEL_URL=, METRICS_PORT=, METRICS_HOST= (--otel-url, "
                "--metrics-port, --metrics-host) instead",
            )
    if metrics_host is not None and metrics_port is None:
        raise UsageError(
            "--metrics-host applies to --metrics-port, and none was given",
            hint="give METRICS_PORT=N (--metrics-port) as well",
        )
    if otel_url is None and metrics_port is None:
        return None
    if otel_url is not None:
        check_otel_url(otel_url)
    if metrics_port is not None and not 0 < metrics_port < 65536:
        raise UsageError(f"--metrics-port {metrics_port} is not a TCP port (1 to 65535)")
    host = ALL_ADDRESSES if metrics_host is None else _address(metrics_host)
    return LiveChoice(otel_url=otel_url, metrics_port=metrics_port, metrics_host=host)


def check_otel_url(url: str) -> None:
    """A URL for `bench run --otel-url` in the container (module docstring), or a UsageError."""
    parts = urlsplit(url.strip())
    if "@" in parts.netloc:
        raise UsageError(
            "--otel-url has user:password@ in it: a command line is no place for credentials",
            hint=HEADERS_HINT,
        )
    if parts.query:
        raise UsageError(
            "--otel-url has a query string: it may hold a key, and a command line is no place "
            "for one",
            hint=HEADERS_HINT,
        )
    otlp_endpoint(url)  # http(s) and a host: bench run's own rule
    host = parts.hostname or ""
    if host == "localhost" or host.endswith(".localhost") or _loopback(host):
        raise UsageError(
            f"--otel-url {url}: {host} inside the server container is the container itself",
            hint="give the collector's address as the GPU host reaches it",
        )


def otlp_headers(
    live: LiveChoice | None, environ: Mapping[str, str]
) -> tuple[tuple[str, SecretStr], ...]:
    """OTEL_EXPORTER_OTLP_HEADERS and OTEL_EXPORTER_OTLP_METRICS_HEADERS from ENVIRON, the
    ones set, as secrets; none without an --otel-url (nothing would read them)."""
    if live is None or live.otel_url is None:
        return ()
    return tuple(
        (name, SecretStr(environ[name])) for name in OTLP_HEADER_VARIABLES if environ.get(name)
    )


def _loopback(host: str) -> bool:
    """127.0.0.0/8, ::1, and 0.0.0.0 or :: (which a client reaches as this machine)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_unspecified


def _address(text: str) -> str:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        raise UsageError(
            f"--metrics-host {text!r} is not an IP address of the host",
            hint="e.g. 0.0.0.0 (every address, the default) or the host's address on your network",
        ) from None
