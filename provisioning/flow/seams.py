"""The seams of the host flow (provisioning.flow.host_run) and the small things its steps share.

    Shell       what they need of the host's commands and files: provisioning.hosts.shell's
                Protocol, which Remote (SSH) and provisioning.hosts.local.LocalShell satisfy
    Placement   what differs between a host reached over SSH (provisioning.flow.over_ssh.OverSsh)
                and the Slurm node the code runs on (provisioning.slurm.node.OnNode): how the
                engine is reached, where the run directory and the signing key live, where
                the image comes from, where the signed bundle ends up

What they need of a host's container engine is provisioning.containers.engine_side's
EngineSide, a folder down: the image steps need it too.

The flow is given a Placement (composition): unit tests pass small typed fakes of these
through the public constructors. Also here: the step timer (Steps), the run's Workspace on
the host and its ServerContainer, as the steps pass them to each other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TextIO

from bench.errors import Interrupted
from provisioning.containers.engine_side import EngineSide
from provisioning.flow.options import HostOutcome

RUN_IN_CONTAINER = "/results/run"  # the run directory, in the server and helper containers
JIT_IN_CONTAINER = "/var/cache/jit"  # the vllm image's CUDA_CACHE_PATH etc. live under it
BUNDLES_IN_CONTAINER = "/bundles"  # the host's folder of runs, for packing


class Steps:
    """Timing of each step, for the summary and the note on where the time goes: `with
    steps("image"): ...` announces the step and records how long it took."""

    def __init__(self, outcome: HostOutcome, out: TextIO, clock: Callable[[], float]) -> None:
        self.outcome, self.out, self.clock = outcome, out, clock

    def __call__(self, name: str) -> _Step:
        return _Step(self, name)


class _Step:
    def __init__(self, steps: Steps, name: str) -> None:
        self._steps, self._name = steps, name

    def __enter__(self) -> None:
        self._t0 = self._steps.clock()
        print(f"[{self._steps.outcome.host}] {self._name} ...", file=self._steps.out, flush=True)

    def __exit__(self, *exc: object) -> None:
        took = self._steps.clock() - self._t0
        self._steps.outcome.timings_s[self._name] = round(took, 2)


@dataclass(frozen=True)
class Workspace:
    """Where the run's files are on the host, and as whom its containers run."""

    home: str
    uid_gid: str  # "uid:gid" of the account (containers run as it)
    run_dir: str  # what `bench run` writes (mounted at RUN_IN_CONTAINER)
    model_cache: str  # the host's Hugging Face cache
    signing_key: str  # the private key that signs the manifest, on the host

    @property
    def jit_cache(self) -> str:
        return f"{self.home}/.cache/bench-jit"


@dataclass
class ServerContainer:
    """The server container once started: its id, the host's port for its API, and its log
    so far (followed by the engine; followed again from the start after a reconnect)."""

    cid: str
    port: int
    log: list[str] = field(default_factory=list)


class Placement(Protocol):
    """What differs between a host over SSH and a Slurm node running its own part."""

    @property
    def directories_step(self) -> str:
        """The name of the step that makes the run directory ("host directories")."""
        ...

    def open_engine(self) -> EngineSide: ...

    def prepare(self, home: str, scope: str) -> tuple[str, str]:
        """Make the run directory and the signing key (trusted locally); returns (the run
        directory, the private key's path), both on the host."""
        ...

    def ensure_image(self, out: TextIO) -> str:
        """The image present on the engine open_engine opened; returns its id."""
        ...

    def deliver(self, archive: str, outcome: HostOutcome, steps: Steps) -> None:
        """The signed ARCHIVE (a path on the host) to where the user reads it; sets the
        outcome's archive (and local_dir, complete when it is opened here)."""
        ...

    def stop_delivery(self) -> None:
        """Ctrl-C: stop a delivery under way (nothing when none is)."""
        ...

    def delivery_stopped(self) -> Interrupted | None:
        """What to tell the user when a stop cut the delivery (None when it did not)."""
        ...


def indent(text: str) -> str:
    return "\n".join("    " + line for line in text.rstrip().splitlines())
