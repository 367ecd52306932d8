"""What one host run is asked to do (Options, Secrets) and what it gives back (HostOutcome)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from pydantic import SecretStr

from bench import secrets
from bench.errors import BenchError
from bench.history.database import Target
from bench.launch_profile import LaunchProfile
from provisioning.flow.live import LiveChoice
from provisioning.flow.server_traces import ServerTraces
from provisioning.flow.workload import WorkloadChoice
from provisioning.image.build import BuildSpec
from provisioning.preflight.requirements import Requirements


@dataclass(frozen=True)
class Secrets:
    api_key: SecretStr | None = None
    hf_token: SecretStr | None = None
    # OTEL_EXPORTER_OTLP_HEADERS and ..._METRICS_HEADERS as set here (name, value): the
    # collector's credentials, for `bench run --otel-url` (provisioning.flow.live).
    otlp_headers: tuple[tuple[str, SecretStr], ...] = ()

    def masks(self) -> secrets.KnownSecrets:
        """All of them, as bench.secrets masks them in what a server or its log says."""
        return secrets.KnownSecrets.of(
            self.api_key, self.hf_token, *(value for _, value in self.otlp_headers)
        )

    def otlp_environment(self) -> dict[str, str]:
        """The OTLP header variables for `bench run`'s environment."""
        return {name: value.get_secret_value() for name, value in self.otlp_headers}


@dataclass(frozen=True)
class Options:
    profile: LaunchProfile
    requirements: Requirements
    image_ref: str
    run_id: str
    results_dir: Path
    allowed_signers: Path
    bench_args: tuple[str, ...] = ()
    keep: bool = False
    image_source: str = "stream"  # auto | build | stream (provisioning.image.ensure)
    build: BuildSpec | None = None
    secrets: Secrets = field(default_factory=Secrets)
    history: Target | None = None  # where the verified bundle is recorded (None: nowhere)
    workload: WorkloadChoice | None = None  # `bench run --workload` (None: the card's matrix)
    live: LiveChoice | None = None  # `bench run --otel-url`, `--metrics-port` (None: neither)
    # The server started with tracing on, `bench run --otlp-traces-port` (None: off).
    traces: ServerTraces | None = None

    def server_argv(self) -> tuple[str, ...]:
        """The server's argv: the profile's, with the tracing flag when tracing is on."""
        argv = self.profile.argv
        return argv if self.traces is None else self.traces.server_argv(argv)


@dataclass
class HostOutcome:
    host: str
    run_id: str
    local_dir: Path | None = None
    archive: Path | None = None
    complete: bool = False
    image_id: str | None = None
    timings_s: dict[str, float] = field(default_factory=dict)
    error: BenchError | None = None
