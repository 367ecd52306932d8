"""`provision compare` and `compare-commits`: two images on one host, then B against A.

Each sweep is a HostRun with its own signed bundle; the sides run in the order asked
(interleaved A B B A ..., blocked, or the sequential design of bench.verdict.sequential,
where trials go only to cells still open), then `bench compare` judges B against A.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from bench.errors import UsageError
from bench.settings import Settings
from bench.verdict import sequential
from bench.verdict.cells import Key, RunFigures
from bench.verdict.command import compare_exit
from bench.verdict.compare import Comparison, Policy, compare
from bench.verdict.run_source import Verification, load_run, merge_runs
from bench.verdict.views import compare_markdown
from provisioning.containers.engine import Engine
from provisioning.flow import signing
from provisioning.flow.host_run import HostRun
from provisioning.flow.options import Options, Secrets
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.image import build, ensure
from provisioning.runs.summary import summarise
from provisioning.runs.targets import Target, hf_token, preflight_host, resolve_target
from provisioning.runs.workers import Worker, check_run_id, new_run_id, run_all


def cmd_compare(args: argparse.Namespace, settings: Settings) -> int:
    """Two images on one host, one sweep after the other, then `bench compare` A vs B."""
    check_run_id(args.run_id)
    names = inventory.parse_host_list(args.host)
    if len(names) != 1:
        raise UsageError("compare runs on one host", hint="HOST=gpu01")
    args.image = args.image_a
    target = resolve_target(args, names[0])
    preflight_host(target, trust_new_host=args.trust_new_host, environ=dict(os.environ))
    title = f"{args.image_a} (A) vs {args.image_b} (B) on {target.host.name}"
    return _sweep_both(args, settings, target, (args.image_a, args.image_b), title)


def cmd_compare_commits(args: argparse.Namespace, settings: Settings) -> int:
    """An image per vLLM commit, built on the host; both sweeps; `bench compare` B vs A."""
    check_run_id(args.run_id)
    commits = (build.valid_commit(args.commit_a, "A"), build.valid_commit(args.commit_b, "B"))
    names = inventory.parse_host_list(args.host)
    if len(names) != 1:
        raise UsageError("compare-commits runs on one host", hint="HOST=gpu01")
    common = build.parse_build_args(args.build_arg)
    per_side = (build.parse_build_args(args.build_arg_a), build.parse_build_args(args.build_arg_b))
    target = resolve_target(args, names[0])
    stage = target.profile.image
    specs = [
        build.spec_for(stage, build.commit_tag(stage, c), commit=c, build_args={**common, **own})
        for c, own in zip(commits, per_side, strict=True)
    ]
    preflight_host(target, trust_new_host=args.trust_new_host, environ=dict(os.environ))
    ids = []
    with Engine(target.host) as engine:
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
    return _sweep_both(args, settings, target, (ids[0], ids[1]), title)


def sweep_order(trials: int, order: str) -> list[str]:
    """Which side each sweep runs: interleaved A B B A A B ... (each pair mirrors the one
    before, so a linear drift falls equally on both sides), or blocked A A A B B B."""
    if trials < 1:
        raise UsageError(f"--trials-per-side must be at least 1, got {trials}")
    if order == "blocked":
        return ["a"] * trials + ["b"] * trials
    return [x for i in range(trials) for x in (("a", "b") if i % 2 == 0 else ("b", "a"))]


def sweep_options(
    target: Target,
    args: argparse.Namespace,
    settings: Settings,
    allowed: Path,
    *,
    image_ref: str,
    run_id: str,
    extra: tuple[str, ...] = (),
) -> Options:
    """One sweep of a comparison or a bisection on TARGET: the user's `bench run` arguments
    (args.bench_args) and then EXTRA (the last occurrence of a flag wins)."""
    return Options(
        profile=target.profile,
        requirements=target.requirements,
        image_ref=image_ref,
        run_id=run_id,
        results_dir=args.results,
        allowed_signers=allowed,
        bench_args=(*args.bench_args, *extra),
        secrets=Secrets(api_key=settings.api_key, hf_token=hf_token(dict(os.environ))),
    )


class _SweepStopped(Exception):
    """A sweep of a sequential compare failed or was interrupted: stop the compare."""


@dataclass
class Sweeps:
    """The sweeps of one compare on one host, each a HostRun with its own signed bundle."""

    args: argparse.Namespace
    settings: Settings
    target: Target
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
            self.target, self.args, self.settings, self.allowed,
            image_ref=self.images[0] if label == "a" else self.images[1],
            run_id=f"{self.base}-{label}{trial}" if self.numbered else f"{self.base}-{label}",
            extra=extra,
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
    args: argparse.Namespace,
    settings: Settings,
    target: Target,
    images: tuple[str, str],
    title: str,
) -> int:
    """Sweeps of A and B in the order asked, one signed bundle each; then B against A."""
    trials = getattr(args, "trials_per_side", 1)
    order = getattr(args, "order", "interleaved")
    sweeps = Sweeps(
        args, settings, target, images, args.run_id or new_run_id(),
        args.allowed_signers or signing.default_allowed_signers(),
        numbered=trials > 1 or order == "sequential",
    )  # fmt: skip
    if order == "sequential":
        return sequential_compare(sweeps, title)
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
                          compare(a, b, Policy()))  # fmt: skip


def sequential_compare(sweeps: Sweeps, title: str) -> int:
    """The sequential design (`bench.verdict.sequential`): trials go to open cells only."""

    def measure(side: sequential.Side, trial: int, cells: frozenset[Key] | None) -> RunFigures:
        figures = sweeps.sweep(side, trial, sequential.run_args(cells))
        if figures is None:
            raise _SweepStopped
        return figures

    try:
        outcome = sequential.run(measure, Policy(), names=(f"{sweeps.base}-a", f"{sweeps.base}-b"))
    except _SweepStopped:
        return summarise(sweeps.workers, sweeps.allowed, None)
    return sweeps.verdict(title, outcome.lines(), outcome.comparison)
