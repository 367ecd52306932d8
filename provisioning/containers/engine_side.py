"""What the host flow and the image steps need of a host's container engine.

provisioning.containers.engine.DockerEngine is one (over SSH, or the node's own engine); the
unit tests pass small typed fakes of it. It lives here, under the image and the flow
folders that use it, so neither reaches up for it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Protocol

from provisioning.containers.engine import ContainerSpec


class EngineSide(Protocol):
    """What the flow needs of a host's container engine (containers.engine.DockerEngine is one)."""

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
