"""The arguments several `provision` commands share, and the door where they become a typed
choice: target_choice reads hosts.toml once and hands provisioning.runs.targets a frozen
TargetChoice; nothing below provisioning/commands reads an argparse.Namespace.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.errors import UsageError
from bench.history import database, recording
from bench.history.database import Target
from bench.settings import Settings
from bench.verdict.command import add_alpha_arg, add_noise_from_arg
from bench.verdict.settings import add_accept_arg
from provisioning.flow import live, server_traces, workload
from provisioning.flow.live import LiveChoice
from provisioning.flow.workload import WorkloadChoice
from provisioning.hosts import inventory
from provisioning.runs.targets import TargetChoice

DEFAULT_INVENTORY = Path("hosts.toml")
# The epilog of every command that runs a sweep in a container.
SWEEP_ARGS_EPILOG = "arguments after -- go to `bench run` inside the container"


def add_common(p: argparse.ArgumentParser, *, host_optional: bool = False) -> None:
    """HOST and what resolve_target reads (TargetChoice), plus --trust-new-host."""
    if host_optional:
        p.add_argument(
            "host", nargs="?", help="an ssh alias or hostname; several as gpu01,gpu02 "
            "(none with --slurm)",
        )  # fmt: skip
    else:
        p.add_argument("host", help="an ssh alias or hostname; several as gpu01,gpu02")
    p.add_argument("--profile", help="launch profile (default: the inventory's, else published)")
    p.add_argument(
        "--inventory",
        type=Path,
        default=DEFAULT_INVENTORY,
        help="hosts.toml with per-host user, port, key, profile, model_cache",
    )
    p.add_argument("--image", help="image to run (default: the profile's target as built here)")
    p.add_argument(
        "--trust-new-host",
        action="store_true",
        help="accept and record the key of a host seen for the first time",
    )
    p.add_argument(
        "--no-weights-download",
        action="store_true",
        help="the weights must already be in the host's cache (the profile's pinned revision, "
        "else refs/main); preflight fails when they are not",
    )


def target_choice(args: argparse.Namespace, *, image: str | None = None) -> TargetChoice:
    """add_common's arguments as a TargetChoice (hosts.toml read here, once); IMAGE instead
    of --image when a command names the image itself."""
    return TargetChoice(
        inventory=inventory.load_inventory(args.inventory),
        profile=args.profile,
        image=image if image is not None else args.image,
        download_weights=not args.no_weights_download,
    )


def history_choice(args: argparse.Namespace, settings: Settings) -> Target | None:
    """Where the run's verified bundles are recorded (recording.add_args' --history,
    --no-history; else BENCH_HISTORY__URL); None: nowhere. A URL with a password is a
    UsageError here, before anything runs."""
    return recording.choice(args.history, settings.history.url, off=args.no_history)


def noise_choice(args: argparse.Namespace) -> Target | None:
    """The history --noise-from names (None: not given), its noise prior read later, once
    the host and profile are resolved. A URL with a password is a UsageError here, before
    anything runs."""
    given: str | None = args.noise_from
    return database.locate(given, None) if given else None


def add_pair_outputs(p: argparse.ArgumentParser) -> None:
    """Where the two runs of a comparison (compare, compare-commits) go."""
    p.add_argument("--results", type=Path, default=Path("results"), help="local results folder")
    p.add_argument(
        "--run-id",
        default=None,
        help="runs are <run-id>-a1, -b1, ... (with one trial a side: <run-id>-a and -b)",
    )
    p.add_argument("--allowed-signers", type=Path, default=None)
    p.add_argument(
        "--trials-per-side",
        type=int,
        default=3,
        metavar="N",
        help="sweeps per image, each a separate signed bundle (default 3: run-to-run noise "
        "is measured from them)",
    )
    p.add_argument(
        "--order",
        choices=("interleaved", "blocked", "sequential", "decide"),
        default="interleaved",
        help="interleaved (default): A B B A A B ..., so drift over hours is balanced; "
        "blocked: all A, then all B (fewer image switches; the verdict says drift is not "
        "controlled); sequential: A B A, then more sweeps of the cells still open only, "
        "up to 5 a side (about 55 %% of the server time; --trials-per-side is ignored); "
        "decide: looks at 2+2, 3+3, 5+5 (with --noise-from: first at 1+1), each cell "
        "measured until CHANGED or EQUIVALENT within the margin, stopping early when no "
        "open cell can be decided within 20 a side (--trials-per-side is ignored)",
    )
    add_accept_arg(p, between=" between A's and B's runs")
    add_alpha_arg(p)
    add_noise_from_arg(
        p,
        series="this host, as its runs record it, and the compare's launch profile; read "
        "once, before the first sweep",
    )
    recording.add_args(p)


def add_build_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Dockerfile build argument for builds on the host (repeatable), "
        "e.g. PYTHON_BASE=bench-base:latest on an offline host",
    )


# What --workload, --rates and --slo are to `bench run`: given both ways, which would win
# is argparse's business, not the user's; so they are refused together.
_WORKLOAD_FLAGS = ("--workload", "--rates", "--slo")


def add_workload_args(p: argparse.ArgumentParser) -> None:
    """--workload NAME|FILE, --rates, --slo: for every sweep's `bench run` in the container."""
    p.add_argument(
        "--workload",
        metavar="NAME|FILE",
        help="measure a workload instead of the card's matrix (docs/workloads.md): a preset "
        "shipped in the image's bench, or a TOML file here, copied into the run's container "
        "with the data file it names; checked here before any host is touched",
    )
    p.add_argument(
        "--rates",
        metavar="R,R,...",
        help="the workload's offered rates instead of its own (bench run --rates)",
    )
    p.add_argument(
        "--slo",
        metavar="BOUNDS",
        help="p99 bounds instead of the workload's own, e.g. 'ttft_p99<=2s,tpot_p99<=80ms' "
        "(bench run --slo)",
    )


def workload_choice(args: argparse.Namespace) -> WorkloadChoice | None:
    """add_workload_args' options as the workload of every sweep (None: the card's matrix),
    checked as `bench run` checks them; a bad one is a UsageError (exit 2) here."""
    if any(getattr(args, flag[2:]) is not None for flag in _WORKLOAD_FLAGS):
        for word in args.bench_args:
            flag = word.split("=", 1)[0]
            if flag in _WORKLOAD_FLAGS:
                raise UsageError(
                    f"{flag} is given twice: as an option and after -- (RUN_ARGS)",
                    hint="give the workload as WORKLOAD=, RATES=, SLO= (--workload, --rates, "
                    "--slo) only",
                )
    return workload.choose(args.workload, args.rates, args.slo)


def add_live_args(p: argparse.ArgumentParser) -> None:
    """--otel-url, --metrics-port, --metrics-host: live metrics of every sweep's `bench run`
    (provisioning.flow.live)."""
    p.add_argument(
        "--otel-url",
        metavar="URL",
        help="bench run --otel-url in the container: OTLP/HTTP metrics to this collector, as "
        "the GPU host reaches it (no credentials in it: OTEL_EXPORTER_OTLP_HEADERS in the "
        "environment is passed on instead)",
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        metavar="N",
        help="bench run --metrics-port N in the container, published as the host's port N, "
        "for Prometheus to scrape HOST:N/metrics while the sweep runs",
    )
    p.add_argument(
        "--metrics-host",
        metavar="ADDR",
        help="the host's address --metrics-port is published on (default 0.0.0.0: all)",
    )


def add_traces_arg(p: argparse.ArgumentParser) -> None:
    """--server-traces / --no-server-traces (provisioning.flow.server_traces)."""
    p.add_argument(
        "--server-traces",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="start the server with tracing on (--otlp-traces-endpoint to the run's own "
        "receiver, `bench run --otlp-traces-port` the profile's traces_port) and record its "
        "spans in the bundle; --no-server-traces: off (default: the launch profile's "
        "server_traces, on for cpu-vllm, off for published, smoke and twin)",
    )


def traces_wanted(args: argparse.Namespace) -> bool | None:
    """--server-traces (True), --no-server-traces (False) or neither (None: the profile
    says); --otlp-traces-port after -- is refused (a UsageError, exit 2)."""
    server_traces.check_bench_args(tuple(args.bench_args))
    wanted: bool | None = args.server_traces
    return wanted


def live_choice(args: argparse.Namespace) -> LiveChoice | None:
    """add_live_args' options, checked (a UsageError, exit 2, before any host is touched);
    None: neither given."""
    return live.choose(args.otel_url, args.metrics_port, args.metrics_host, tuple(args.bench_args))
