"""A Slurm cluster through its own commands: sbatch, squeue, scontrol, sacct, scancel.

The commands run through a Shell (provisioning.hosts.remote): here on this machine when sbatch
is on PATH (provisioning.hosts.local.LocalShell), or on a login node over SSH
(provisioning.hosts.remote.Remote).

One job per fleet run: one task per node (`--ntasks-per-node 1`), whole nodes
(`--exclusive`), the launch profile's GPUs per node (`--gpus-per-node`, left out for a
profile without GPUs), a time limit (`--time`, minutes) the caller sizes from the sweep's
estimate. The job's state is read with squeue while the job is known to it, then with
scontrol (until MinJobAge passes), then with sacct (only where accounting is set up).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from bench.errors import RunFailed, UsageError
from provisioning.hosts.shell import CommandResult, Shell

PENDING = frozenset({"PENDING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "RESV_DEL_HOLD"})
FINISHED = frozenset(
    {
        "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
        "PREEMPTED", "BOOT_FAIL", "DEADLINE", "REVOKED", "SPECIAL_EXIT",
    }
)  # fmt: skip


@dataclass(frozen=True)
class JobRequest:
    """What is asked of the scheduler for one fleet run."""

    name: str
    partition: str
    nodes: int
    time_min: int
    gpus_per_node: int  # 0: not asked (a profile without GPUs)
    workdir: str  # where the tasks start (the checkout, on the shared filesystem)
    output: str  # the batch step's own output (%j: the job id)
    account: str | None = None

    def sbatch_argv(self, script: str) -> list[str]:
        if self.nodes < 1:
            raise UsageError(f"--nodes must be at least 1, got {self.nodes}")
        argv = [
            "sbatch", "--parsable", "--job-name", self.name, "--partition", self.partition,
            "--nodes", str(self.nodes), "--ntasks-per-node", "1", "--exclusive",
            "--time", str(self.time_min), "--chdir", self.workdir, "--output", self.output,
        ]  # fmt: skip
        if self.gpus_per_node:
            argv += ["--gpus-per-node", str(self.gpus_per_node)]
        if self.account:
            argv += ["--account", self.account]
        return [*argv, script]


def batch_script(node_command: list[str], log_pattern: str) -> str:
    """The job's script: one step, one task per node, each running NODE_COMMAND; a task that
    fails does not stop the others (--kill-on-bad-exit=0); each task's output in its own
    file (LOG_PATTERN, %t = the task's number: %N would be the machine's hostname, the same
    for two nodes on one machine as in the tests)."""
    srun = [
        "srun", "--ntasks-per-node=1", "--kill-on-bad-exit=0", f"--output={log_pattern}",
        *node_command,
    ]  # fmt: skip
    return (
        "#!/bin/bash\n"
        "# Written by `python -m provisioning bench --slurm`: one task per node runs the\n"
        "# single-host flow on its node (provisioning/slurm/node.py).\n"
        f"{shlex.join(srun)}\n"
    )


@dataclass(frozen=True)
class JobState:
    state: str  # Slurm's own word: PENDING, RUNNING, COMPLETED, CANCELLED, ...
    reason: str = ""  # why pending (Resources, Priority, ...) or why it ended
    nodes: str = ""  # Slurm's node list (bench-n[1-2])
    exit_code: str = ""

    @property
    def pending(self) -> bool:
        return self.state in PENDING

    @property
    def finished(self) -> bool:
        return self.state.split()[0] in FINISHED

    def describe(self, job_id: str) -> str:
        text = f"job {job_id} {self.state}"
        if self.pending:
            return text + (f" ({self.reason})" if self.reason and self.reason != "None" else "")
        if self.nodes and self.nodes != "(null)":
            text += f" on {self.nodes}"
        if self.finished and self.exit_code:
            text += f", exit {self.exit_code}"
        return text


class Slurm:
    """The scheduler's commands, run through SHELL (this machine, or a login node)."""

    def __init__(self, shell: Shell) -> None:
        self.shell = shell

    def _run(self, argv: list[str], *, check: bool = False) -> CommandResult:
        return self.shell.run(shlex.join(argv), check=check, timeout_s=60, idempotent=False)

    def available(self) -> str | None:
        """None when sbatch is there; else what is missing."""
        found = self.shell.run("command -v sbatch squeue scancel scontrol")
        return None if found.ok else f"no sbatch/squeue/scancel/scontrol on {self.shell.host.name}"

    def submit(self, request: JobRequest, script: str) -> str:
        res = self._run(request.sbatch_argv(script))
        if not res.ok:
            said = (res.stderr.strip() or res.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise RunFailed(
                f"sbatch refused the job: {said[0]}",
                hint="check the partition, account and limits: `sinfo`, `sacctmgr show assoc`",
            )
        job_id = res.stdout.strip().split(";")[0]
        if not job_id.isdigit():
            raise RunFailed(f"sbatch answered {res.stdout.strip()!r}, not a job id")
        return job_id

    def state(self, job_id: str) -> JobState | None:
        """The job's state now; None when no command knows the job any more."""
        res = self._run(["squeue", "-h", "-j", job_id, "-o", "%T|%r|%N"])
        line = res.stdout.strip().splitlines()[:1]
        if res.ok and line:
            state, reason, nodes = [*line[0].split("|"), "", ""][:3]
            return JobState(state, reason, nodes)
        res = self._run(["scontrol", "show", "job", "-o", job_id])
        if res.ok and res.stdout.strip():
            fields = dict(f.split("=", 1) for f in res.stdout.split() if "=" in f)
            return JobState(
                fields.get("JobState", "UNKNOWN"),
                fields.get("Reason", ""),
                fields.get("NodeList", ""),
                fields.get("ExitCode", ""),
            )
        res = self._run(["sacct", "-n", "-X", "-P", "-j", job_id, "-o", "State,NodeList,ExitCode"])
        line = res.stdout.strip().splitlines()[:1]
        if res.ok and line:
            state, nodes, code = [*line[0].split("|"), "", ""][:3]
            return JobState(state, "", nodes, code)
        return None

    def hostnames(self, node_list: str) -> list[str]:
        """bench-n[1-2] → [bench-n1, bench-n2], as Slurm expands it."""
        if not node_list or node_list in ("(null)", "None"):
            return []
        res = self._run(["scontrol", "show", "hostnames", node_list])
        return res.stdout.split() if res.ok else []

    def signal(self, job_id: str, signal: str) -> None:
        """SIGNAL to every task of the job's steps (not the batch script itself)."""
        self._run(["scancel", f"--signal={signal}", job_id])

    def cancel(self, job_id: str) -> None:
        """scancel: Slurm sends SIGTERM, then SIGKILL after its KillWait."""
        self._run(["scancel", job_id])
