"""Readiness: waiting for the server container to serve (the flow's step before the sweep).

Ready is /health answering 200 and /v1/models naming the launch profile's model, both
asked on the host's loopback through the host's shell (the API key in a header, never on a
command line). A container that exits meanwhile is an error with its log's last lines; one
still not ready after the profile's startup_timeout_s is one too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TextIO

from pydantic import SecretStr

from bench.errors import ServerError
from bench.launch_profile import LaunchProfile
from provisioning.containers.docker_sdk import ContainerFailed
from provisioning.containers.engine_side import EngineSide
from provisioning.flow.seams import ServerContainer, indent
from provisioning.hosts.shell import Shell

POLL_S = 1.0


def wait_ready(
    engine: EngineSide,
    shell: Shell,
    server: ServerContainer,
    profile: LaunchProfile,
    *,
    api_key: SecretStr | None,
    out: TextIO,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
    stopped: Callable[[], bool],
) -> None:
    """Return once the server serves; KeyboardInterrupt once `stopped()` (a Ctrl-C)."""
    name = shell.host.name
    headers = {}
    if api_key is not None:
        headers["Authorization"] = f"Bearer {api_key.get_secret_value()}"
    deadline = clock() + profile.startup_timeout_s
    while True:
        status, code = engine.state(server.cid)
        if status in ("exited", "dead", "removed"):
            tail = engine.log_tail(server.cid)
            raise ContainerFailed(
                f"the server container on {name} exited with {code} while "
                f"starting; last lines of its log:\n{indent(tail)}",
                log_tail=tail,
                hint="fix the launch (see the log above) and run again",
            )
        health = shell.http_get(server.port, "/health")
        if health is not None and health[0] == 200:
            models = shell.http_get(server.port, "/v1/models", headers=headers)
            if models is not None and profile.served_model_name.encode() in models[1]:
                print(f"[{name}] server ready", file=out)
                return
        if stopped():
            raise KeyboardInterrupt
        if clock() > deadline:
            raise ServerError(
                f"the server on {name} was not ready after "
                f"{profile.startup_timeout_s:.0f} s; last lines of its log:\n"
                f"{indent(engine.log_tail(server.cid))}"
            )
        sleep(POLL_S)
