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
environment, to which nothing of ours is sent); each node makes its server's key. So do an
OTLP collector's headers (OTEL_EXPORTER_OTLP_HEADERS): with --otel-url each node passes
on what its own environment sets, and this side says so when it has some.
"""

from __future__ import annotations

import math
import os
import posixpath
import sys
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from bench.errors import Interrupted, UsageError
from bench.history.database import Target
from bench.launch_profile import LaunchProfile, load_launch_profile
from bench.run.options import estimate_s
from bench.settings import Settings
from provisioning.flow import server_traces, signing
from provisioning.flow.live import OTLP_HEADER_VARIABLES, LiveChoice
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
SECRET_VARIABLES = (
    "VLLM_API_KEY", "BENCH_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", *OTLP_HEADER_VARIABLES,
)  # fmt: skip
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
class ClusterChoice:
    """Where the command line said the Slurm commands run: this machine, or a login node over
    SSH (LOGIN, named like any host in INVENTORY) with the shared folder and checkout there."""

    inventory: inventory.Inventory
    login: str | None = None
    shared_dir: Path | None = None  # default here: RESULTS/slurm
    checkout: str | None = None
    trust_new_host: bool = False
    results: Path = Path("results")


@dataclass(frozen=True)
class FollowChoice:
    """What to do with the job's bundles: where they go, whose signatures count, which card
    (none with no_verdict) judges them."""

    results: Path = Path("results")
    allowed_signers: Path | None = None
    card: Path | None = None
    no_verdict: bool = False
    history: Target | None = None  # where each verified bundle is recorded (None: nowhere)


@dataclass(frozen=True)
class SlurmChoice:
    """`provision bench --slurm|--cluster` as the command line chose it, made once by
    provisioning.commands.slurm; apply_cluster fills it from hosts.toml's [clusters.NAME]."""

    cluster: ClusterChoice
    follow: FollowChoice
    partition: str | None = None
    cluster_name: str | None = None
    inventory_path: Path | None = None  # the file hosts.toml was read from, for messages
    nodes: int = 1
    account: str | None = None
    image_tar: Path | None = None
    run_id: str | None = None
    keep: bool = False
    profile: str | None = None
    image: str | None = None
    bench_args: tuple[str, ...] = ()
    download_weights: bool = True
    live: LiveChoice | None = None  # bench run --otel-url, --metrics-port on every node
    server_traces: bool | None = None  # --server-traces / --no-server-traces (None: profile's)


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


def _cluster(choice: ClusterChoice) -> _Cluster:
    """This machine when it has sbatch; the login node over SSH with --slurm-login."""
    shell: Shell
    if choice.login:
        if not choice.shared_dir or not Path(choice.shared_dir).is_absolute():
            raise UsageError(
                "--slurm-login needs --shared-dir: an absolute path on the cluster's shared "
                "filesystem",
                hint="e.g. --shared-dir /shared/$USER/bench-runs",
            )
        host = inventory.resolve(choice.login, inventory=choice.inventory)
        remote = Remote(host, trust_new_host=choice.trust_new_host)
        remote.connect()
        shell = remote
        shared = str(choice.shared_dir)
        checkout = choice.checkout or ""
        python = posixpath.join(checkout, ".venv", "bin", "python") if checkout else ""
    else:
        shell = LocalShell(local_host("localhost"), environment=without_secrets(dict(os.environ)))
        shared = str(Path(choice.shared_dir or choice.results / "slurm").resolve())
        checkout, python = str(ROOT), sys.executable
    missing = Slurm(shell).available()
    if missing:
        raise UsageError(
            missing,
            hint="run on a login node of the cluster (SLURM_CONF or /etc/slurm/slurm.conf "
            "names the cluster), or give --slurm-login HOST",
        )
    return _Cluster(shell, shared, checkout, python)


def apply_cluster(choice: SlurmChoice) -> SlurmChoice:
    """--cluster NAME: the inventory's [clusters.NAME] fills what the command line left
    unset (partition, account, login node, shared folder, checkout); its nodes' runtime
    must be one that is built (docker)."""
    name = choice.cluster_name
    if not name:
        return choice
    entry = choice.cluster.inventory.clusters.get(name)
    if entry is None:
        raise UsageError(
            f"no cluster {name!r} in {choice.inventory_path}",
            hint=f"add a [clusters.{name}] table",
        )
    if entry.runtime != "docker":
        raise UsageError(
            f"cluster {name}: runtime {entry.runtime!r} (pyxis/enroot) is not built; only "
            "Docker on the nodes is",
            hint="see docs/fleet.md, Slurm: pyxis/enroot instead of Docker",
        )
    given = choice.cluster
    shared = given.shared_dir
    if shared is None and entry.shared_dir is not None:
        shared = Path(entry.shared_dir)
    filled = replace(
        choice,
        partition=choice.partition if choice.partition is not None else entry.partition,
        account=choice.account if choice.account is not None else entry.account,
        cluster=replace(
            given,
            login=given.login if given.login is not None else entry.login,
            shared_dir=shared,
            checkout=given.checkout if given.checkout is not None else entry.checkout,
        ),
    )
    if not filled.partition:
        raise UsageError(f"cluster {name} names no partition", hint='add partition = "..."')
    return filled


def bench_slurm(choice: SlurmChoice, settings: Settings) -> int:
    choice = apply_cluster(choice)
    run_id = check_run_id(choice.run_id) or new_run_id()
    if choice.keep:
        raise UsageError("--keep does not apply to a Slurm job: the nodes are released after it")
    profile_arg = choice.profile or DEFAULT_PROFILE
    if Path(profile_arg).is_file():  # a profile file: the nodes read it from the shared path
        profile_arg = str(Path(profile_arg).resolve())
    profile = load_launch_profile(profile_arg)
    live = choice.live
    if live is not None:
        live.check_server_port(profile.port, profile.name)
        _say_headers_stay(live)
    server_traces.choose(profile, choice.server_traces, live)  # refused here, not on a node
    image_ref = choice.image or default_image(profile)
    bench_args = choice.bench_args
    minutes = time_limit_min(profile.startup_timeout_s, estimate_s(list(bench_args)))
    login = choice.cluster.login
    if login and not choice.cluster.checkout:
        raise UsageError(
            "--slurm-login needs --cluster-checkout: this project's checkout on the cluster's "
            "shared filesystem, with its .venv",
            hint="e.g. --cluster-checkout /shared/$USER/vllm-bench",
        )
    cluster = _cluster(choice.cluster)
    run_dir = SharedDir(cluster.shell, posixpath.join(cluster.shared, run_id))
    if run_dir.exists():
        raise UsageError(f"{run_dir.path} already exists", hint="give another --run-id")
    run_dir.make(NODES_DIR)
    partition = choice.partition or ""
    slurm_words = ("--slurm", partition, "--nodes", str(choice.nodes))
    image_tar: str | Path | None = choice.image_tar
    if image_tar and not login:
        image_tar = str(Path(image_tar).resolve())
    job = NodeJob(
        run_id=run_id,
        profile=profile_arg,
        image=image_ref,
        image_tar=str(image_tar) if image_tar else None,
        bench_args=bench_args,
        download_weights=choice.download_weights,
        submit_command=("python", "-m", "provisioning", "bench", *slurm_words),
        otel_url=live.otel_url if live else None,
        metrics_port=live.metrics_port if live else None,
        metrics_host=live.metrics_host if live else None,
        server_traces=choice.server_traces,
    )
    run_dir.write(JOB_FILE, job.model_dump_json(indent=2) + "\n")
    node_command = [cluster.python, "-m", "provisioning", "node-run", run_dir.path]
    script = run_dir.write(
        "job.sh", batch_script(node_command, run_dir.join(NODES_DIR, "task-%t.log"))
    )
    request = JobRequest(
        name=f"vllm-bench-{run_id}",
        partition=partition,
        nodes=choice.nodes,
        time_min=minutes,
        gpus_per_node=profile.gpus,
        workdir=cluster.checkout,
        output=run_dir.join("slurm-%j.out"),
        account=choice.account,
    )
    gpus = f"{profile.gpus} GPU(s) per node" if profile.gpus else "no GPUs (profile needs none)"
    where = f" via {login}" if login else ""
    print(
        f"submitting {run_id}{where}: {choice.nodes} exclusive node(s) of partition "
        f"{partition}, {gpus}, time limit {minutes} min; run directory {run_dir.path}",
        file=sys.stderr,
        flush=True,
    )
    job_id = cluster.slurm.submit(request, script)
    submitted = Submitted(job_id=job_id, nodes=choice.nodes, partition=partition)
    run_dir.write(SUBMITTED_FILE, submitted.model_dump_json(indent=2) + "\n")
    print(f"submitted job {job_id}", file=sys.stderr, flush=True)
    again = f" --slurm-login {login}" if login else ""
    print(
        f"(if this process stops, the job goes on; follow it again with: "
        f"python -m provisioning attach{again} {run_dir.path})",
        file=sys.stderr,
        flush=True,
    )
    try:
        return _follow(cluster.slurm, submitted, run_dir, run_id, profile, choice.follow)
    finally:
        cluster.shell.close()


def _say_headers_stay(live: LiveChoice) -> None:
    """The collector's headers set here do not go through Slurm (module docstring): said."""
    given = [name for name in OTLP_HEADER_VARIABLES if os.environ.get(name)]
    if live.otel_url is not None and given:
        print(
            f"{' and '.join(given)} not sent through Slurm (a job's environment is kept in the "
            "controller's state): the nodes export to --otel-url with what their own "
            "environment sets",
            file=sys.stderr,
            flush=True,
        )


def attach(run_dir_arg: Path, cluster_choice: ClusterChoice, follow: FollowChoice) -> int:
    """Follow a job submitted before (its submitter stopped, the workstation slept), then
    collect, verify and summarise as the submitter would have. Over --slurm-login the run
    directory is the cluster's path, and its folder is the shared one."""
    login = cluster_choice.login
    path = str(run_dir_arg) if login else str(Path(run_dir_arg).resolve())
    shared = Path(posixpath.dirname(path)) if login else None
    cluster = _cluster(replace(cluster_choice, shared_dir=shared))
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
        return _follow(cluster.slurm, submitted, run_dir, job.run_id, profile, follow)
    finally:
        cluster.shell.close()


def _follow(  # noqa: PLR0917 - the one place these meet
    slurm: Slurm,
    submitted: Submitted,
    run_dir: SharedDir,
    run_id: str,
    profile: LaunchProfile,
    follow: FollowChoice,
) -> int:
    job_id = submitted.job_id
    watch = Watch(slurm, job_id, run_dir, run_id)
    state, interrupted = watch.wait()
    allowed = follow.allowed_signers or signing.default_allowed_signers()
    results = watch.collect(
        state, follow.results, allowed, submitted.nodes, interrupted, history=follow.history
    )
    if interrupted:
        for r in results:
            if r.error is None and not r.outcome.complete:
                r.error = Interrupted(f"interrupted on {r.outcome.host}")
    card = None if follow.no_verdict else follow.card or default_card(profile)
    print("\n" + (state.describe(job_id) if state else f"job {job_id}: no longer known to Slurm"))
    return summarise(results, allowed, card, fleet_of=True)


class Submitted(BaseModel):
    """RUN_DIR/submitted.json: the job as sbatch accepted it (what `attach` follows)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    nodes: int
    partition: str
