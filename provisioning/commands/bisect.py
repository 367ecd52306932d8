"""`provision bisect` / `make bisect`: the first vLLM commit that moved one figure.

The commits come from a local vLLM clone (`git rev-list --ancestry-path GOOD..BAD`, in
order, GOOD first). Each commit tested gets an image built on a host as `compare-commits`
builds it, then TRIALS sweeps of the one cell (each its own server start and signed
bundle, all kept). With N hosts a round tests N commits at once (`bench.verdict.bisect`).
A commit whose image does not build, or whose sweeps fail, is skipped and said so. Every
commit's answer fingerprint is compared with GOOD's before its figure: one that answers
differently is not judged on the figure, and when BAD does the search names the first commit
that answers differently instead, unless `--accept answers` (bench.verdict.bisect).
The arguments become a BisectChoice (and a TargetChoice) once, in the handler here.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.command_line import SubParsers
from bench.errors import BenchError, Exit, Interrupted, UsageError
from bench.history import recording
from bench.history.database import Target
from bench.settings import Settings
from bench.verdict import bisect
from bench.verdict import settings as settings_mod
from bench.verdict.cells import Key, RunFigures
from bench.verdict.run_source import Verification, load_run, merge_runs
from provisioning.commands.compare import sweep_options
from provisioning.commands.options import (
    SWEEP_ARGS_EPILOG,
    add_build_args,
    add_common,
    history_choice,
    target_choice,
)
from provisioning.containers.engine import DockerEngine
from provisioning.flow import signing
from provisioning.flow.host_run import HostRun
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.image import build, ensure
from provisioning.runs.targets import HostTarget, TargetChoice, preflight_host, resolve_target
from provisioning.runs.workers import new_run_id, run_all

FIGURES = {
    "total": "total_tok_s",
    "per-request": "per_request_tok_s",
    "ttft": "ttft_s",
    "tbt": "tbt_s",
}


def register(sub: SubParsers) -> None:
    p = sub.add_parser(
        "bisect",
        help="the first vLLM commit between GOOD and BAD that moved one cell's figure",
        epilog=SWEEP_ARGS_EPILOG + ". Exit 0: a culprit "
        "(or the skipped suspects) named; 1: BAD is like GOOD (within ±5 %%); 11: BAD's change "
        "is not resolved (more --trials would decide).",
    )
    add_common(p)
    p.add_argument("--good", required=True, help="a vLLM commit with the old figure")
    p.add_argument("--bad", required=True, help="a later vLLM commit with the moved figure")
    p.add_argument(
        "--vllm-repo",
        type=Path,
        required=True,
        help="a local vLLM clone holding both commits (for the commit list)",
    )
    p.add_argument("--cell", required=True, help="CONCURRENCYxCONTEXT, e.g. 64x8K")
    p.add_argument("--figure", choices=tuple(FIGURES), default="total")
    p.add_argument("--trials", type=int, default=3, help="sweeps per commit (separate bundles)")
    p.add_argument(
        "--accept",
        action="append",
        default=[],
        choices=(settings_mod.ANSWERS,),
        help="answers: judge a commit's figure even where its answers differ from GOOD's "
        "(else such a commit is not judged on the figure)",
    )
    p.add_argument("--results", type=Path, default=Path("results"), help="local results folder")
    p.add_argument("--run-id", default=None, help="bundles are <run-id>-<commit>-<trial>")
    p.add_argument("--allowed-signers", type=Path, default=None)
    add_build_args(p)
    recording.add_args(p)
    p.set_defaults(func=_bisect)


@dataclass(frozen=True)
class BisectChoice:
    """What the command line chose for the sweeps of each commit."""

    cell: tuple[str, int]  # (context, concurrency), from parse_cell
    trials: int = 3
    results: Path = Path("results")
    build_args: tuple[str, ...] = ()
    bench_args: tuple[str, ...] = ()
    history: Target | None = None  # where each sweep's bundle is recorded (None: nowhere)
    accept_answers: bool = False  # --accept answers: figures judged where answers differ


def parse_cell(text: str) -> tuple[str, int]:
    """'64x8K' (concurrency x context, as the make variable reads) -> ('8K', 64)."""
    conc, sep, ctx = text.lower().partition("x")
    if not sep or not conc.isdigit() or int(conc) <= 0 or not ctx:
        raise UsageError(f"CELL={text!r} is not CONCURRENCYxCONTEXT", hint="e.g. CELL=64x8K")
    return ctx.upper(), int(conc)


def commits_between(repo: Path, good: str, bad: str) -> list[str]:
    """GOOD, then every commit on the ancestry path to BAD, oldest first."""
    good, bad = build.valid_commit(good, "GOOD"), build.valid_commit(bad, "BAD")
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), "rev-list", "--reverse", "--ancestry-path", f"{good}..{bad}"],
            capture_output=True, text=True, check=True, timeout=60,
        ).stdout  # fmt: skip
    except FileNotFoundError:
        raise UsageError("git is not installed", hint="apt-get install git") from None
    except subprocess.CalledProcessError as exc:
        first = (exc.stderr or "").strip().splitlines()[:1]
        raise UsageError(
            f"cannot list {good}..{bad} in {repo}: {first[0] if first else 'git failed'}",
            hint="VLLM_REPO must be a vLLM clone holding both commits (git fetch)",
        ) from None
    path = out.split()
    if not path:
        raise UsageError(f"{bad} does not descend from {good}", hint="swap GOOD and BAD?")
    return [good, *path]


class CommitJob(threading.Thread):
    """One commit on one host: its image, then TRIALS sweeps of the cell."""

    def __init__(
        self,
        commit: str,
        target: HostTarget,
        *,
        choice: BisectChoice,
        settings: Settings,
        base: str,
        allowed: Path,
    ) -> None:
        super().__init__(name=f"bisect-{commit[:12]}", daemon=True)
        self.commit, self.target, self.choice = commit, target, choice
        self.settings, self.base, self.allowed = settings, base, allowed
        self.figures: RunFigures | None = None
        self.note = ""
        self.current: HostRun | None = None
        self.done = threading.Event()
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            self.figures = self._measure()
        except BenchError as exc:
            self.note = exc.one_line()
        finally:
            self.done.set()

    def stop(self, *, hard: bool) -> None:
        self.stopped.set()
        if self.current is not None:
            self.current.interrupt(hard=hard)

    def _measure(self) -> RunFigures | None:
        stage = self.target.profile.image
        extra = build.parse_build_args(self.choice.build_args)
        spec = build.spec_for(stage, build.commit_tag(stage, self.commit), commit=self.commit,
                              build_args=extra)  # fmt: skip
        with DockerEngine(self.target.host) as engine:
            image_id = ensure.ensure_image(engine, spec.tag, self.target.host.name, sys.stderr,
                                           source="build", build=spec)  # fmt: skip
        ctx, conc = self.choice.cell
        cell_args = ("--contexts", ctx, "--concurrencies", str(conc), "--prefill-only-contexts")
        runs = []
        for trial in range(1, self.choice.trials + 1):
            if self.stopped.is_set():
                return None
            opts = sweep_options(
                self.target, self.settings, self.allowed,
                results=self.choice.results, bench_args=self.choice.bench_args,
                image_ref=image_id, run_id=f"{self.base}-{self.commit[:12]}-{trial}",
                extra=cell_args, history=self.choice.history,
            )  # fmt: skip
            self.current = HostRun(self.target.host, opts, remote=Remote(self.target.host))
            try:
                outcome = self.current.run()
            finally:
                self.current.remote.close()
            if outcome.local_dir is None:
                self.note = f"sweep {trial} brought back no bundle"
                return None
            runs.append(load_run(outcome.local_dir, Verification((self.allowed,))))
        return merge_runs(runs, self.commit)


JobFactory = Callable[[str, HostTarget], CommitJob]


def measure_round(
    commits: Sequence[str], targets: Sequence[HostTarget], job: JobFactory
) -> list[RunFigures | None]:
    """One commit per host, all at once; Ctrl-C stops them all and ends the bisection."""
    jobs = [job(c, t) for c, t in zip(commits, targets, strict=False)]
    interrupted = run_all(jobs)
    if interrupted:
        raise Interrupted("bisection interrupted; the bundles made so far are kept")
    for j in jobs:
        if j.figures is None:
            print(f"bisect: {j.commit} skipped: {j.note or 'not measured'}", file=sys.stderr)
    return [j.figures for j in jobs]


def run_bisection(
    commits: Sequence[str],
    targets: Sequence[HostTarget],
    key: Key,
    metric: str,
    job: JobFactory,
    *,
    accept_answers: bool = False,
) -> int:
    def many(batch: Sequence[str]) -> list[RunFigures | None]:
        out: list[RunFigures | None] = []
        for i in range(0, len(batch), len(targets)):  # GOOD and BAD on one host run serially
            out += measure_round(batch[i : i + len(targets)], targets, job)
        return out

    try:
        result = bisect.bisect(
            commits, many, key, metric, workers=len(targets), accept_answers=accept_answers
        )
    except RuntimeError as exc:  # GOOD or BAD cannot be measured
        raise UsageError(str(exc), hint="check that GOOD and BAD build and serve") from None
    print("\n".join(result.lines()))
    print(f"{len(commits)} commits, {result.rounds} round(s) with {len(targets)} host(s)")
    if result.first_moved is not None:
        return int(Exit.OK)
    if result.bad_outcome == "not resolved":
        return int(Exit.INCONCLUSIVE)
    return int(Exit.NOT_REPRODUCED)


def _bisect(args: argparse.Namespace, settings: Settings) -> int:
    """GOOD..BAD from --vllm-repo; one commit per host per round; prints the path taken."""
    cell = parse_cell(args.cell)
    if args.trials < 2:
        raise UsageError("--trials must be at least 2: a verdict needs run-to-run noise")
    commits = commits_between(args.vllm_repo, args.good, args.bad)
    choice = BisectChoice(
        cell=cell,
        trials=args.trials,
        results=args.results,
        build_args=tuple(args.build_arg),
        bench_args=tuple(args.bench_args),
        history=history_choice(args, settings),
        accept_answers=settings_mod.ANSWERS in args.accept,
    )
    return bisect_commits(
        commits, choice, target_choice(args), inventory.parse_host_list(args.host), settings,
        metric=FIGURES[args.figure], trust_new_host=args.trust_new_host,
        run_id=args.run_id, allowed_signers=args.allowed_signers,
    )  # fmt: skip


def bisect_commits(
    commits: Sequence[str],
    choice: BisectChoice,
    target: TargetChoice,
    names: Sequence[str],
    settings: Settings,
    *,
    metric: str,
    trust_new_host: bool,
    run_id: str | None,
    allowed_signers: Path | None,
) -> int:
    targets = [resolve_target(target, name) for name in names]
    for t in targets:
        preflight_host(t, trust_new_host=trust_new_host, environ=dict(os.environ))
    base = run_id or new_run_id()
    allowed = allowed_signers or signing.default_allowed_signers()

    def job(commit: str, target: HostTarget) -> CommitJob:
        return CommitJob(commit, target, choice=choice, settings=settings, base=base,
                         allowed=allowed)  # fmt: skip

    key: Key = ("decode", choice.cell[0], choice.cell[1])
    return run_bisection(commits, targets, key, metric, job, accept_answers=choice.accept_answers)
