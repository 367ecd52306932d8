"""What DockerEngine.start asks the Docker SDK to publish: `publish` on the host's 127.0.0.1
(the server's port, as always), `publish_on` on the address given (the run's metrics port,
provisioning.flow.live). The SDK is a stand-in; nothing connects."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from provisioning.containers import engine as engine_mod
from provisioning.containers.engine import ContainerSpec, DockerEngine
from provisioning.hosts.inventory import ResolvedHost


class _Containers:
    def __init__(self) -> None:
        self.runs: list[dict[str, Any]] = []

    def run(self, image: str, **kwargs: Any) -> Any:
        self.runs.append(kwargs)
        return type("Started", (), {"id": "c1", "short_id": "c1"})()


class _Client:
    def __init__(self) -> None:
        self.containers = _Containers()

    def close(self) -> None:
        pass


@pytest.fixture
def client(monkeypatch: pytest.MonkeyPatch) -> _Client:
    made = _Client()
    monkeypatch.setattr(engine_mod, "open_client", lambda *a, **k: (made, "27.0"))
    return made


def test_the_servers_port_stays_local_and_the_metrics_port_goes_where_it_is_asked(
    client: _Client,
) -> None:
    engine = DockerEngine(ResolvedHost(name="gpu01", hostname="gpu01", user="u", port=22))
    spec = ContainerSpec(image="i", command=("serve",), run_id="r1", role="server",
                         publish={8000: None})  # fmt: skip
    engine.start(spec)
    engine.start(dataclasses.replace(spec, publish_on={9464: ("0.0.0.0", 9464)}))
    before, after = (run["ports"] for run in client.containers.runs)
    assert before == {"8000/tcp": ("127.0.0.1", None)}
    assert after == {"8000/tcp": ("127.0.0.1", None), "9464/tcp": ("0.0.0.0", 9464)}
