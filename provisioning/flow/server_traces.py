"""The server's trace spans on a host (`make bench HOST=... TRACES=1`, a launch profile's
`server_traces`): the orchestrator starts the server with tracing on and `bench run` receives
its spans (docs/provisioning.md, "Server traces").

`bench run` runs inside the server container (provisioning.flow.sweep_exec), so the server
reaches the run's receiver on the container's own 127.0.0.1. With tracing on:

- the server's argv gets `--otlp-traces-endpoint http://127.0.0.1:PORT/v1/traces` after the
  profile's own words, and its environment `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf`
  through the engine's API (vLLM's exporter speaks gRPC unless told; the twin's is HTTP);
- `bench run` gets `--otlp-traces-port PORT` (it listens on 127.0.0.1, its default) and
  records where it listened in results.json's `server_spans`, which is how the verdict knows
  the endpoint flag is the run's own tracing and not a change to the card's launch
  (bench.verdict.settings).

PORT is the profile's `traces_port` (default 4318). Nothing is published: the spans never
leave the container. The profile says whether tracing is on (cpu-vllm: on; published: off,
its launch is the card's token for token; smoke and twin: off); `--server-traces` and
`--no-server-traces` override it for a run.

Every refusal is one line (a UsageError, exit 2) before any host is touched: the traces port
equal to `--metrics-port`, and `--otlp-traces-port` in RUN_ARGS (the server would not send
there).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.errors import UsageError
from bench.launch_profile import (
    TRACES_ENDPOINT_FLAG,
    TRACES_PROTOCOL_ENV,
    LaunchProfile,
    traces_endpoint,
)
from provisioning.flow.live import LiveChoice

# `bench run`'s flag that the orchestrator passes itself when tracing is on.
TRACES_RUN_FLAG = "--otlp-traces-port"


@dataclass(frozen=True)
class ServerTraces:
    """Tracing on for one run: the port in the container the run receives the spans on."""

    port: int

    @property
    def endpoint(self) -> str:
        return traces_endpoint(self.port)

    def server_argv(self, argv: tuple[str, ...]) -> tuple[str, ...]:
        """The profile's argv with the endpoint flag after its own words."""
        return (*argv, TRACES_ENDPOINT_FLAG, self.endpoint)

    def server_environment(self) -> dict[str, str]:
        name, value = TRACES_PROTOCOL_ENV
        return {name: value}

    def run_args(self) -> tuple[str, ...]:
        """The `bench run` arguments inside the container."""
        return (TRACES_RUN_FLAG, str(self.port))


def check_bench_args(bench_args: tuple[str, ...]) -> None:
    """`--otlp-traces-port` after -- (RUN_ARGS) is refused: the server would not send there."""
    for word in bench_args:
        if word.split("=", 1)[0] == TRACES_RUN_FLAG:
            raise UsageError(
                f"{TRACES_RUN_FLAG} after -- (RUN_ARGS) is not passed on: the orchestrator "
                "starts the server with tracing and gives `bench run` the port itself",
                hint="give TRACES=1 (--server-traces) instead; the profile's traces_port sets "
                "the port",
            )


def choose(
    profile: LaunchProfile, wanted: bool | None, live: LiveChoice | None
) -> ServerTraces | None:
    """Tracing for a run of PROFILE: WANTED (--server-traces / --no-server-traces) or, when
    None, the profile's `server_traces`; checked against the metrics port (the profile
    model has already kept it off the server's port)."""
    if not (profile.server_traces if wanted is None else wanted):
        return None
    port = profile.traces_port
    if live is not None and live.metrics_port == port:
        raise UsageError(
            f"--metrics-port {port} is the port the run receives the server's traces on "
            f"(launch profile {profile.name}'s traces_port) in the same container",
            hint="give another --metrics-port, or turn tracing off with TRACES=0 "
            "(--no-server-traces)",
        )
    return ServerTraces(port)
