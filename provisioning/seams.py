"""The seams of the host flow (provisioning.flow) and the small things its steps share.

    EngineSide  what the flow and its steps need of a host's container engine;
                provisioning.containers.Engine is one (over SSH, or the node's own)
    Shell       what they need of the host's commands and files: provisioning.shell's
                Protocol, which Remote (SSH) and provisioning.local.LocalShell satisfy
    Placement   what differs between a host reached over SSH (provisioning.placement.OverSsh)
                and the Slurm node the code runs on (provisioning.node.OnNode): how the
                engine is reached, where the run directory and the signing key live, where
                the image comes from, where the signed bundle ends up

The flow is given a Placement (composition): unit tests pass small typed fakes of these
through the public constructors. Also here: the step timer (Steps), the run's Workspace on
the host and its Server container, as the steps pass them to each other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol, TextIO

from bench.errors import Interrupted
from provisioning.containers import ContainerSpec
from provisioning.run_options import Outcome

RUN_IN_CONTAINER = "/results/run"  # the run directory, in the server and helper containers
JIT_IN_CONTAINER = "/var/cache/jit"  # the vllm image's CUDA_CACHE_PATH etc. live under it
BUNDLES_IN_CONTAINER = "/bundles"  # the host's folder of runs, for packing


class EngineSide(Protocol):
    """What the flow needs of a host's container engine (provisioning.containers.Engine)."""

    def start(self, spec: ContainerSpec) -> str: ...

    def state(self, cid: str) -> tuple[str, int | None]: ...

    def host_port(self, cid: str, container_port: int) -> int: ...

    def log_tail(self, cid: str, lines: int = 30) -> str: ...

    def follow_logs(self, cid: str, on_line: Callable[[str], None]) -> object: ...

    def exec_stream(
        self,
        cid: str,
        command: Iterable[str],
        *,
        environment: Mapping[str, str] | None = None,
        user: str | None = None,
        workdir: str | None = None,
    ) -> tuple[str, Iterator[bytes]]: ...

    def exec_result(self, exec_id: str) -> tuple[bool, int | None, int]: ...

    def wait(self, cid: str, timeout_s: float) -> int: ...

    def image_labels(self, ref: str) -> dict[str, str]: ...

    def remove_run(self, run_id: str, *, keep_roles: Iterable[str] = ()) -> list[str]: ...

    def reconnect(self) -> None: ...

    def close(self) -> None: ...


class Steps:
    """Timing of each step, for the summary and the note on where the time goes: `with
    steps("image"): ...` announces the step and records how long it took."""

    def __init__(self, outcome: Outcome, out: TextIO, clock: Callable[[], float]) -> None:
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
class Server:
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

    def deliver(self, archive: str, outcome: Outcome, steps: Steps) -> None:
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
