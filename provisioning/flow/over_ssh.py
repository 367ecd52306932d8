"""A host reached over SSH, as the host flow (provisioning.flow.host_run) places a run on it.

    engine          the host's Docker engine through the SDK's own SSH connection
    run directory   ~/.cache/vllm-bench/runs/<run id>-<host> on the host
    signing key     ~/.config/vllm-bench/signing_ed25519 on the host, trusted here
    image           present by id, else streamed from here or built on the host
                    (provisioning.image.ensure)
    bundle          pulled back to RESULTS/HOST/ and verified (provisioning.flow.pull_back)

The Slurm node's placement is provisioning.slurm.node.OnNode.
"""

from __future__ import annotations

import shlex
from typing import TextIO

from bench.errors import Interrupted
from provisioning.containers.engine import DockerEngine
from provisioning.containers.engine_side import EngineSide
from provisioning.flow import signing
from provisioning.flow.options import HostOutcome, Options
from provisioning.flow.pull_back import PullBack
from provisioning.flow.seams import Steps
from provisioning.hosts.remote import Remote
from provisioning.image import ensure


class OverSsh:
    """The Placement of a run on a host over SSH."""

    directories_step = "host directories"

    def __init__(self, remote: Remote, opts: Options) -> None:
        self.remote, self.opts = remote, opts
        self.host = remote.host
        self._engine: DockerEngine | None = None
        self._pull = PullBack(remote, opts)

    def open_engine(self) -> EngineSide:
        self._engine = DockerEngine(self.host, secrets=self.opts.secrets.masks())
        return self._engine

    def prepare(self, home: str, scope: str) -> tuple[str, str]:
        run_dir = f"{home}/.cache/vllm-bench/runs/{scope}"
        self.remote.run(f"mkdir -p {shlex.quote(run_dir)}", check=True)
        key, public = signing.ensure_host_key(self.remote, home)
        signing.trust_locally(public, self.host.name, self.opts.allowed_signers)
        return run_dir, key

    def ensure_image(self, out: TextIO) -> str:
        if self._engine is None:
            raise RuntimeError("ensure_image before open_engine")
        return ensure.ensure_image(
            self._engine,
            self.opts.image_ref,
            self.host.name,
            out,
            source=self.opts.image_source,
            build=self.opts.build,
        )

    def deliver(self, archive: str, outcome: HostOutcome, steps: Steps) -> None:
        self._pull.deliver(archive, outcome, steps)

    def stop_delivery(self) -> None:
        self._pull.stop()

    def delivery_stopped(self) -> Interrupted | None:
        return self._pull.stopped()
