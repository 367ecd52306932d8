"""The commands behind `provision preflight`, `bench`, `compare`, `compare-commits`.

Every host is checked first; nothing starts anywhere unless every host passes. Then each
host runs its flow in its own thread (one bundle per host); Ctrl-C interrupts them all,
each brings back what finished and removes its containers; one summary at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import re
import secrets
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from pydantic import SecretStr
from tabulate import tabulate

import bench.cards
from bench import __version__, image_tag
from bench.errors import BenchError, Exit, HostCheckFailed, Interrupted, UsageError
from bench.fleet import report as fleet
from bench.fleet.view import fleet_markdown
from bench.launch_profile import LaunchProfile, load_launch_profile
from bench.settings import Settings
from bench.verdict import sequential
from bench.verdict.cells import Key, RunFigures
from bench.verdict.command import compare_exit, load_reference
from bench.verdict.compare import Comparison, Policy, compare
from bench.verdict.reproduce import Tolerances, reproduce
from bench.verdict.run_source import Verification, load_run, merge_runs
from bench.verdict.views import compare_markdown, reproduce_markdown
from provisioning import build, containers, cuda_compat, hosts, image, preflight, signing
from provisioning.build import BuildSpec
from provisioning.containers import Engine
from provisioning.flow import HostRun, scope_of
from provisioning.remote import Remote
from provisioning.requirements import Requirements, load_requirements
from provisioning.run_options import Options, Outcome, Secrets

DEFAULT_PROFILE = "published"
CARDS_DIR = Path(bench.cards.__file__).parent
VLLM_IMAGE = "bench-vllm:73a5831127a9"


@dataclass(frozen=True)
class Target:
    host: hosts.Host
    profile: LaunchProfile
    requirements: Requirements
    image_ref: str


def image_cuda(profile: LaunchProfile, image_ref: str) -> cuda_compat.CudaRequirement | None:
    """What the image needs from the driver, before the host has it: the image's own config
    when it is on this machine, else the Dockerfile it would be built from."""
    if profile.gpus == 0:
        return None
    env = containers.local_image_env(image_ref)
    if env is not None:
        version = cuda_compat.required_cuda(env)
        if version is not None:
            return cuda_compat.CudaRequirement(version, f"NVIDIA_REQUIRE_CUDA of {image_ref} here")
    return cuda_compat.from_dockerfile(build.DOCKERFILE)


def default_image(profile: LaunchProfile) -> str:
    """The tag docker/build.sh gives the profile's image target."""
    return f"bench:{image_tag(__version__)}" if profile.image == "bench" else VLLM_IMAGE


def resolve_target(args: argparse.Namespace, name: str) -> Target:
    inventory = hosts.load_inventory(args.inventory)
    host = hosts.resolve(name, inventory=inventory)
    profile = load_launch_profile(args.profile or host.profile or DEFAULT_PROFILE)
    image_ref = args.image or default_image(profile)
    req = load_requirements(
        profile.name,
        profile.gpus,
        image_ref=image_ref,
        image_cuda=image_cuda(profile, image_ref),
        model_revision=profile.model_revision,
        download_weights=not getattr(args, "no_weights_download", False),
    )
    return Target(host, profile, req, image_ref)


def build_spec(args: argparse.Namespace, target: Target) -> BuildSpec | None:
    """The build of the profile's stage that --image-source auto|build would run."""
    if args.image_source == "stream":
        return None
    extra = build.parse_build_args(args.build_arg)
    return build.spec_for(target.profile.image, target.image_ref, commit=None, build_args=extra)


def hf_token(environ: dict[str, str]) -> SecretStr | None:
    value = environ.get("HF_TOKEN") or environ.get("HUGGING_FACE_HUB_TOKEN")
    return SecretStr(value) if value else None


def preflight_host(
    target: Target, *, trust_new_host: bool, environ: dict[str, str]
) -> preflight.Report:
    """Connect, run every check, print the table; raises HostCheckFailed when one fails."""
    host, req = target.host, target.requirements
    remote = Remote(host, trust_new_host=trust_new_host)
    try:
        remote.connect()
    except HostCheckFailed as exc:
        print(preflight.ssh_failed_report(host.name, exc).table())
        raise
    try:
        report = preflight.run_preflight(
            remote,
            req,
            host=host.name,
            ssh_found=f"{host.address}, host key {remote.host_key_fingerprint}",
            model_cache=host.model_cache,
            caps=remote,
            sessions_needed=containers.SDK_SESSIONS,
            hf_token_present=hf_token(environ) is not None,
        )
    finally:
        remote.close()
    report.checks.insert(2, sdk_check(host))
    print(f"preflight of {host.name} for launch profile {req.profile}:")
    print(report.table())
    report.raise_if_failed()
    return report


def sdk_check(host: hosts.Host) -> preflight.Check:
    """The containers are driven through the Docker SDK's own SSH connection: try it."""
    name = "docker over ssh"
    try:
        with Engine(host) as engine:
            return preflight.Check(
                name, preflight.Status.OK, f"Docker SDK: {engine.server_version}"
            )
    except BenchError as exc:
        return preflight.Check(
            name,
            preflight.Status.FAIL,
            exc.message,
            "the Docker SDK reads only ~/.ssh/config (IdentityFile) and ~/.ssh/known_hosts: "
            "put the host's key and host key there",
        )


def cmd_preflight(args: argparse.Namespace, settings: Settings) -> int:
    names = hosts.parse_host_list(args.host)
    failed: list[str] = []
    for name in names:
        target = resolve_target(args, name)
        try:
            preflight_host(target, trust_new_host=args.trust_new_host, environ=dict(os.environ))
        except HostCheckFailed as exc:
            if len(names) == 1:
                raise
            print(f"provision: {exc.one_line()}", file=sys.stderr)
            failed.append(name)
    if failed:
        raise HostCheckFailed(f"preflight failed on {', '.join(failed)}")
    return int(Exit.OK)


def cmd_clean(args: argparse.Namespace, settings: Settings) -> int:
    """Remove the containers of one run (--run-id) or of every run on the hosts.

    For after a crash or `kill -9` of the orchestrator, which cannot clean up itself.
    """
    check_run_id(args.run_id)
    inventory = hosts.load_inventory(args.inventory)
    for name in hosts.parse_host_list(args.host):
        host = hosts.resolve(name, inventory=inventory)
        with Remote(host, trust_new_host=args.trust_new_host):  # checks the host key first
            pass
        with Engine(host) as engine:
            scopes = [scope_of(args.run_id, host.name)] if args.run_id else sorted(engine.run_ids())
            removed = [n for scope in scopes for n in engine.remove_run(scope)]
        print(f"{host.name}: removed {len(removed)} container(s){': ' if removed else ''}"
              f"{', '.join(removed)}")  # fmt: skip
    return int(Exit.OK)


def new_run_id() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%S-") + secrets.token_hex(3)


# A run id names a local folder, an archive and containers: letters, digits, '.', '_', '-',
# starting with a letter or digit (so never '.', '..', a path or an option), at most 64.
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_run_id(run_id: str | None) -> str | None:
    """--run-id as given, or a one-line UsageError before anything runs (`..` as a run
    id once removed the whole local results folder)."""
    if run_id is None:
        return None
    if not _RUN_ID.fullmatch(run_id) or ".." in run_id:
        raise UsageError(
            f"--run-id {run_id[:80]!r} is not a run id",
            hint="use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or "
            "digit, without '..' or '/'",
        )
    return run_id


class _Worker(threading.Thread):
    def __init__(self, run: HostRun) -> None:
        super().__init__(name=f"host-{run.host.name}", daemon=True)
        self.host_run = run
        self.outcome: Outcome = run.outcome
        self.error: BenchError | None = None
        # Waiting uses this, not join(): a join() interrupted by Ctrl-C can leave a live
        # thread reported as stopped (CPython gh-90882).
        self.done = threading.Event()

    def run(self) -> None:
        try:
            self.outcome = self.host_run.run()
        except BenchError as exc:
            self.error = exc
        finally:
            self.host_run.remote.close()
            self.done.set()

    def stop(self, *, hard: bool) -> None:
        self.host_run.interrupt(hard=hard)


class Stoppable(Protocol):
    """A thread `run_all` waits for: `done` when it ended, `stop` on Ctrl-C."""

    done: threading.Event

    def start(self) -> None: ...

    def stop(self, *, hard: bool) -> None: ...


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    environ = dict(os.environ)
    check_run_id(args.run_id)
    targets = [resolve_target(args, name) for name in hosts.parse_host_list(args.host)]
    for target in targets:  # nothing starts unless every host passes
        preflight_host(target, trust_new_host=args.trust_new_host, environ=environ)
    run_id = args.run_id or new_run_id()
    bench_args = tuple(args.bench_args)
    allowed = args.allowed_signers or signing.default_allowed_signers()
    workers = []
    for t in targets:
        opts = Options(
            profile=t.profile,
            requirements=t.requirements,
            image_ref=t.image_ref,
            run_id=run_id,
            results_dir=args.results,
            allowed_signers=allowed,
            bench_args=bench_args,
            keep=args.keep,
            secrets=Secrets(api_key=settings.api_key, hf_token=hf_token(environ)),
            image_source=args.image_source,
            build=build_spec(args, t),
        )
        workers.append(_Worker(HostRun(t.host, opts, remote=Remote(t.host))))
    run_all(workers)
    card = None if args.no_verdict else args.card or _default_card(targets[0].profile)
    return _summarise(workers, allowed, card, fleet_of=True)


def run_all(workers: Sequence[Stoppable]) -> bool:
    """Start the workers and wait; Ctrl-C interrupts every one. True when interrupted.

    A second Ctrl-C kills the sweeps outright; clean-up still runs in every worker.
    """
    for w in workers:
        w.start()
    interrupted = False
    for w in workers:
        while not w.done.is_set():
            try:
                w.done.wait(timeout=0.2)
            except KeyboardInterrupt:
                for each in workers:
                    each.stop(hard=interrupted)
                interrupted = True
    return interrupted


def cmd_compare(args: argparse.Namespace, settings: Settings) -> int:
    """Two images on one host, one sweep after the other, then `bench compare` A vs B."""
    check_run_id(args.run_id)
    names = hosts.parse_host_list(args.host)
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
    names = hosts.parse_host_list(args.host)
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
                image.ensure_image(engine, spec.tag, target.host.name, sys.stderr,
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
class _Sweeps:
    """The sweeps of one compare on one host, each a HostRun with its own signed bundle."""

    args: argparse.Namespace
    settings: Settings
    target: Target
    images: tuple[str, str]
    base: str
    allowed: Path
    numbered: bool  # run ids <base>-a1, -b1 ... (else <base>-a, -b)

    def __post_init__(self) -> None:
        self.workers: list[_Worker] = []

    def sweep(self, label: str, trial: int, extra: tuple[str, ...] = ()) -> RunFigures | None:
        """One sweep of side `label`, its bundle verified and read; None when it failed or
        was interrupted (the summary says which)."""
        opts = sweep_options(
            self.target, self.args, self.settings, self.allowed,
            image_ref=self.images[0] if label == "a" else self.images[1],
            run_id=f"{self.base}-{label}{trial}" if self.numbered else f"{self.base}-{label}",
            extra=extra,
        )  # fmt: skip
        worker = _Worker(HostRun(self.target.host, opts, remote=Remote(self.target.host)))
        stopped = run_all([worker]) or worker.error is not None
        self.workers.append(worker)
        if stopped or worker.outcome.local_dir is None:
            return None
        return load_run(worker.outcome.local_dir, Verification((self.allowed,)))

    def verdict(self, title: str, how: list[str], result: Comparison) -> int:
        """The sweeps' summary, how they were ordered, their host time, then B against A."""
        _summarise(self.workers, self.allowed, None)
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
    sweeps = _Sweeps(
        args, settings, target, images, args.run_id or new_run_id(),
        args.allowed_signers or signing.default_allowed_signers(),
        numbered=trials > 1 or order == "sequential",
    )  # fmt: skip
    if order == "sequential":
        return _sequential(sweeps, title)
    sides: dict[str, list[RunFigures]] = {"a": [], "b": []}
    done = {"a": 0, "b": 0}
    for label in sweep_order(trials, order):
        done[label] += 1
        figures = sweeps.sweep(label, done[label])
        if figures is None:
            return _summarise(sweeps.workers, sweeps.allowed, None)
        sides[label].append(figures)
    a = merge_runs(sides["a"], f"{sweeps.base}-a")
    b = merge_runs(sides["b"], f"{sweeps.base}-b")
    sequence = " ".join(x.upper() for x in sweep_order(trials, order))
    drift = ""
    if order == "blocked" and trials > 1:
        drift = " (blocked: drift over time is NOT controlled and may read as a change)"
    return sweeps.verdict(title, [f"{trials} sweep(s) a side, order {sequence}{drift}"],
                          compare(a, b, Policy()))  # fmt: skip


def _sequential(sweeps: _Sweeps, title: str) -> int:
    """The sequential design (`bench.verdict.sequential`): trials go to open cells only."""

    def measure(side: sequential.Side, trial: int, cells: frozenset[Key] | None) -> RunFigures:
        figures = sweeps.sweep(side, trial, sequential.run_args(cells))
        if figures is None:
            raise _SweepStopped
        return figures

    try:
        outcome = sequential.run(measure, Policy(), names=(f"{sweeps.base}-a", f"{sweeps.base}-b"))
    except _SweepStopped:
        return _summarise(sweeps.workers, sweeps.allowed, None)
    return sweeps.verdict(title, outcome.lines(), outcome.comparison)


def _default_card(profile: LaunchProfile) -> Path | None:
    """The profile's published card as shipped in bench/cards/, if it names one."""
    path = CARDS_DIR / profile.card if profile.card else None
    return path if path is not None and path.is_file() else None


def _verdict(bundle: Path, card: Path, allowed: Path) -> Exit:
    """Print the reproduce verdict of one bundle against the card; its exit code (0 when
    reproduced; 1 not, 9 partial, 10 settings differ, 11 inconclusive)."""
    ours = load_run(bundle, Verification((allowed,)))
    result = reproduce(ours, load_reference(card), Tolerances())
    print(reproduce_markdown(result))
    return result.exit_code


class _Ran(Protocol):
    """What the summary reads of a host's (or a Slurm node's) run."""

    @property
    def outcome(self) -> Outcome: ...

    @property
    def error(self) -> BenchError | None: ...


def _fleet_report(done: Sequence[tuple[str, Path]], allowed: Path) -> None:
    """Several hosts or nodes measured the same sweep: per cell and figure the value on
    every node, and (with 3 or more) the nodes that stand out (`bench fleet`)."""
    try:
        nodes = fleet.load_nodes(
            [d for _, d in done], Verification((allowed,)), names=[h for h, _ in done]
        )
    except BenchError as exc:
        print(f"fleet report: {exc.one_line()}", file=sys.stderr)
        return
    print("\n" + fleet_markdown(fleet.fleet(nodes, fleet.Rule())))
    if len(nodes) < fleet.MIN_NODES:
        print(f"(with {len(nodes)} nodes no node can be told to stand out: that needs "
              f"{fleet.MIN_NODES} or more)")  # fmt: skip


def _summarise(
    workers: Sequence[_Ran], allowed: Path, card: Path | None, *, fleet_of: bool = False
) -> int:
    """The table of runs, each bundle's tables, the fleet report when `fleet_of` several
    hosts measured the same sweep, each verdict against the card; the exit code."""
    rows = []
    for w in workers:
        o = w.outcome
        state = (
            "interrupted" if isinstance(w.error, Interrupted)
            else "failed" if w.error is not None
            else "complete" if o.complete else "partial"
        )  # fmt: skip
        where = str(o.local_dir) if o.local_dir else "-"
        took = sum(o.timings_s.values())
        steps = ", ".join(f"{k} {v:.1f}" for k, v in o.timings_s.items())
        rows.append((o.host, o.run_id, state, where, f"{took:.1f}", steps))
    print()
    print(tabulate(rows, headers=("host", "run", "state", "bundle", "s", "time per step (s)")))
    for w in workers:
        d = w.outcome.local_dir
        if d is not None and (d / "tables.md").is_file():
            print(f"\n## {w.outcome.host}: {d}\n")
            print((d / "tables.md").read_text())
            print(f"verified with {allowed}")
    done = [(w.outcome.host, w.outcome.local_dir) for w in workers if w.outcome.local_dir]
    if fleet_of and len(done) >= 2:
        _fleet_report(done, allowed)
    verdicts: list[Exit] = []
    for w in workers:
        d = w.outcome.local_dir
        if card is not None and d is not None and w.error is None:
            print(f"\n## {w.outcome.host}: against {card}\n")
            verdicts.append(_verdict(d, card, allowed))
    for w in workers:
        if w.error is not None:
            print(f"provision: {w.outcome.host}: {w.error.one_line()}", file=sys.stderr)
    errors = [w.error for w in workers if w.error is not None]
    if any(isinstance(e, Interrupted) for e in errors):
        return int(Exit.INTERRUPTED)
    if errors:
        return int(errors[0].exit_code)
    # The first host's verdict that is not a "yes" decides (1 not reproduced before 9/10/11).
    worst = sorted((v for v in verdicts if v != Exit.OK), key=lambda v: v != Exit.NOT_REPRODUCED)
    return int(worst[0]) if worst else int(Exit.OK)
