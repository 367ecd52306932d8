"""`provision bench --slurm PARTITION --nodes N`: the fleet as one Slurm job.

    write RUN_DIR/job.json and job.sh on the shared filesystem → sbatch (one task per node,
    exclusive, the profile's GPUs per node, a time limit from the sweep's estimate)
    → wait: the job's state from the scheduler (pending with its reason, running, per-node
    cells done read from the run directories) → collect each node's signed bundle into
    results/<node>/<run id>/, verify it, summarise as `provision bench HOST,...` does

Where the Slurm commands run: here when sbatch is on PATH (this machine is a login node),
or with --slurm-login HOST on that login node over SSH (HOST named like any host:
provisioning.hosts.inventory, host key checked by provisioning.hosts.remote); the run
directory is then written and read over SFTP, and the bundles are copied back over it
(provisioning.slurm.shared_dir).

The job does not depend on this process: if it stops (killed, the workstation asleep),
`python -m provisioning attach RUN_DIR` follows the job again and collects as it would have.

Ctrl-C: the tasks get SIGINT (`scancel --signal=INT`): each keeps its finished cells,
signs and packs them, and removes its containers; the job then ends by itself. One that
has not ended INTERRUPT_GRACE_S later (or a second Ctrl-C, or a job still pending) is
cancelled outright (`scancel`). What finished is collected either way. A node whose task
failed is reported as failed; the other nodes' bundles are collected as usual. (Watching
and collecting are provisioning.slurm.watch's.)

Secrets stay out of Slurm: sbatch gets this process's environment without them (a job's
environment is saved in the controller's state files; over SSH, the login shell's own
environment, to which nothing of ours is sent); each node makes its server's key.
"""

from __future__ import annotations

import argparse
import math
import os
import posixpath
import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from bench.errors import Interrupted, UsageError
from bench.launch_profile import LaunchProfile, load_launch_profile
from bench.run.options import estimate_s
from bench.settings import Settings
from provisioning.flow import signing
from provisioning.hosts import inventory
from provisioning.hosts.local import LocalShell, local_host
from provisioning.hosts.remote import Remote
from provisioning.hosts.shell import Shell
from provisioning.runs.summary import default_card, summarise
from provisioning.runs.targets import DEFAULT_PROFILE, default_image
from provisioning.runs.workers import check_run_id, new_run_id
from provisioning.slurm.jobs import JobRequest, Slurm, batch_script
from provisioning.slurm.node import (
    JOB_FILE,
    NODES_DIR,
    NodeJob,
)
from provisioning.slurm.shared_dir import SharedDir
from provisioning.slurm.watch import Watch

ROOT = Path(__file__).resolve().parents[2]
SUBMITTED_FILE = "submitted.json"
SECRET_VARIABLES = ("VLLM_API_KEY", "BENCH_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
# Beyond the sweep's estimate: image load, server start (the profile's own time-out is added),
# signing and packing, and the scheduler's own start-up of the tasks.
TIME_MARGIN_FACTOR = 1.5
TIME_OVERHEAD_S = 600.0


def time_limit_min(startup_timeout_s: float, sweep_estimate_s: float) -> int:
    """--time in minutes: the sweep's estimate x 1.5, plus the server's start-up time-out,
    plus 10 minutes for the rest; rounded up."""
    total = sweep_estimate_s * TIME_MARGIN_FACTOR + startup_timeout_s + TIME_OVERHEAD_S
    return math.ceil(total / 60)


def without_secrets(environ: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in environ.items() if k not in SECRET_VARIABLES}


@dataclass(frozen=True)
class _Cluster:
    """Where the Slurm commands run and the run directories are reached."""

    shell: Shell
    shared: str  # the folder of run directories, as the cluster sees it
    checkout: str  # this project on the shared filesystem (the tasks start there)
    python: str  # the Python the tasks run `-m provisioning node-run` with

    @property
    def slurm(self) -> Slurm:
        return Slurm(self.shell)


def _cluster(args: argparse.Namespace) -> _Cluster:
    """This machine when it has sbatch; the login node over SSH with --slurm-login."""
    login = getattr(args, "slurm_login", None)
    shared_arg = getattr(args, "shared_dir", None)
    shell: Shell
    if login:
        checkout = getattr(args, "cluster_checkout", None)
        if not shared_arg or not Path(shared_arg).is_absolute():
            raise UsageError(
                "--slurm-login needs --shared-dir: an absolute path on the cluster's shared "
                "filesystem",
                hint="e.g. --shared-dir /shared/$USER/bench-runs",
            )
        host = inventory.resolve(login, inventory=inventory.load_inventory(args.inventory))
        remote = Remote(host, trust_new_host=args.trust_new_host)
        remote.connect()
        shell = remote
        shared = str(shared_arg)
        checkout = str(checkout) if checkout else ""
        python = posixpath.join(checkout, ".venv", "bin", "python") if checkout else ""
    else:
        shell = LocalShell(local_host("localhost"), environment=without_secrets(dict(os.environ)))
        default = args.results / "slurm" if hasattr(args, "results") else Path("results/slurm")
        shared = str(Path(shared_arg or default).resolve())
        checkout, python = str(ROOT), sys.executable
    missing = Slurm(shell).available()
    if missing:
        raise UsageError(
            missing,
            hint="run on a login node of the cluster (SLURM_CONF or /etc/slurm/slurm.conf "
            "names the cluster), or give --slurm-login HOST",
        )
    return _Cluster(shell, shared, checkout, python)


def apply_cluster(args: argparse.Namespace) -> None:
    """--cluster NAME: the inventory's [clusters.NAME] fills what the command line left
    unset (partition, account, login node, shared folder, checkout); its nodes' runtime
    must be one that is built (docker)."""
    name = getattr(args, "cluster", None)
    if not name:
        return
    entry = inventory.load_inventory(args.inventory).clusters.get(name)
    if entry is None:
        raise UsageError(
            f"no cluster {name!r} in {args.inventory}", hint=f"add a [clusters.{name}] table"
        )
    if entry.runtime != "docker":
        raise UsageError(
            f"cluster {name}: runtime {entry.runtime!r} (pyxis/enroot) is not built; only "
            "Docker on the nodes is",
            hint="see docs/fleet.md, Slurm: pyxis/enroot instead of Docker",
        )
    for attr, value in (
        ("slurm", entry.partition), ("account", entry.account), ("slurm_login", entry.login),
        ("shared_dir", entry.shared_dir), ("cluster_checkout", entry.checkout),
    ):  # fmt: skip
        if getattr(args, attr, None) is None and value is not None:
            setattr(args, attr, Path(value) if attr == "shared_dir" else value)
    if not args.slurm:
        raise UsageError(f"cluster {name} names no partition", hint='add partition = "..."')


def cmd_bench_slurm(args: argparse.Namespace, settings: Settings) -> int:
    apply_cluster(args)
    run_id = check_run_id(args.run_id) or new_run_id()
    if args.keep:
        raise UsageError("--keep does not apply to a Slurm job: the nodes are released after it")
    profile_arg = args.profile or DEFAULT_PROFILE
    if Path(profile_arg).is_file():  # a profile file: the nodes read it from the shared path
        profile_arg = str(Path(profile_arg).resolve())
    profile = load_launch_profile(profile_arg)
    image_ref = args.image or default_image(profile)
    bench_args = tuple(args.bench_args)
    minutes = time_limit_min(profile.startup_timeout_s, estimate_s(list(bench_args)))
    if args.slurm_login and not args.cluster_checkout:
        raise UsageError(
            "--slurm-login needs --cluster-checkout: this project's checkout on the cluster's "
            "shared filesystem, with its .venv",
            hint="e.g. --cluster-checkout /shared/$USER/vllm-bench",
        )
    cluster = _cluster(args)
    run_dir = SharedDir(cluster.shell, posixpath.join(cluster.shared, run_id))
    if run_dir.exists():
        raise UsageError(f"{run_dir.path} already exists", hint="give another --run-id")
    run_dir.make(NODES_DIR)
    slurm_words = ("--slurm", args.slurm, "--nodes", str(args.nodes))
    image_tar = args.image_tar
    if image_tar and not args.slurm_login:
        image_tar = str(Path(image_tar).resolve())
    job = NodeJob(
        run_id=run_id,
        profile=profile_arg,
        image=image_ref,
        image_tar=str(image_tar) if image_tar else None,
        bench_args=bench_args,
        download_weights=not args.no_weights_download,
        submit_command=("python", "-m", "provisioning", "bench", *slurm_words),
    )
    run_dir.write(JOB_FILE, job.model_dump_json(indent=2) + "\n")
    node_command = [cluster.python, "-m", "provisioning", "node-run", run_dir.path]
    script = run_dir.write(
        "job.sh", batch_script(node_command, run_dir.join(NODES_DIR, "task-%t.log"))
    )
    request = JobRequest(
        name=f"vllm-bench-{run_id}",
        partition=args.slurm,
        nodes=args.nodes,
        time_min=minutes,
        gpus_per_node=profile.gpus,
        workdir=cluster.checkout,
        output=run_dir.join("slurm-%j.out"),
        account=args.account,
    )
    gpus = f"{profile.gpus} GPU(s) per node" if profile.gpus else "no GPUs (profile needs none)"
    where = f" via {args.slurm_login}" if args.slurm_login else ""
    print(
        f"submitting {run_id}{where}: {args.nodes} exclusive node(s) of partition {args.slurm}, "
        f"{gpus}, time limit {minutes} min; run directory {run_dir.path}",
        file=sys.stderr,
        flush=True,
    )
    job_id = cluster.slurm.submit(request, script)
    submitted = Submitted(job_id=job_id, nodes=args.nodes, partition=args.slurm)
    run_dir.write(SUBMITTED_FILE, submitted.model_dump_json(indent=2) + "\n")
    print(f"submitted job {job_id}", file=sys.stderr, flush=True)
    login = f" --slurm-login {args.slurm_login}" if args.slurm_login else ""
    print(
        f"(if this process stops, the job goes on; follow it again with: "
        f"python -m provisioning attach{login} {run_dir.path})",
        file=sys.stderr,
        flush=True,
    )
    try:
        return _follow(cluster.slurm, submitted, run_dir, run_id, profile, args)
    finally:
        cluster.shell.close()


def cmd_attach(args: argparse.Namespace, settings: Settings) -> int:
    """Follow a job submitted before (its submitter stopped, the workstation slept), then
    collect, verify and summarise as the submitter would have."""
    path = str(args.run_dir) if args.slurm_login else str(Path(args.run_dir).resolve())
    args.shared_dir = posixpath.dirname(path) if args.slurm_login else None
    cluster = _cluster(args)
    run_dir = SharedDir(cluster.shell, path)
    try:
        job = NodeJob.model_validate_json(run_dir.read(JOB_FILE) or "")
        submitted = Submitted.model_validate_json(run_dir.read(SUBMITTED_FILE) or "")
    except ValidationError:
        raise UsageError(
            f"{path} is not the run directory of a submitted Slurm job (no job.json and "
            "submitted.json there)",
            hint="give SHARED_DIR/<run id> as the submitter printed it",
        ) from None
    print(f"following job {submitted.job_id} ({job.run_id})", file=sys.stderr, flush=True)
    profile = load_launch_profile(job.profile)
    try:
        return _follow(cluster.slurm, submitted, run_dir, job.run_id, profile, args)
    finally:
        cluster.shell.close()


def _follow(  # noqa: PLR0917 - the one place these meet
    slurm: Slurm,
    submitted: Submitted,
    run_dir: SharedDir,
    run_id: str,
    profile: LaunchProfile,
    args: argparse.Namespace,
) -> int:
    job_id = submitted.job_id
    watch = Watch(slurm, job_id, run_dir, run_id)
    state, interrupted = watch.wait()
    allowed = args.allowed_signers or signing.default_allowed_signers()
    results = watch.collect(state, args.results, allowed, submitted.nodes, interrupted)
    if interrupted:
        for r in results:
            if r.error is None and not r.outcome.complete:
                r.error = Interrupted(f"interrupted on {r.outcome.host}")
    card = None if args.no_verdict else args.card or default_card(profile)
    print("\n" + (state.describe(job_id) if state else f"job {job_id}: no longer known to Slurm"))
    return summarise(results, allowed, card, fleet_of=True)


class Submitted(BaseModel):
    """RUN_DIR/submitted.json: the job as sbatch accepted it (what `attach` follows)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    nodes: int
    partition: str
