"""Reopening a host's two connections (its commands and its container engine) after the
SSH connection dropped, with backoff; HostLost when the host stays unreachable.

What runs on the host does not depend on them: containers and execs keep their ids, so
the flow (provisioning.flow.host_run) goes on where it was: the sweep inside the container is
awaited, the signing redone, the clean-up done over the fresh connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

import structlog

from bench.errors import BenchError, RunFailed
from provisioning.containers.docker_sdk import EngineUnreachable
from provisioning.containers.engine_side import EngineSide
from provisioning.flow.seams import ServerContainer
from provisioning.hosts.remote import SshUnreachable
from provisioning.hosts.shell import Shell
from provisioning.retry import retry_call

log = structlog.get_logger("provisioning.flow")


class HostLost(RunFailed):
    """The SSH connection dropped and could not be reopened within the retries."""


class Reconnector:
    """Reconnect(lost) reopens both connections of one host, or raises HostLost.

    `dropped` says whether a drop happened while the sweep ran (the sweep's exec is then
    judged by its run directory); `server`, once started, has its log followed again.
    """

    def __init__(
        self,
        host: str,
        shell: Shell,
        engine: EngineSide,
        *,
        out: TextIO,
        sleep: Callable[[float], None],
    ) -> None:
        self.host, self.shell, self.engine = host, shell, engine
        self.out, self.sleep = out, sleep
        self.dropped = False  # the connection dropped (and was reopened) during the sweep
        self.server: ServerContainer | None = None

    def __call__(
        self, lost: BenchError, *, sweeping: bool = True, then: str = "cleaning up"
    ) -> None:
        """Reopen both connections (commands and Docker) after a drop, with backoff.

        What runs on the host does not depend on them: containers and execs keep their ids.
        Raises HostLost when the host stays unreachable.
        """
        name, engine = self.host, self.engine
        print(f"[{name}] lost the connection ({lost.message}); reconnecting ...", file=self.out)
        log.warning("ssh_reconnecting", host=name, error=lost.one_line())

        def engine_once(attempt: int) -> int:
            engine.reconnect()
            return attempt

        try:
            self.shell.reconnect()  # retries with backoff itself
            attempt = retry_call(
                engine_once,
                self.shell.retry,
                transient=lambda exc: isinstance(exc, EngineUnreachable),
                event="engine_reconnect_retry",
                log_fields=lambda: {"host": name},
                wait_first=True,  # the link has just dropped: trying at once is pointless
                sleep=self.sleep,
            )
        except (SshUnreachable, EngineUnreachable) as exc:
            raise HostLost(
                f"lost ssh to {name} and could not reconnect ({exc.message}); "
                "the run's containers may still be there",
                hint=f"once `ssh {name} true` works, remove them: "
                f"python -m provisioning clean {name}",
            ) from None
        if sweeping:
            self.dropped = True
            if self.server is not None:  # its log follower went with the connection
                self.server.log.clear()  # followed again from the start: none lost
                engine.follow_logs(self.server.cid, self.server.log.append)
        going_on = "the sweep goes on inside the container" if sweeping else then
        print(f"[{name}] reconnected; {going_on}", file=self.out)
        log.info("ssh_reconnected", host=name, attempt=attempt + 1)
