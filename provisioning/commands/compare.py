"""`provision compare` and `compare-commits`: two images on one host, then B against A.

Each sweep is a HostRun with its own signed bundle; the sides run in the order asked
(interleaved A B B A ..., blocked, or the sequential design of bench.verdict.sequential,
where trials go only to cells still open), then `bench compare` judges B against A.
The arguments become a PairChoice (and a TargetChoice) once, in the handlers here.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.command_line import SubParsers
from bench.errors import UsageError
from bench.history import noise_runs
from bench.history.database import Target
from bench.settings import Settings
from bench.verdict import sequential
from bench.verdict.cells import Key, RunFigures
from bench.verdict.command import checked_alpha, compare_exit
from bench.verdict.compare import ALPHA, Comparison, Policy, compare
from bench.verdict.noise_prior import NoisePrior
from bench.verdict.run_source import Verification, load_run, merge_runs
from bench.verdict.settings import parse_accept
from bench.verdict.tables import compare_markdown
from provisioning.commands.options import (
    SWEEP_ARGS_EPILOG,
    add_build_args,
    add_common,
    add_pair_outputs,
    add_workload_args,
    history_choice,
    noise_choice,
    target_choice,
    workload_choice,
)
from provisioning.containers.engine import DockerEngine
from provisioning.flow import signing
from provisioning.flow.host_run import HostRun
from provisioning.flow.options import Options, Secrets
from provisioning.flow.workload import WorkloadChoice
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.image import build, ensure
from provisioning.runs.summary import summarise
from provisioning.runs.targets import (
    HostTarget,
    TargetChoice,
    hf_token,
    preflight_host,
    resolve_target,
)
from provisioning.runs.workers import Worker, check_run_id, new_run_id, run_all


def register(sub: SubParsers) -> None:
    p = sub.add_parser(
        "compare",
        help="two images on one host, one sweep after the other, then bench compare",
        epilog=SWEEP_ARGS_EPILOG,
    )
    add_common(p)
    p.add_argument("--image-a", required=True, help="image of run A (the baseline)")
    p.add_argument("--image-b", required=True, help="image of run B")
    add_pair_outputs(p)
    add_workload_args(p)
    p.set_defaults(func=_compare)

    p = sub.add_parser(
        "compare-commits",
        help="an image per vLLM commit built on the host, both sweeps, then bench compare",
        epilog=SWEEP_ARGS_EPILOG,
    )
    add_common(p)
    p.add_argument("--commit-a", required=True, help="vLLM commit of run A (7-40 hex digits)")
    p.add_argument("--commit-b", required=True, help="vLLM commit of run B")
    add_build_args(p)
    for side in ("a", "b"):
        p.add_argument(
            f"--build-arg-{side}",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help=f"a build argument for image {side.upper()} only (e.g. an exact VLLM_VERSION)",
        )
    add_pair_outputs(p)
    add_workload_args(p)
    p.set_defaults(func=_compare_commits)


@dataclass(frozen=True)
class PairChoice:
    """What the command line chose for the two sides' sweeps (add_pair_outputs, and the
    words after --)."""

    results: Path = Path("results")
    run_id: str | None = None
    allowed_signers: Path | None = None
    trials_per_side: int = 3
    order: str = "interleaved"
    bench_args: tuple[str, ...] = ()
    trust_new_host: bool = False
    history: Target | None = None  # where each sweep's bundle is recorded (None: nowhere)
    accept: frozenset[str] = frozenset()  # --accept: what the verdict lets differ (bench compare's)
    alpha: float = ALPHA  # --alpha: what the verdict spends under no change (bench compare's)
    workload: WorkloadChoice | None = None  # every sweep's (None: the card's matrix)
    noise_from: Target | None = None  # --noise-from: the history the noise prior comes from
    # Its prior, read once the host and profile are known (`with_noise_prior`).
    noise_prior: NoisePrior | None = None

    def policy(self) -> Policy:
        return Policy(self.alpha, accept=self.accept, noise_prior=self.noise_prior)


def _pair_choice(args: argparse.Namespace, settings: Settings) -> PairChoice:
    return PairChoice(
        results=args.results,
        run_id=args.run_id,
        allowed_signers=args.allowed_signers,
        trials_per_side=args.trials_per_side,
        order=args.order,
        bench_args=tuple(args.bench_args),
        trust_new_host=args.trust_new_host,
        history=history_choice(args, settings),
        accept=parse_accept(args.accept),
        alpha=checked_alpha(args.alpha),
        workload=workload_choice(args),
        noise_from=noise_choice(args),
    )


def with_noise_prior(pair: PairChoice, target: HostTarget) -> PairChoice:
    """PAIR with the noise prior of --noise-from, read once, before the first sweep: the
    history's runs of this host and the compare's launch profile. The host as its runs
    record it is its name as given: the server container, where `bench run` writes
    environment.json, takes it as its hostname (provisioning.flow.server_start). A UsageError
    when the history holds too few repeated runs (bench.history.noise_runs)."""
    if pair.noise_from is None:
        return pair
    prior = noise_runs.from_history(
        pair.noise_from, host=target.host.name, profile=target.profile.name
    )
    return dataclasses.replace(pair, noise_prior=prior)


def _one_host(args: argparse.Namespace, command: str) -> str:
    names = inventory.parse_host_list(args.host)
    if len(names) != 1:
        raise UsageError(f"{command} runs on one host", hint="HOST=gpu01")
    return names[0]


def _compare(args: argparse.Namespace, settings: Settings) -> int:
    check_run_id(args.run_id)
    name = _one_host(args, "compare")
    return compare_images(
        _pair_choice(args, settings), target_choice(args, image=args.image_a), name, settings,
        images=(args.image_a, args.image_b),
    )  # fmt: skip


def compare_images(
    pair: PairChoice,
    choice: TargetChoice,
    name: str,
    settings: Settings,
    *,
    images: tuple[str, str],
) -> int:
    """Two images on one host, one sweep after the other, then `bench compare` A vs B."""
    target = resolve_target(choice, name)
    pair = with_noise_prior(pair, target)
    preflight_host(target, trust_new_host=pair.trust_new_host, environ=dict(os.environ))
    title = f"{images[0]} (A) vs {images[1]} (B) on {target.host.name}"
    return _sweep_both(pair, settings, target, images, title)


def _compare_commits(args: argparse.Namespace, settings: Settings) -> int:
    check_run_id(args.run_id)
    commits = (build.valid_commit(args.commit_a, "A"), build.valid_commit(args.commit_b, "B"))
    name = _one_host(args, "compare-commits")
    common = build.parse_build_args(args.build_arg)
    per_side = (build.parse_build_args(args.build_arg_a), build.parse_build_args(args.build_arg_b))
    build_args = tuple({**common, **own} for own in per_side)
    return compare_commits(
        _pair_choice(args, settings), target_choice(args), name, settings,
        commits=commits, build_args=(build_args[0], build_args[1]),
    )  # fmt: skip


def compare_commits(
    pair: PairChoice,
    choice: TargetChoice,
    name: str,
    settings: Settings,
    *,
    commits: tuple[str, str],
    build_args: tuple[dict[str, str], dict[str, str]],
) -> int:
    """An image per vLLM commit, built on the host; both sweeps; `bench compare` B vs A."""
    target = resolve_target(choice, name)
    pair = with_noise_prior(pair, target)
    stage = target.profile.image
    specs = [
        build.spec_for(stage, build.commit_tag(stage, c), commit=c, build_args=own)
        for c, own in zip(commits, build_args, strict=True)
    ]
    preflight_host(target, trust_new_host=pair.trust_new_host, environ=dict(os.environ))
    ids = []
    with DockerEngine(target.host) as engine:
        for spec in specs:  # both before either sweep: a commit that does not build stops here
            ids.append(
                ensure.ensure_image(engine, spec.tag, target.host.name, sys.stderr,
                                    source="build", build=spec)
            )  # fmt: skip
    for label, commit, image_id in zip("AB", commits, ids, strict=True):
        print(f"{label}: vLLM commit {commit}, image {image_id}", file=sys.stderr)
    title = (
        f"vLLM {commits[0]} (A, {ids[0][:19]}) vs {commits[1]} (B, {ids[1][:19]}) "
        f"on {target.host.name}"
    )
    return _sweep_both(pair, settings, target, (ids[0], ids[1]), title)


def sweep_order(trials: int, order: str) -> list[str]:
    """Which side each sweep runs: interleaved A B B A A B ... (each pair mirrors the one
    before, so a linear drift falls equally on both sides), or blocked A A A B B B."""
    if trials < 1:
        raise UsageError(f"--trials-per-side must be at least 1, got {trials}")
    if order == "blocked":
        return ["a"] * trials + ["b"] * trials
    return [x for i in range(trials) for x in (("a", "b") if i % 2 == 0 else ("b", "a"))]


def sweep_options(
    target: HostTarget,
    settings: Settings,
    allowed: Path,
    *,
    results: Path,
    bench_args: tuple[str, ...],
    image_ref: str,
    run_id: str,
    extra: tuple[str, ...] = (),
    history: Target | None = None,
    workload: WorkloadChoice | None = None,
) -> Options:
    """One sweep of a comparison or a bisection on TARGET: the user's `bench run` arguments
    (BENCH_ARGS) and then EXTRA (the last occurrence of a flag wins), measuring WORKLOAD
    when given; its verified bundle recorded in HISTORY when one is configured."""
    return Options(
        profile=target.profile,
        requirements=target.requirements,
        image_ref=image_ref,
        run_id=run_id,
        results_dir=results,
        allowed_signers=allowed,
        bench_args=(*bench_args, *extra),
        secrets=Secrets(api_key=settings.api_key, hf_token=hf_token(dict(os.environ))),
        history=history,
        workload=workload,
    )


class _SweepStopped(Exception):
    """A sweep of a sequential compare failed or was interrupted: stop the compare."""


@dataclass
class Sweeps:
    """The sweeps of one compare on one host, each a HostRun with its own signed bundle."""

    pair: PairChoice
    settings: Settings
    target: HostTarget
    images: tuple[str, str]
    base: str
    allowed: Path
    numbered: bool  # run ids <base>-a1, -b1 ... (else <base>-a, -b)

    def __post_init__(self) -> None:
        self.workers: list[Worker] = []

    def sweep(self, label: str, trial: int, extra: tuple[str, ...] = ()) -> RunFigures | None:
        """One sweep of side `label`, its bundle verified and read; None when it failed or
        was interrupted (the summary says which)."""
        opts = sweep_options(
            self.target, self.settings, self.allowed,
            results=self.pair.results, bench_args=self.pair.bench_args,
            image_ref=self.images[0] if label == "a" else self.images[1],
            run_id=f"{self.base}-{label}{trial}" if self.numbered else f"{self.base}-{label}",
            extra=extra, history=self.pair.history, workload=self.pair.workload,
        )  # fmt: skip
        worker = Worker(HostRun(self.target.host, opts, remote=Remote(self.target.host)))
        stopped = run_all([worker]) or worker.error is not None
        self.workers.append(worker)
        if stopped or worker.outcome.local_dir is None:
            return None
        return load_run(worker.outcome.local_dir, Verification((self.allowed,)))

    def verdict(self, title: str, how: list[str], result: Comparison) -> int:
        """The sweeps' summary, how they were ordered, their host time, then B against A."""
        summarise(self.workers, self.allowed, None)
        spent = sum(sum(w.outcome.timings_s.values()) for w in self.workers)
        print(f"\n## {title}\n")
        print("\n".join(how))
        print(f"host time of these sweeps, server starts and transfers included: "
              f"{spent / 60:.1f} min over {len(self.workers)} sweeps\n")  # fmt: skip
        print(compare_markdown(result))
        return int(compare_exit([result]))


def _sweep_both(
    pair: PairChoice,
    settings: Settings,
    target: HostTarget,
    images: tuple[str, str],
    title: str,
) -> int:
    """Sweeps of A and B in the order asked, one signed bundle each; then B against A."""
    trials, order = pair.trials_per_side, pair.order
    sweeps = Sweeps(
        pair, settings, target, images, pair.run_id or new_run_id(),
        pair.allowed_signers or signing.default_allowed_signers(),
        numbered=trials > 1 or order in ("sequential", "decide"),
    )  # fmt: skip
    if order in ("sequential", "decide"):
        return sequential_compare(sweeps, title, "decide" if order == "decide" else "settle")
    sides: dict[str, list[RunFigures]] = {"a": [], "b": []}
    done = {"a": 0, "b": 0}
    for label in sweep_order(trials, order):
        done[label] += 1
        figures = sweeps.sweep(label, done[label])
        if figures is None:
            return summarise(sweeps.workers, sweeps.allowed, None)
        sides[label].append(figures)
    a = merge_runs(sides["a"], f"{sweeps.base}-a")
    b = merge_runs(sides["b"], f"{sweeps.base}-b")
    sequence = " ".join(x.upper() for x in sweep_order(trials, order))
    drift = ""
    if order == "blocked" and trials > 1:
        drift = " (blocked: drift over time is NOT controlled and may read as a change)"
    return sweeps.verdict(title, [f"{trials} sweep(s) a side, order {sequence}{drift}"],
                          compare(a, b, sweeps.pair.policy()))  # fmt: skip


def sequential_compare(sweeps: Sweeps, title: str, goal: sequential.Goal = "settle") -> int:
    """The sequential design (`bench.verdict.sequential`): trials go to open cells only,
    until they are settled (GOAL "settle") or decided ("decide")."""

    def measure(side: sequential.Side, trial: int, cells: frozenset[Key] | None) -> RunFigures:
        figures = sweeps.sweep(side, trial, sequential.run_args(cells))
        if figures is None:
            raise _SweepStopped
        return figures

    try:
        policy = sweeps.pair.policy()
        outcome = sequential.run(
            measure, policy, names=(f"{sweeps.base}-a", f"{sweeps.base}-b"), goal=goal
        )
    except _SweepStopped:
        return summarise(sweeps.workers, sweeps.allowed, None)
    return sweeps.verdict(title, outcome.lines(), outcome.comparison)
