"""What comes before the sweep on the host's engine: the image's GPU self-test, the weights
in the host's Hugging Face cache, and the server container of the launch profile.

Secrets (the API key, HF_TOKEN) go to the containers as environment through the engine's
API, never on a command line.
"""

from __future__ import annotations

import re
import shlex
from typing import TextIO

from bench.errors import RunFailed
from provisioning.containers.engine import ContainerSpec, Mount
from provisioning.containers.engine_side import EngineSide
from provisioning.flow.options import Options
from provisioning.flow.seams import (
    JIT_IN_CONTAINER,
    RUN_IN_CONTAINER,
    ServerContainer,
    Steps,
    Workspace,
)
from provisioning.flow.workload import INPUTS_IN_CONTAINER, inputs_dir
from provisioning.hosts.shell import Shell
from provisioning.image import ensure, weights
from provisioning.image.ensure import CONTAINER_HOME, HF_IN_CONTAINER

# A name Docker takes as a container's hostname (RFC 1123); an ssh alias may be anything.
_HOSTNAME = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9.-]{0,61}[A-Za-z0-9])?")
NO_WEIGHTS = {"note": "not applicable: the launch profile loads no weights"}


class ServerStarter:
    """The steps before the sweep, on one host's engine, for one run."""

    def __init__(
        self,
        engine: EngineSide,
        shell: Shell,
        opts: Options,
        *,
        scope: str,
        image: str,
        where: Workspace,
        steps: Steps,
        out: TextIO,
    ) -> None:
        self.engine, self.shell, self.opts = engine, shell, opts
        self.scope, self.image, self.where, self.steps, self.out = scope, image, where, steps, out
        self.host = shell.host.name
        self.jit_cache_was_empty: bool | None = None  # known once a GPU server started

    def gpu_selftest(self) -> None:
        gpus = self.opts.profile.gpus
        if not gpus:
            return
        with self.steps("self-test"):
            ensure.gpu_selftest(
                self.engine,
                image=self.image,
                scope=self.scope,
                user=self.where.uid_gid,
                gpus=gpus,
                host=self.host,
                out=self.out,
            )

    def fetch_weights(self) -> dict[str, object]:
        """The weights in the host's cache (downloaded when asked); what environment.json
        records of them."""
        req, cache = self.opts.requirements, self.where.model_cache
        if not (req.weights_bytes and req.hf_model):
            return dict(NO_WEIGHTS)
        self.shell.run(f"mkdir -p {shlex.quote(cache)}", check=True)
        with self.steps("weights"):
            job = ensure.WeightsJob(
                image=self.image, model=req.hf_model, scope=self.scope, cache_dir=cache,
                user=self.where.uid_gid, host=self.host, out=self.out,
            )  # fmt: skip
            if req.weights_generated:
                ensure.generate_weights(self.engine, job)
            elif req.download_weights:
                ensure.fetch_weights(
                    self.engine, job, revision=req.model_revision,
                    hf_token=self.opts.secrets.hf_token,
                )  # fmt: skip
            if req.model_revision is not None:
                weights.pin_main(self.shell, cache, req.hf_model, req.model_revision)
            found = weights.record(
                self.shell, cache, req.hf_model, req.model_revision,
                source="generated" if req.weights_generated else "hub",
            )  # fmt: skip
            if found is None:
                raise RunFailed(
                    f"{req.hf_model} is not in {cache} on {self.host} after the weights step",
                    hint="run with the download on, or fetch it on the host (hf download)",
                )
            print(f"[{self.host}] {found.banner()}", file=self.out, flush=True)
            return found.as_json()

    def start_server(self) -> ServerContainer:
        """The server container, started, its log followed."""
        p, where = self.opts.profile, self.where
        env = {"HOME": CONTAINER_HOME, "HF_HOME": HF_IN_CONTAINER}
        mounts = [Mount(where.run_dir, RUN_IN_CONTAINER), Mount(where.model_cache, HF_IN_CONTAINER)]
        if self.opts.workload is not None and self.opts.workload.staged:
            inputs = inputs_dir(where.run_dir)  # the workload file, staged by the flow
            mounts.append(Mount(inputs, INPUTS_IN_CONTAINER, read_only=True))
        if self.opts.requirements.weights_bytes:
            # The weights step fetched them: a start that would download is a failure.
            env["HF_HUB_OFFLINE"] = "1"
        if p.gpus:
            # The JIT caches (PTX, Triton, FlashInfer, torch.compile) outlive the container,
            # so only the first start on a host pays for compiling them.
            jit = shlex.quote(where.jit_cache)
            self.shell.run(f"mkdir -p {jit}", check=True)
            found = self.shell.run(f"find {jit} -type f -print -quit")
            self.jit_cache_was_empty = found.ok and not found.stdout.strip()
            mounts.append(Mount(where.jit_cache, JIT_IN_CONTAINER))
        secrets = self.opts.secrets
        if secrets.api_key is not None and "VLLM_API_KEY" in p.secret_env:
            env["VLLM_API_KEY"] = secrets.api_key.get_secret_value()
        if secrets.hf_token is not None:
            env["HF_TOKEN"] = secrets.hf_token.get_secret_value()
        if self.opts.traces is not None:
            env.update(self.opts.traces.server_environment())
        self.shell.run(f"mkdir -p {shlex.quote(where.model_cache)}", check=True)
        with self.steps("server start"):
            cid = self.engine.start(
                ContainerSpec(
                    image=self.image,
                    command=self.opts.server_argv(),
                    run_id=self.scope,
                    role="server",
                    gpus=p.gpus,
                    environment=env,
                    mounts=tuple(mounts),
                    publish={p.port: None},
                    publish_on=self.opts.live.published() if self.opts.live else {},
                    user=where.uid_gid,
                    # NCCL between tensor-parallel ranks, and vLLM's engine and API processes
                    # (a 160 MiB ring), need more shared memory than Docker's 64 MiB /dev/shm.
                    ipc_host=p.ipc_host or p.gpus > 1,
                    hostname=self.host if _HOSTNAME.fullmatch(self.host) else None,
                )
            )
            server = ServerContainer(cid, self.engine.host_port(cid, p.port))
            self.engine.follow_logs(cid, server.log.append)
        traces = self.opts.traces
        if traces is not None:
            print(f"[{self.host}] tracing on: the server sends its spans to the run's receiver "
                  f"in the container ({traces.endpoint})", file=self.out, flush=True)  # fmt: skip
        live = self.opts.live
        if live is not None and live.metrics_port is not None:
            print(f"[{self.host}] the run's Prometheus endpoint, while `bench run` runs: "
                  f"{self.host}:{live.metrics_port}/metrics (published on "
                  f"{live.metrics_host})", file=self.out, flush=True)  # fmt: skip
        return server
