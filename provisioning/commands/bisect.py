"""`provision bisect` / `make bisect`: the first vLLM commit that moved one figure.

The commits come from a local vLLM clone (`git rev-list --ancestry-path GOOD..BAD`, in
order, GOOD first). Each commit tested gets an image built on a host as `compare-commits`
builds it, then TRIALS sweeps of the one cell (each its own server start and signed
bundle, all kept). With N hosts a round tests N commits at once (`bench.verdict.bisect`).
A commit whose image does not build, or whose sweeps fail, is skipped and said so.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from bench.errors import BenchError, Exit, Interrupted, UsageError
from bench.settings import Settings
from bench.verdict import bisect
from bench.verdict.cells import Key, RunFigures
from bench.verdict.run_source import Verification, load_run, merge_runs
from provisioning.commands.compare import sweep_options
from provisioning.containers.engine import Engine
from provisioning.flow import signing
from provisioning.flow.host_run import HostRun
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.image import build, ensure
from provisioning.runs.targets import Target, preflight_host, resolve_target
from provisioning.runs.workers import new_run_id, run_all

FIGURES = {
    "total": "total_tok_s",
    "per-request": "per_request_tok_s",
    "ttft": "ttft_s",
    "tbt": "tbt_s",
}


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
        target: Target,
        *,
        args: argparse.Namespace,
        settings: Settings,
        base: str,
        allowed: Path,
    ) -> None:
        super().__init__(name=f"bisect-{commit[:12]}", daemon=True)
        self.commit, self.target, self.args = commit, target, args
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
        spec = build.spec_for(stage, build.commit_tag(stage, self.commit), commit=self.commit,
                              build_args=build.parse_build_args(self.args.build_arg))  # fmt: skip
        with Engine(self.target.host) as engine:
            image_id = ensure.ensure_image(engine, spec.tag, self.target.host.name, sys.stderr,
                                          source="build", build=spec)  # fmt: skip
        ctx, conc = self.args.cell
        cell_args = ("--contexts", ctx, "--concurrencies", str(conc), "--prefill-only-contexts")
        runs = []
        for trial in range(1, self.args.trials + 1):
            if self.stopped.is_set():
                return None
            opts = sweep_options(
                self.target, self.args, self.settings, self.allowed,
                image_ref=image_id, run_id=f"{self.base}-{self.commit[:12]}-{trial}",
                extra=cell_args,
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


JobFactory = Callable[[str, Target], CommitJob]


def measure_round(
    commits: Sequence[str], targets: Sequence[Target], job: JobFactory
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
    commits: Sequence[str], targets: Sequence[Target], key: Key, metric: str, job: JobFactory
) -> int:
    def many(batch: Sequence[str]) -> list[RunFigures | None]:
        out: list[RunFigures | None] = []
        for i in range(0, len(batch), len(targets)):  # GOOD and BAD on one host run serially
            out += measure_round(batch[i : i + len(targets)], targets, job)
        return out

    try:
        result = bisect.bisect(commits, many, key, metric, workers=len(targets))
    except RuntimeError as exc:  # GOOD or BAD cannot be measured
        raise UsageError(str(exc), hint="check that GOOD and BAD build and serve") from None
    print("\n".join(result.lines()))
    print(f"{len(commits)} commits, {result.rounds} round(s) with {len(targets)} host(s)")
    return int(Exit.OK if result.first_moved is not None else Exit.NOT_REPRODUCED)


def cmd_bisect(args: argparse.Namespace, settings: Settings) -> int:
    """GOOD..BAD from --vllm-repo; one commit per host per round; prints the path taken."""
    args.cell = parse_cell(args.cell)
    metric = FIGURES[args.figure]
    if args.trials < 2:
        raise UsageError("--trials must be at least 2: a verdict needs run-to-run noise")
    commits = commits_between(args.vllm_repo, args.good, args.bad)
    targets = [resolve_target(args, name) for name in inventory.parse_host_list(args.host)]
    for t in targets:
        preflight_host(t, trust_new_host=args.trust_new_host, environ=dict(os.environ))
    base = args.run_id or new_run_id()
    allowed = args.allowed_signers or signing.default_allowed_signers()

    def job(commit: str, target: Target) -> CommitJob:
        return CommitJob(commit, target, args=args, settings=settings, base=base, allowed=allowed)

    key: Key = ("decode", args.cell[0], args.cell[1])
    return run_bisection(commits, targets, key, metric, job)
