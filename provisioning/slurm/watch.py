"""A submitted Slurm job, watched from the submitter (provisioning.slurm.submit) until it
ends, then collected: each node's signed bundle into results/<node>/<run id>/, verified,
and recorded in the history when one is configured (bench.history.recording).

While it runs, the job's state (pending with its reason, running) and each node's cells
done (read from the run directories on the shared filesystem) are printed when they change.
Ctrl-C: the tasks get SIGINT (`scancel --signal=INT`) and keep their finished cells; a job
still pending, one not ended INTERRUPT_GRACE_S later, or a second Ctrl-C is cancelled
outright. A node without a bundle is a failed row saying why.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from bench.errors import BenchError, Interrupted, RunFailed
from bench.history import recording
from bench.history.database import Target
from provisioning.flow import signing
from provisioning.flow.host_run import scope_of
from provisioning.flow.options import HostOutcome
from provisioning.flow.pull_back import open_and_verify
from provisioning.slurm.jobs import JobState, Slurm
from provisioning.slurm.node import (
    NODES_DIR,
    OUTCOME_FILE,
    SIGNERS_FILE,
    NodeOutcome,
    node_dir_name,
)
from provisioning.slurm.shared_dir import SharedDir

INTERRUPT_GRACE_S = 180.0
POLL_S = 2.0


@dataclass
class NodeResult:
    """One node's part, as summarise reads a host's (outcome + error)."""

    outcome: HostOutcome
    error: BenchError | None = None


def cells_done(run_dir: SharedDir, run_id: str) -> dict[str, str]:
    """node → "done/planned" decode cells, from each node's results.json (rewritten after
    every cell); a node whose sweep has not started yet is absent."""
    found: dict[str, str] = {}
    for name in run_dir.folders(NODES_DIR):
        text = run_dir.read(NODES_DIR, name, scope_of(run_id, name), "results.json")
        try:
            doc = json.loads(text) if text else None
        except ValueError:
            doc = None
        if not isinstance(doc, dict):
            continue
        planned = sum(1 for c in doc.get("plan", {}).get("cells", []) if c.get("run"))
        planned *= int(doc.get("settings", {}).get("trials", 1))
        found[name] = f"{len(doc.get('cells', []))}/{planned}"
    return found


@dataclass
class Watch:
    """The job, watched from here: its state and each node's cells, printed when they change."""

    slurm: Slurm
    job_id: str
    run_dir: SharedDir
    run_id: str
    last: str = ""

    def wait(self) -> tuple[JobState | None, bool]:
        """Until the job ends: (its last state, interrupted); Ctrl-C stops it (module doc)."""
        try:
            return self._until_finished(None), False
        except KeyboardInterrupt:
            pass
        state = self.slurm.state(self.job_id)
        if state is None or state.pending:
            print(f"\ninterrupted: cancelling job {self.job_id}", file=sys.stderr, flush=True)
            self.slurm.cancel(self.job_id)
        else:
            print(
                f"\ninterrupted: stopping job {self.job_id}'s tasks (scancel --signal=INT); "
                "they keep their finished cells; Ctrl-C again to cancel it outright",
                file=sys.stderr,
                flush=True,
            )
            self.slurm.signal(self.job_id, "INT")
        try:
            return self._until_finished(time.monotonic() + INTERRUPT_GRACE_S), True
        except (KeyboardInterrupt, TimeoutError):
            print(f"cancelling job {self.job_id} (scancel)", file=sys.stderr, flush=True)
            self.slurm.cancel(self.job_id)
        return self._until_finished(None), True

    def _until_finished(self, deadline: float | None) -> JobState | None:
        while True:
            state = self.slurm.state(self.job_id)
            cells = cells_done(self.run_dir, self.run_id)
            line = (
                state.describe(self.job_id) if state
                else f"job {self.job_id} no longer known to Slurm"
            )  # fmt: skip
            if cells:
                line += "; cells done: " + ", ".join(f"{n} {c}" for n, c in cells.items())
            if line != self.last:
                print(line, file=sys.stderr, flush=True)
                self.last = line
            if state is None or state.finished:
                return state
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError
            time.sleep(POLL_S)

    def collect(
        self,
        state: JobState | None,
        results_dir: Path,
        allowed: Path,
        nodes: int,
        interrupted: bool,
        *,
        history: Target | None = None,
    ) -> list[NodeResult]:
        """Every node's bundle into RESULTS_DIR/<node>/<run id>/, verified and recorded in
        HISTORY (when one is configured); a node without one is a failed row saying why."""
        names = set(self.run_dir.folders(NODES_DIR))
        names |= {node_dir_name(n) for n in self.slurm.hostnames(state.nodes)} if state else set()
        out = [self._collect_one(name, results_dir, allowed, history) for name in sorted(names)]
        for missing in range(len(out), nodes):  # nodes never given a task (cancelled early)
            why: BenchError = (
                Interrupted("interrupted before a node ran this task of the job") if interrupted
                else RunFailed("no node ran this task of the job")
            )  # fmt: skip
            out.append(
                NodeResult(HostOutcome(host=f"(node {missing + 1})", run_id=self.run_id), why)
            )
        return out

    def _collect_one(
        self, name: str, results_dir: Path, allowed: Path, history: Target | None
    ) -> NodeResult:
        run_id = self.run_id
        result = NodeResult(HostOutcome(host=name, run_id=run_id))
        log = self.run_dir.join(NODES_DIR, "task-*.log")
        try:
            found = NodeOutcome.model_validate_json(
                self.run_dir.read(NODES_DIR, name, OUTCOME_FILE) or ""
            )
        except ValidationError:
            result.error = RunFailed(
                f"node {name} left no outcome: its task was killed or never started; see {log}"
            )
            return result
        result.outcome.timings_s = dict(found.timings_s)
        result.outcome.image_id = found.image_id
        if found.archive and self.run_dir.is_file(found.archive):
            local = results_dir / name / f"{run_id}.tar.gz"
            try:
                self._trust(name, allowed)
                self.run_dir.fetch(found.archive, local)
                result.outcome.archive = local
                result.outcome.complete = open_and_verify(local, run_id, allowed, [])
                recording.record(history, local, allowed)
            except BenchError as exc:
                result.error = exc
                return result
            finally:
                root = local.with_name(run_id)
                result.outcome.local_dir = root if root.is_dir() else None
        if found.state == "interrupted":
            result.error = Interrupted(f"interrupted on {name}")
        elif found.state in ("failed", "running"):
            what = found.error or "its task ended without saying why"
            if found.state == "running":
                what = f"its task was killed before it finished (see {log})"
            result.error = RunFailed(f"{name}: {what}")
        return result

    def _trust(self, node: str, allowed: Path) -> None:
        """The node's public key (its allowed_signers line, on the shared filesystem) into
        the local allowed-signers file, as the host flow trusts a host's key read over SSH."""
        text = self.run_dir.read(NODES_DIR, node, SIGNERS_FILE)
        if text is None:
            raise RunFailed(f"node {node} left no public key in the run directory")
        for line in text.splitlines():
            fields = line.split()
            if len(fields) >= 4 and fields[0] == signing.principal(node):
                signing.trust_locally(f"{fields[2]} {fields[3]}", node, allowed)
                return
        raise RunFailed(f"node {node}'s {SIGNERS_FILE} holds no key for {signing.principal(node)}")
