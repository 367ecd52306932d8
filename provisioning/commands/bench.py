"""`provision bench HOST[,HOST...]`: the whole flow, one bundle per host (with --slurm or
--cluster: the fleet as one Slurm job, provisioning.commands.slurm).

Every host is checked first; nothing starts anywhere unless every host passes. Then each
host runs its flow in its own thread (one bundle per host); Ctrl-C interrupts them all,
each brings back what finished and removes its containers; one summary at the end.

Its parts: provisioning.runs.targets (a host resolved and preflighted),
provisioning.runs.workers (run ids, the threads that run hosts), provisioning.runs.summary
(the summary, verdicts, exit code).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.command_line import SubParsers
from bench.errors import UsageError
from bench.history import recording
from bench.history.database import Target
from bench.launch_profile import LaunchProfile
from bench.publishers.command import is_publisher_card
from bench.settings import Settings
from provisioning.commands import publisher_card, slurm
from provisioning.commands.options import (
    SWEEP_ARGS_EPILOG,
    add_build_args,
    add_common,
    add_live_args,
    add_traces_arg,
    add_workload_args,
    history_choice,
    live_choice,
    target_choice,
    traces_wanted,
    workload_choice,
)
from provisioning.flow import server_traces, signing
from provisioning.flow.host_run import HostRun
from provisioning.flow.live import LiveChoice, otlp_headers
from provisioning.flow.options import Options, Secrets
from provisioning.flow.workload import WorkloadChoice
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.image.build import SOURCES
from provisioning.runs.summary import default_card, summarise
from provisioning.runs.targets import (
    TargetChoice,
    build_spec,
    hf_token,
    preflight_host,
    resolve_target,
)
from provisioning.runs.workers import Worker, check_run_id, new_run_id, run_all
from provisioning.slurm.submit import bench_slurm


def register(sub: SubParsers) -> None:
    p = sub.add_parser(
        "bench",
        help="the whole flow: preflight, server, sweep, signed bundle",
        epilog=SWEEP_ARGS_EPILOG,
    )
    add_common(p, host_optional=True)
    p.add_argument("--keep", action="store_true", help="leave the server running afterwards")
    p.add_argument("--results", type=Path, default=Path("results"), help="local results folder")
    p.add_argument("--run-id", default=None, help="default: UTC time + random suffix")
    p.add_argument(
        "--card",
        type=Path,
        default=None,
        help="published card to judge each bundle against (default: the profile's, bench/cards/)",
    )
    p.add_argument(
        "--no-verdict", action="store_true", help="print no verdict (e.g. for a partial sweep)"
    )
    p.add_argument(
        "--allowed-signers",
        type=Path,
        default=None,
        help="local allowed-signers file the host keys are added to "
        "(default ~/.config/vllm-bench/allowed_signers)",
    )
    p.add_argument(
        "--image-source",
        choices=SOURCES,
        default="auto",
        help="stream: this machine's image when the host lacks it (docker save/load); "
        "build: build the profile's stage on the host from this checkout; auto (default): "
        "stream, or build on the host when neither has the image",
    )
    add_build_args(p)
    add_workload_args(p)
    add_live_args(p)
    add_traces_arg(p)
    recording.add_args(p)
    slurm.add_slurm(p)
    p.set_defaults(func=_bench)


@dataclass(frozen=True)
class BenchChoice:
    """`provision bench HOST,...` as the command line chose it."""

    hosts: tuple[str, ...]
    target: TargetChoice
    trust_new_host: bool = False
    run_id: str | None = None
    results: Path = Path("results")
    allowed_signers: Path | None = None
    keep: bool = False
    card: Path | None = None
    no_verdict: bool = False
    image_source: str = "auto"
    build_args: tuple[str, ...] = ()
    bench_args: tuple[str, ...] = ()
    history: Target | None = None
    workload: WorkloadChoice | None = None  # None: the card's matrix
    live: LiveChoice | None = None  # bench run --otel-url, --metrics-port (None: neither)
    traces: bool | None = None  # --server-traces / --no-server-traces (None: the profile's)

    def verdict_card(self, profile: LaunchProfile) -> Path | None:
        """The card each bundle is judged against: none with --no-verdict, and none for a
        workload unless --card names one (a workload is not the card's matrix)."""
        if self.no_verdict or (self.workload is not None and self.card is None):
            return None
        return self.card or default_card(profile)


def _bench(args: argparse.Namespace, settings: Settings) -> int:
    if args.slurm or args.cluster:
        if args.host:
            raise UsageError("give HOST or --slurm PARTITION, not both")
        if args.card is not None and is_publisher_card(args.card):
            raise UsageError(
                f"{args.card} is a publisher's card: not supported with --slurm or --cluster yet",
                hint="run it on hosts over ssh: HOST=gpu01",
            )
        if (args.workload, args.rates, args.slo) != (None, None, None):
            raise UsageError(
                "--workload, --rates and --slo are not supported with --slurm or --cluster",
                hint="run the workload on hosts over ssh: HOST=gpu01,gpu02",
            )
        return bench_slurm(slurm.slurm_choice(args, settings), settings)
    if not args.host:
        raise UsageError("no host given", hint="HOST=gpu01, or SLURM=partition NODES=2")
    check_run_id(args.run_id)
    given = (args.workload, args.rates, args.slo) != (None, None, None)
    card_plan = publisher_card.plan(
        args.card, profile=args.profile, workload_given=given, results=args.results
    )
    if card_plan is not None and card_plan.profile is not None:
        args = argparse.Namespace(**{**vars(args), "profile": card_plan.profile})
    choice = BenchChoice(
        hosts=tuple(inventory.parse_host_list(args.host)),
        target=target_choice(args),
        trust_new_host=args.trust_new_host,
        run_id=args.run_id,
        results=args.results,
        allowed_signers=args.allowed_signers,
        keep=args.keep,
        card=args.card,
        no_verdict=args.no_verdict,
        image_source=args.image_source,
        build_args=tuple(args.build_arg),
        bench_args=tuple(args.bench_args),
        history=history_choice(args, settings),
        workload=card_plan.workload if card_plan is not None else workload_choice(args),
        live=live_choice(args),
        traces=traces_wanted(args),
    )
    return bench_hosts(choice, settings)


def bench_hosts(choice: BenchChoice, settings: Settings) -> int:
    environ = dict(os.environ)
    targets = [resolve_target(choice.target, name) for name in choice.hosts]
    if choice.live is not None:
        for t in targets:
            choice.live.check_server_port(t.profile.port, t.profile.name)
    traces = [server_traces.choose(t.profile, choice.traces, choice.live) for t in targets]
    for target in targets:  # nothing starts unless every host passes
        preflight_host(target, trust_new_host=choice.trust_new_host, environ=environ)
    run_id = choice.run_id or new_run_id()
    allowed = choice.allowed_signers or signing.default_allowed_signers()
    workers = []
    for t, traced in zip(targets, traces, strict=True):
        opts = Options(
            profile=t.profile,
            requirements=t.requirements,
            image_ref=t.image_ref,
            run_id=run_id,
            results_dir=choice.results,
            allowed_signers=allowed,
            bench_args=choice.bench_args,
            keep=choice.keep,
            secrets=Secrets(
                api_key=settings.api_key,
                hf_token=hf_token(environ),
                otlp_headers=otlp_headers(choice.live, environ),
            ),
            image_source=choice.image_source,
            build=build_spec(t, source=choice.image_source, build_args=choice.build_args),
            history=choice.history,
            workload=choice.workload,
            live=choice.live,
            traces=traced,
        )
        workers.append(Worker(HostRun(t.host, opts, remote=Remote(t.host))))
    run_all(workers)
    card = choice.verdict_card(targets[0].profile)
    if card is None and choice.workload is not None and not choice.no_verdict:
        print("no verdict against a card: a workload is not the card's matrix "
              "(--card CARD judges it anyway)", file=sys.stderr)  # fmt: skip
    return summarise(workers, allowed, card, fleet_of=True)
