"""Containers on a GPU host through the Docker SDK over SSH: images, containers, execs.

The SDK's connection (one bounded pool of SSH sessions) and its exceptions as ours are
docker_sdk's, beside this module; this machine's own images are local_images'.

Every container carries labels (app, run id, role) so that clean-up finds exactly the
containers of one run, also after a crash of this process.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import IO, Any, cast

import docker
import docker.errors
import docker.utils.build
import structlog

from bench.errors import RunFailed
from bench.secrets import KnownSecrets
from provisioning.containers.docker_sdk import (
    TRANSPORT_ERRORS,
    open_client,
    wrap,
)
from provisioning.hosts.inventory import ResolvedHost

log = structlog.get_logger("provisioning.containers")

LABEL_APP = "org.vllm-bench.app"
LABEL_RUN = "org.vllm-bench.run-id"
LABEL_ROLE = "org.vllm-bench.role"
APP = "vllm-bench"


@dataclass(frozen=True)
class Mount:
    source: str  # absolute path on the host
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class ContainerSpec:
    """One container of a run, as the launch profile and the flow describe it."""

    image: str
    command: tuple[str, ...]
    run_id: str
    role: str  # "server", "weights", "sign", ...
    gpus: int = 0
    environment: Mapping[str, str] = field(default_factory=dict)
    mounts: tuple[Mount, ...] = ()
    publish: Mapping[int, int | None] = field(default_factory=dict)  # container → host port
    # Container port → (host address, host port): reachable from the host's network (the run's
    # metrics port, provisioning.flow.live); `publish` binds the host's 127.0.0.1 only.
    publish_on: Mapping[int, tuple[str, int]] = field(default_factory=dict)
    user: str | None = None  # "uid:gid"
    shm_size: str | None = None
    ipc_host: bool = False
    working_dir: str | None = None
    # The container's hostname: the host's own name for the server, so that what `bench run`
    # records inside it (environment.json's host.hostname) names the host, not a container id.
    hostname: str | None = None

    @property
    def name(self) -> str:
        return f"vllm-bench-{self.run_id}-{self.role}"


class DockerEngine:
    """The Docker engine of one host."""

    def __init__(
        self,
        host: ResolvedHost,
        *,
        timeout_s: float = 120.0,
        local: bool = False,
        secrets: KnownSecrets | None = None,
    ) -> None:
        """LOCAL: the engine of the machine this runs on (DOCKER_HOST, else its socket), as
        a Slurm node's own part of a job uses it; else HOST's over SSH. SECRETS: masked in
        every line of a container's log this hands on (a server may log what it was sent:
        the one door of bench.secrets, on this side)."""
        self.host = host
        self.secrets = secrets or KnownSecrets()
        self._timeout_s = timeout_s
        self._local = local
        self._connect()

    def _connect(self) -> None:
        self._client, self.server_version = open_client(
            self.host, timeout_s=self._timeout_s, local=self._local
        )

    def close(self) -> None:
        self._client.close()

    def reconnect(self) -> None:
        """A fresh SSH connection to the engine (after a drop); EngineUnreachable if none.

        Containers and execs live in the engine, not in the connection: their ids stay valid.
        """
        try:
            self._client.close()
        except TRANSPORT_ERRORS as exc:  # the old connection is already gone
            log.debug("engine_close_failed", error=str(exc))
        self._connect()

    def __enter__(self) -> DockerEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- images -----------------------------------------------------------------------------

    def image_id(self, ref: str) -> str | None:
        """The image's content-addressed id (sha256:...) when the host has it, else None."""
        try:
            return str(self._client.images.get(ref).id)
        except docker.errors.ImageNotFound:
            return None
        except TRANSPORT_ERRORS as exc:
            raise wrap(f"looking up image {ref}", exc) from None

    def registry_problem(self, ref: str) -> str | None:
        """Why the host's engine cannot reach the registry REF lives in (one line), or None
        when it can: the engine asks for REF's manifest, as a pull would, and pulls nothing."""
        try:
            self._client.api.inspect_distribution(ref)  # type: ignore[no-untyped-call]
        except docker.errors.APIError as exc:
            why = str(exc.explanation or exc).strip().splitlines()
            return why[0][:200] if why else "the registry did not answer"
        except TRANSPORT_ERRORS as exc:
            raise wrap(f"asking the registry for {ref}", exc) from None
        return None

    def load(self, chunks: Iterable[bytes]) -> list[str]:
        """`docker load` from a stream of tar chunks; returns the loaded image ids."""
        try:
            # A generator body: requests sends it chunked (the stubs only know bytes/files).
            images = self._client.images.load(cast(bytes, _stream(chunks)))
            return [str(i.id) for i in images]
        except TRANSPORT_ERRORS as exc:
            raise wrap("loading the image on the host", exc) from None

    def image_labels(self, ref: str) -> dict[str, str]:
        """The labels of an image on the host (an id or a tag)."""
        try:
            labels = self._client.images.get(ref).labels
        except TRANSPORT_ERRORS as exc:
            raise wrap(f"reading the labels of {ref}", exc) from None
        return {str(k): str(v) for k, v in (labels or {}).items()}

    def build(self, context: IO[bytes], params: Mapping[str, str]) -> Iterator[dict[str, Any]]:
        """`POST /build` with BuildKit (version=2); yields the engine's JSON messages.

        The SDK's images.build speaks only to the classic builder, which cannot run the
        Dockerfile's `RUN --mount=type=cache`; BuildKit in the engine takes the same tar
        context as the request body. No timeout: a stage may compile for long in silence.
        """
        api = self._client.api
        url = f"{api.base_url}/v{api.api_version}/build"
        query = {**params, "version": "2"}
        try:
            response = api.post(
                url, params=query, data=context, stream=True, timeout=None,
                headers={"Content-Type": "application/x-tar"},
            )  # fmt: skip
            if response.status_code != 200:
                raise RunFailed(f"building on {self.host.name}: the Docker engine said: "
                                f"{_error_text(response.text)}")  # fmt: skip
            for line in response.iter_lines():
                if line.strip():
                    yield json.loads(line)
        except TRANSPORT_ERRORS as exc:
            raise wrap("building the image on the host", exc) from None

    # -- containers -------------------------------------------------------------------------

    def start(self, spec: ContainerSpec) -> str:
        """Create and start a container; returns its id."""
        kwargs: dict[str, Any] = {
            "name": spec.name,
            "command": list(spec.command),
            "detach": True,
            "labels": {LABEL_APP: APP, LABEL_RUN: spec.run_id, LABEL_ROLE: spec.role},
            "environment": dict(spec.environment),
            "volumes": {
                m.source: {"bind": m.target, "mode": "ro" if m.read_only else "rw"}
                for m in spec.mounts
            },
            "ports": {
                **{f"{c}/tcp": ("127.0.0.1", h) for c, h in spec.publish.items()},
                **{f"{c}/tcp": on for c, on in spec.publish_on.items()},
            },
        }
        if spec.user:
            kwargs["user"] = spec.user
        if spec.working_dir:
            kwargs["working_dir"] = spec.working_dir
        if spec.hostname:
            kwargs["hostname"] = spec.hostname
        if spec.shm_size:
            kwargs["shm_size"] = spec.shm_size
        if spec.ipc_host:
            kwargs["ipc_mode"] = "host"
        if spec.gpus:
            kwargs["device_requests"] = [
                docker.types.DeviceRequest(count=spec.gpus, capabilities=[["gpu"]])
            ]
        try:
            container = self._client.containers.run(spec.image, **kwargs)
        except TRANSPORT_ERRORS as exc:
            raise wrap(f"starting {spec.name}", exc) from None
        log.info("container_started", name=spec.name, id=container.short_id, image=spec.image)
        return str(container.id)

    def state(self, cid: str) -> tuple[str, int | None]:
        """(status, exit code when exited)."""
        try:
            c = self._client.containers.get(cid)
        except docker.errors.NotFound:
            return "removed", None
        except TRANSPORT_ERRORS as exc:
            raise wrap("reading container state", exc) from None
        st = c.attrs.get("State", {})
        code = st.get("ExitCode") if c.status in ("exited", "dead") else None
        return str(c.status), code

    def host_port(self, cid: str, container_port: int) -> int:
        try:
            c = self._client.containers.get(cid)
        except TRANSPORT_ERRORS as exc:
            raise wrap("reading published ports", exc) from None
        bindings = (c.attrs["NetworkSettings"]["Ports"] or {}).get(f"{container_port}/tcp") or []
        if not bindings:
            raise RunFailed(f"container {c.name} publishes no port {container_port}")
        return int(bindings[0]["HostPort"])

    def log_tail(self, cid: str, lines: int = 30) -> str:
        try:
            raw: bytes = self._client.containers.get(cid).logs(tail=lines)
        except docker.errors.NotFound:
            return ""
        except TRANSPORT_ERRORS as exc:
            raise wrap("reading the container log", exc) from None
        return self.secrets.mask(raw.decode(errors="replace"))

    def follow_logs(self, cid: str, on_line: Callable[[str], None]) -> threading.Thread:
        """Call on_line for every log line until the container stops (a daemon thread)."""

        def pump() -> None:
            try:
                stream = self._client.containers.get(cid).logs(stream=True, follow=True)
                buf = b""
                for chunk in stream:
                    buf += chunk
                    while b"\n" in buf:
                        line, buf = buf.split(b"\n", 1)
                        on_line(self.secrets.mask(line.decode(errors="replace")))
                if buf:
                    on_line(self.secrets.mask(buf.decode(errors="replace")))
            except TRANSPORT_ERRORS as exc:  # the container went away: the follower ends
                log.debug("log_follow_ended", error=str(exc))

        thread = threading.Thread(target=pump, name=f"logs-{cid[:12]}", daemon=True)
        thread.start()
        return thread

    def exec_stream(
        self,
        cid: str,
        command: Iterable[str],
        *,
        environment: Mapping[str, str] | None = None,
        user: str | None = None,
        workdir: str | None = None,
    ) -> tuple[str, Iterator[bytes]]:
        """Start a command inside a running container; returns (exec id, output stream).

        KnownSecrets go in `environment` (the API request body), never in the command.
        """
        api = self._client.api
        try:
            exec_id = api.exec_create(
                cid,
                list(command),
                environment=dict(environment or {}),
                user=user or "",
                workdir=workdir,
            )["Id"]
            stream = api.exec_start(exec_id, stream=True, demux=False)
        except TRANSPORT_ERRORS as exc:
            raise wrap("starting a command in the container", exc) from None
        return str(exec_id), _mapped(stream, "following a command's output")

    def exec_result(self, exec_id: str) -> tuple[bool, int | None, int]:
        """(still running, exit code, host pid) of an exec."""
        try:
            info = self._client.api.exec_inspect(exec_id)
        except TRANSPORT_ERRORS as exc:
            raise wrap("reading a command's state", exc) from None
        return bool(info["Running"]), info.get("ExitCode"), int(info.get("Pid") or 0)

    def wait(self, cid: str, timeout_s: float) -> int:
        try:
            res = self._client.containers.get(cid).wait(timeout=timeout_s)
        except TRANSPORT_ERRORS as exc:
            raise wrap("waiting for a container", exc) from None
        return int(res.get("StatusCode", -1))

    def run_ids(self) -> set[str]:
        """Run ids of every vllm-bench container on the host (running or not)."""
        return {c.labels.get(LABEL_RUN, "") for c in self._list({LABEL_APP: APP})}

    def _list(self, labels: Mapping[str, str]) -> list[Any]:
        filters: dict[str, str | list[str] | bool] = {
            "label": [f"{k}={v}" for k, v in labels.items()]
        }
        try:
            return list(self._client.containers.list(all=True, filters=filters))
        except TRANSPORT_ERRORS as exc:
            raise wrap("listing containers", exc) from None

    def containers_of(self, run_id: str) -> list[str]:
        return [str(c.name) for c in self._list({LABEL_APP: APP, LABEL_RUN: run_id})]

    def remove_run(self, run_id: str, *, keep_roles: Iterable[str] = ()) -> list[str]:
        """Stop and remove every container of the run (but those of keep_roles)."""
        keep = set(keep_roles)
        removed = []
        for c in self._list({LABEL_APP: APP, LABEL_RUN: run_id}):
            if c.labels.get(LABEL_ROLE) in keep:
                continue
            try:
                c.remove(force=True)
                removed.append(str(c.name))
            except docker.errors.NotFound:
                continue
            except TRANSPORT_ERRORS as exc:
                raise wrap(f"removing {c.name}", exc) from None
        if removed:
            log.info("containers_removed", run_id=run_id, names=removed)
        return removed


def _mapped(chunks: Iterator[bytes], action: str) -> Iterator[bytes]:
    """The SDK's output stream with its transport errors as ours (a dropped connection)."""
    try:
        yield from chunks
    except TRANSPORT_ERRORS as exc:
        raise wrap(action, exc) from None


def _error_text(body: str) -> str:
    try:
        doc = json.loads(body)
    except ValueError:
        return body.strip()
    return str(doc.get("message", body)) if isinstance(doc, dict) else body.strip()


def _stream(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """A generator body: requests sends it chunked, never holding the image in memory."""
    yield from chunks
