"""The Docker SDK's connection to an engine, and its exceptions as ours.

With provisioning.containers.engine (the engine's images and containers) and
provisioning.containers.local_images (this machine's own engine), the only modules that import the
docker SDK.

The SDK speaks to the host's engine with `docker system dial-stdio` over its own paramiko
connection (`ssh://user@name:port`, use_ssh_client=False). That connection reads
~/.ssh/config for the name (HostName, IdentityFile, ProxyCommand) and checks the host key
against ~/.ssh/known_hosts with paramiko's RejectPolicy: an unknown or changed key fails.
provisioning.hosts.remote has checked (or, with --trust-new-host, recorded) the key before any
container call, so both connections trust the same key. (The SDK's other mode shells out
to the system `ssh`, which reads the password database's home rather than HOME and cannot
be given a config file; it is not used.)

The SDK's connection keeps within OpenSSH's defaults: each pooled HTTP connection is one SSH
session (`docker system dial-stdio`), and a stock sshd allows 10 per connection
(MaxSessions). The SDK as shipped keeps a pool per request URL, up to 10 idle connections in
each, and opens more when they are busy, so a run reached 16 channels and the host refused
the next ("open failed"). Here the SDK gets one pool of SDK_SESSIONS connections that waits
for a free one instead of opening another; preflight checks the host allows that many.
"""

from __future__ import annotations

from typing import Any

import docker
import docker.errors
import paramiko
import requests.exceptions
import urllib3

from bench.errors import BenchError, HostCheckFailed, RunFailed, ServerError
from provisioning.hosts.inventory import ResolvedHost


class EngineUnreachable(HostCheckFailed):
    pass


class SessionRefused(EngineUnreachable):
    """The host's sshd refused a session on a working connection (MaxSessions)."""


class ContainerFailed(ServerError):
    """A container exited when it should be running; carries its log tail."""

    def __init__(self, message: str, *, log_tail: str, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.log_tail = log_tail


class ImageMissing(RunFailed):
    pass


def wrap(action: str, exc: BaseException) -> BenchError:
    """EXC, a failure of the SDK or its transport while doing ACTION, as our error."""
    if isinstance(exc, docker.errors.ImageNotFound):
        return ImageMissing(f"{action}: image not found on the host: {exc.explanation}")
    if isinstance(exc, docker.errors.APIError):
        return RunFailed(f"{action}: the Docker engine said: {exc.explanation or exc}")
    if isinstance(exc, paramiko.ChannelException):
        # The connection is up; the host's sshd refused one more session on it.
        return SessionRefused(
            f"{action}: the host's sshd refused another SSH session ({exc}); the connection "
            "itself is up",
            hint=f"the run needs {SDK_SESSIONS} sessions per connection: MaxSessions in the "
            "host's sshd_config (OpenSSH's default 10 is enough)",
        )
    return EngineUnreachable(
        f"{action}: lost the Docker engine over ssh: {exc or type(exc).__name__}",
        hint="check `ssh HOST docker version`",
    )


# At most this many SSH sessions on the SDK's connection: the server's log and the sweep's
# output are held open for a whole run, and one more serves every short call.
SDK_SESSIONS = 4
_POOL_KEY = "http+docker://ssh/engine"


def _one_bounded_pool(client: docker.DockerClient) -> None:
    """Route every request of the SDK's SSH adapter through one pool of SDK_SESSIONS that
    blocks when all are busy (see the module docstring)."""
    adapter: Any = client.api.get_adapter("http+docker://ssh")  # the SDK's SSHHTTPAdapter
    per_url = adapter.get_connection

    def get_connection(url: str, proxies: object = None) -> urllib3.HTTPConnectionPool:
        pool: urllib3.HTTPConnectionPool = per_url(_POOL_KEY, proxies)
        pool.block = True
        return pool

    adapter.get_connection = get_connection


# What the SDK and its SSH transport raise: wrap turns each into one of ours.
TRANSPORT_ERRORS = (
    docker.errors.DockerException,
    paramiko.SSHException,
    requests.exceptions.RequestException,
    OSError,
    EOFError,
)


def open_client(
    host: ResolvedHost, *, timeout_s: float, local: bool
) -> tuple[docker.DockerClient, str]:
    """A client of HOST's engine over SSH (LOCAL: this machine's, DOCKER_HOST or its socket)
    and the engine's version; EngineUnreachable (or what wrap makes of it) when none answers."""
    if local:
        try:
            client = docker.from_env(timeout=int(timeout_s))
            return client, str(client.version().get("Version", "?"))
        except TRANSPORT_ERRORS as exc:
            raise EngineUnreachable(
                f"no Docker engine answers on {host.name}: {exc}",
                hint="on the node, `docker version` must work for this user "
                "(the docker group, or a rootless engine in DOCKER_HOST)",
            ) from None
    url = f"ssh://{host.user}@{host.name}:{host.port}"
    try:
        client = docker.DockerClient(
            base_url=url,
            use_ssh_client=False,
            timeout=int(timeout_s),
            max_pool_size=SDK_SESSIONS,
        )
        _one_bounded_pool(client)
        return client, str(client.version().get("Version", "?"))
    except paramiko.SSHException as exc:
        raise EngineUnreachable(
            f"the Docker SDK could not open ssh to {host.address}: {exc}",
            hint="it uses ~/.ssh/config and checks ~/.ssh/known_hosts; "
            "`ssh HOST docker version` must work",
        ) from None
    except TRANSPORT_ERRORS as exc:
        raise wrap(f"connecting to Docker on {host.name}", exc) from None
