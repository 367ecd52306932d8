"""One node's part of a Slurm job: `python -m provisioning node-run RUN_DIR`, one task per node.

The single-host flow (provisioning.flow.host_run.HostRun) on the node itself, placed there by OnNode
(its own Docker engine, DockerEngine(local=True); the run directory and bundle on the shared
filesystem; a signing key of its own) with the node's own commands
(provisioning.hosts.local.LocalShell):

    preflight (the checks that apply on the node: Docker, GPUs, driver, runtime, disk,
    weights) → image present (or `docker load` from a tar on the shared filesystem)
    → server started with the launch profile's exact flags → `bench run` inside it
    → bundle signed on the node with the node's own key → RUN_DIR/nodes/<node>/

RUN_DIR is on the filesystem the submitting side and every node share. The submitter
(provisioning.slurm.submit) writes RUN_DIR/job.json (NodeJob: what to run) and reads back,
per node, RUN_DIR/nodes/<node>/:

    outcome.json        NodeOutcome: running / complete / partial / failed / interrupted
    allowed_signers     the node's public signing key (principal vllm-bench@<node>)
    <run id>-<node>/    the run directory `bench run` writes (results.json after each cell)
    <run id>-<node>.tar.gz   the signed bundle

SIGINT (scancel --signal=INT) or SIGTERM (scancel) stops the sweep as Ctrl-C does on a
host: the finished cells are kept, signed and packed, the containers removed.

Secrets: the submitter sends none through Slurm (a job's environment is saved in the
controller's state files). The server's API key is made here, per node and run, and lives
only in this process and the containers' environment (passed through the Docker API).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, TextIO

from pydantic import BaseModel, ConfigDict, SecretStr

from bench.errors import BenchError, Exit, Interrupted
from bench.launch_profile import load_launch_profile
from bench.settings import Settings
from provisioning.containers.docker_sdk import ImageMissing
from provisioning.containers.engine import DockerEngine
from provisioning.containers.engine_side import EngineSide
from provisioning.flow import server_traces, signing
from provisioning.flow.host_run import HostRun
from provisioning.flow.live import ALL_ADDRESSES, LiveChoice, otlp_headers
from provisioning.flow.options import HostOutcome, Options, Secrets
from provisioning.flow.seams import Steps
from provisioning.hosts.inventory import ResolvedHost
from provisioning.hosts.local import LocalShell, local_host
from provisioning.preflight import checks
from provisioning.preflight import report as preflight_report
from provisioning.preflight.requirements import load_requirements
from provisioning.runs import targets, workers

JOB_FILE = "job.json"
NODES_DIR = "nodes"
OUTCOME_FILE = "outcome.json"
SIGNERS_FILE = "allowed_signers"
_TAR_CHUNK = 1 << 20

State = Literal["running", "complete", "partial", "failed", "interrupted"]


class NodeJob(BaseModel):
    """What every node of the job runs (RUN_DIR/job.json, written by the submitter)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    run_id: str
    profile: str
    image: str
    image_tar: str | None = None  # a `docker save` tar on the shared filesystem
    bench_args: tuple[str, ...] = ()
    download_weights: bool = True
    model_cache: str | None = None
    # How the job was submitted, up to the options (recipe.json's re-run command).
    submit_command: tuple[str, ...] = ()
    # bench run --otel-url, --metrics-port on every node (provisioning.flow.live), checked by
    # the submitter; metrics_host: the node's address the port is published on.
    otel_url: str | None = None
    metrics_port: int | None = None
    metrics_host: str | None = None
    # --server-traces / --no-server-traces (None: the profile's server_traces), checked by
    # the submitter (provisioning.flow.server_traces).
    server_traces: bool | None = None

    def live(self) -> LiveChoice | None:
        if self.otel_url is None and self.metrics_port is None:
            return None
        return LiveChoice(self.otel_url, self.metrics_port, self.metrics_host or ALL_ADDRESSES)


class NodeOutcome(BaseModel):
    """What one node's task did (RUN_DIR/nodes/<node>/outcome.json)."""

    model_config = ConfigDict(extra="forbid")

    node: str
    state: State = "running"
    archive: str | None = None  # the signed bundle, on the shared filesystem
    image_id: str | None = None
    error: str | None = None
    exit_code: int | None = None
    timings_s: dict[str, float] = {}


def node_dir_name(node: str) -> str:
    """The node's folder under RUN_DIR/nodes/ (and the host name in its bundle's principal)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", node)


def node_dir(run_dir: Path, node: str) -> Path:
    return run_dir / NODES_DIR / node_dir_name(node)


def _write_outcome(directory: Path, outcome: NodeOutcome) -> None:
    path = directory / OUTCOME_FILE
    tmp = path.with_name(f".{OUTCOME_FILE}.tmp")
    tmp.write_text(outcome.model_dump_json(indent=2) + "\n")
    tmp.replace(path)


class OnNode:
    """The Placement of a run on the node this task runs on: its own Docker engine, the run
    directory and the bundle in the shared RUN_DIR/nodes/<node>/, a key of its own."""

    directories_step = "node directories"

    def __init__(
        self, shell: LocalShell, opts: Options, *, directory: Path, image_tar: Path | None
    ) -> None:
        self.shell, self.opts = shell, opts
        self.host = shell.host
        self.directory = directory
        self.image_tar = image_tar
        self._engine: DockerEngine | None = None

    def run_dir(self, scope: str) -> Path:
        return self.directory / scope

    def open_engine(self) -> EngineSide:
        self._engine = DockerEngine(self.host, local=True, secrets=self.opts.secrets.masks())
        return self._engine

    def prepare(self, home: str, scope: str) -> tuple[str, str]:
        run_dir = self.run_dir(scope)
        run_dir.mkdir(parents=True, exist_ok=True)
        # Homes are shared between nodes on most clusters: each node has its own key.
        key_dir = f"{signing.KEY_DIR}/nodes/{self.directory.name}"
        key, public = signing.ensure_host_key(self.shell, home, key_dir=key_dir)
        signing.trust_locally(public, self.host.name, self.opts.allowed_signers)
        return str(run_dir), key

    def ensure_image(self, out: TextIO) -> str:
        engine = self._engine
        if engine is None:
            raise RuntimeError("ensure_image before open_engine")
        ref, name = self.opts.image_ref, self.host.name
        found = engine.image_id(ref)
        if found is None and self.image_tar is not None:
            print(f"[{name}] docker load < {self.image_tar} ...", file=out, flush=True)
            engine.load(_file_chunks(self.image_tar))
            found = engine.image_id(ref)
        if found is None:
            raise ImageMissing(
                f"image {ref} is not on node {name}"
                + (f" after loading {self.image_tar}" if self.image_tar else ""),
                hint="give --image-tar PATH (a `docker save` of it on the shared filesystem), "
                "or load it on every node of the partition",
            )
        print(f"[{name}] image {ref} present ({found[:19]})", file=out, flush=True)
        return found

    def deliver(self, archive: str, outcome: HostOutcome, steps: Steps) -> None:
        """The signed archive stays where it is, on the shared filesystem."""
        outcome.archive = Path(archive)

    def stop_delivery(self) -> None:
        """Nothing to stop: there is no copy."""

    def delivery_stopped(self) -> Interrupted | None:
        return None


def _file_chunks(path: Path) -> Iterator[bytes]:
    with path.open("rb") as fh:
        while chunk := fh.read(_TAR_CHUNK):
            yield chunk


def this_node(given: str | None) -> str:
    """The node's name in the job: --node, else Slurm's SLURMD_NODENAME, else the hostname."""
    return given or os.environ.get("SLURMD_NODENAME") or socket.gethostname()


def node_preflight(shell: LocalShell, opts: Options, hf_token_present: bool) -> None:
    """The host checks that apply on a node (no SSH: Slurm put this task here); prints the
    table, raises HostCheckFailed when one fails."""
    host = shell.host
    report = checks.run_preflight(
        shell,
        opts.requirements,
        host=host.name,
        ssh_found="-",
        model_cache=host.model_cache,
        hf_token_present=hf_token_present,
    )
    job = os.environ.get("SLURM_JOB_ID", "-")
    task = os.environ.get("SLURM_PROCID", "-")
    report.checks[0] = preflight_report.Check(
        "slurm task", preflight_report.Status.OK, f"node {host.name}, job {job}, task {task}"
    )
    try:
        with DockerEngine(host, local=True) as engine:
            report.checks.insert(
                1,
                preflight_report.Check(
                    "docker engine", preflight_report.Status.OK, engine.server_version
                ),
            )
    except BenchError as exc:
        report.checks.insert(
            1,
            preflight_report.Check(
                "docker engine", preflight_report.Status.FAIL, exc.message, exc.hint or ""
            ),
        )
    print(f"preflight of node {host.name} for launch profile {opts.requirements.profile}:")
    print(report.table(), flush=True)
    report.raise_if_failed()


def node_run(run_dir_arg: Path, node_name: str | None, settings: Settings) -> int:
    """This node's part of the job in RUN_DIR (`provision node-run`, started by srun)."""
    run_dir = Path(run_dir_arg).resolve()
    job = NodeJob.model_validate_json((run_dir / JOB_FILE).read_text())
    node = this_node(node_name)
    directory = node_dir(run_dir, node)
    directory.mkdir(parents=True, exist_ok=True)
    outcome = NodeOutcome(node=node)
    _write_outcome(directory, outcome)
    host = local_host(node, job.model_cache)
    try:
        run = _node_run(job, host, directory, settings)
        node_preflight(LocalShell(host), run.opts, run.opts.secrets.hf_token is not None)
    except BenchError as exc:
        outcome.state, outcome.error, outcome.exit_code = (
            "failed",
            exc.one_line(),
            int(exc.exit_code),
        )
        _write_outcome(directory, outcome)
        raise
    worker = workers.Worker(run)
    interrupted = workers.run_all([worker])
    o = worker.outcome
    outcome.archive = str(o.archive) if o.archive else None
    outcome.image_id, outcome.timings_s = o.image_id, dict(o.timings_s)
    error = worker.error
    if interrupted or isinstance(error, Interrupted):
        outcome.state, code = "interrupted", int(Exit.INTERRUPTED)
    elif error is not None:
        outcome.state, code = "failed", int(error.exit_code)
    else:
        outcome.state, code = "complete", int(Exit.OK)
    if error is not None:
        outcome.error = error.one_line()
        print(f"provision: {node}: {error.one_line()}", file=sys.stderr)
    if outcome.state == "complete" and not _complete(directory / run.scope):
        outcome.state = "partial"
    outcome.exit_code = code
    _write_outcome(directory, outcome)
    print(json.dumps({"node": node, "state": outcome.state, "archive": outcome.archive}))
    return code


def _complete(run_dir: Path) -> bool:
    return (run_dir / "results.json").is_file() and not (run_dir / "INCOMPLETE").exists()


def _node_run(job: NodeJob, host: ResolvedHost, directory: Path, settings: Settings) -> HostRun:
    profile = load_launch_profile(job.profile)
    req = load_requirements(
        profile.name,
        profile.gpus,
        image_ref=job.image,
        image_cuda=targets.image_cuda(profile, job.image),
        model_revision=profile.model_revision,
        download_weights=job.download_weights,
    )
    # The server's key: this node's own (the submitter's never travels through Slurm).
    api_key = settings.api_key or SecretStr(secrets.token_urlsafe(32))
    live = job.live()
    environ = dict(os.environ)
    opts = Options(
        profile=profile,
        requirements=req,
        image_ref=job.image,
        run_id=job.run_id,
        results_dir=directory,
        allowed_signers=directory / SIGNERS_FILE,
        bench_args=job.bench_args,
        secrets=Secrets(
            api_key=api_key,
            hf_token=targets.hf_token(environ),
            otlp_headers=otlp_headers(live, environ),  # the node's own, if any
        ),
        live=live,
        traces=server_traces.choose(profile, job.server_traces, live),
    )
    tar = Path(job.image_tar) if job.image_tar else None
    shell = LocalShell(host)
    placement = OnNode(shell, opts, directory=directory, image_tar=tar)
    run = HostRun(host, opts, remote=shell, placement=placement)
    run.recipe_head = job.submit_command or None
    return run
