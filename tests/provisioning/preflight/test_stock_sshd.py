"""A host nobody tuned: Debian's stock sshd and a non-root docker-group account (issue 18).

Each test starts the real sshd of tests/setup/sshd.sh in one variant (the stock config,
MaxSessions 1 or 2, no SFTP, no forwarding, another account) and checks that the run works
within it, or that preflight refuses it in one line naming what to change.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from provisioning.containers import docker_sdk
from provisioning.containers.engine import DockerEngine
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.preflight import checks, report
from provisioning.preflight.report import Status
from provisioning.preflight.requirements import load_requirements
from tests.provisioning.conftest import SshTestHost, start_sshd, stop_sshd

pytestmark = [pytest.mark.integration, pytest.mark.ssh, pytest.mark.docker]


@pytest.fixture
def variant_host(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SshTestHost]:
    host = start_sshd(tmp_path / "sshd", variant=getattr(request, "param", {}))
    monkeypatch.setenv("HOME", str(host.home))
    try:
        yield host
    finally:
        stop_sshd(host)


def _preflight(host: SshTestHost) -> dict[str, report.Check]:
    h = inventory.resolve(host.alias)
    with Remote(h) as remote:
        report = checks.run_preflight(
            remote,
            load_requirements("twin", 0),
            host=h.name,
            ssh_found=h.address,
            model_cache=h.model_cache,
            hf_token_present=False,
            caps=remote,
            sessions_needed=docker_sdk.SDK_SESSIONS,
        )
    return {c.name: c for c in report.checks}


def test_stock_config_as_a_docker_group_user_passes_every_ssh_check(
    variant_host: SshTestHost,
) -> None:
    assert variant_host.user.startswith("bench-")
    active = [
        line.split()[0]
        for line in (variant_host.dir / "sshd_config").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # Only the documented changes; everything else is Debian's file as shipped.
    added = active[: active.index("Include")]
    assert added == ["ListenAddress", "HostKey", "PidFile", "SetEnv"]
    by = _preflight(variant_host)
    for name in ("ssh sessions", "sftp", "port forwarding", "docker"):
        assert by[name].status is Status.OK, by[name]


def test_the_sdk_stays_within_stock_max_sessions_under_concurrent_calls(
    variant_host: SshTestHost,
) -> None:
    """Twenty calls from eight threads at once, with a log stream held open: the SDK's one
    bounded pool never asks the stock sshd (MaxSessions 10) for an 11th session."""
    h = inventory.resolve(variant_host.alias)
    errors: list[BaseException] = []
    with DockerEngine(h) as engine:

        def calls() -> None:
            try:
                for _ in range(20):
                    engine.image_id("no-such-image:for-this-test")
            except BaseException as exc:  # collected and asserted below
                errors.append(exc)

        threads = [threading.Thread(target=calls) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    assert errors == []
    log = variant_host.log.read_text(errors="replace")
    assert "open failed" not in log and "no more sessions" not in log


@pytest.mark.parametrize("variant_host", [{"SSHD_OPTIONS": "MaxSessions 2"}], indirect=True)
def test_max_sessions_2_is_refused_in_one_line(variant_host: SshTestHost) -> None:
    check = _preflight(variant_host)["ssh sessions"]
    assert check.status is Status.FAIL
    assert check.found == "sshd allows 2 session(s) per connection; the run needs 4"


@pytest.mark.parametrize("variant_host", [{"SSHD_OPTIONS": "MaxSessions 1"}], indirect=True)
def test_max_sessions_1_is_refused_in_one_line(variant_host: SshTestHost) -> None:
    check = _preflight(variant_host)["ssh sessions"]
    assert check.status is Status.FAIL
    assert "allows 1 session(s)" in check.found and "MaxSessions 4" in check.fix


@pytest.mark.parametrize("variant_host", [{"SSHD_NO_SFTP": "1"}], indirect=True)
def test_no_sftp_is_named_by_preflight(variant_host: SshTestHost) -> None:
    check = _preflight(variant_host)["sftp"]
    assert check.status is Status.FAIL
    assert check.found.startswith("no SFTP on the host")
    assert "Subsystem sftp" in check.fix


@pytest.mark.parametrize("variant_host", [{"SSHD_OPTIONS": "AllowTcpForwarding no"}], indirect=True)
def test_no_tcp_forwarding_is_named_by_preflight(variant_host: SshTestHost) -> None:
    check = _preflight(variant_host)["port forwarding"]
    assert check.status is Status.FAIL
    assert "AllowTcpForwarding local" in check.fix


@pytest.mark.parametrize(
    "variant_host", [{"SSHD_OPTIONS": "AllowStreamLocalForwarding no"}], indirect=True
)
def test_no_stream_local_forwarding_does_not_matter(variant_host: SshTestHost) -> None:
    """The SDK reaches the engine with `docker system dial-stdio`, not a forwarded socket."""
    by = _preflight(variant_host)
    assert all(by[n].status is Status.OK for n in ("ssh sessions", "sftp", "port forwarding"))
    with DockerEngine(inventory.resolve(variant_host.alias)) as engine:
        assert engine.server_version


@pytest.mark.parametrize("variant_host", [{"SSHD_DOCKER_GROUP": "0"}], indirect=True)
def test_a_user_outside_the_docker_group_is_refused_naming_the_group(
    variant_host: SshTestHost,
) -> None:
    check = _preflight(variant_host)["docker"]
    assert check.status is Status.FAIL
    assert "permission denied" in check.found.lower()
    assert check.fix == "add the SSH user to the docker group (then log in again)"


@pytest.mark.parametrize("variant_host", [{"SSHD_USER": "root"}], indirect=True)
def test_root_is_one_case_among_others(variant_host: SshTestHost) -> None:
    assert variant_host.user == "root"
    by = _preflight(variant_host)
    assert all(by[n].status is Status.OK for n in ("ssh sessions", "sftp", "docker"))


def _groups(user: str) -> set[str]:
    return set(subprocess.run(["id", "-nG", user], capture_output=True, text=True,
                              check=True).stdout.split())  # fmt: skip


def test_an_account_left_on_a_port_gets_the_docker_membership_asked_for(tmp_path: Path) -> None:
    """Accounts outlive their servers (a port is reused; userdel can fail while a session
    lingers): a server started on the port of a no-docker-group account must still give
    its account the docker group, and the other way round. (CI once failed a preflight test
    because its port had belonged to the no-docker variant.)"""
    outside = start_sshd(tmp_path / "a", variant={"SSHD_DOCKER_GROUP": "0"})
    try:
        assert "docker" not in _groups(outside.user)
    finally:
        stop_sshd(outside, forget=False)
    inside = start_sshd(tmp_path / "b", port=outside.port)
    try:
        assert inside.user == outside.user and "docker" in _groups(inside.user)
    finally:
        stop_sshd(inside, forget=False)
    again = start_sshd(tmp_path / "c", port=outside.port, variant={"SSHD_DOCKER_GROUP": "0"})
    try:
        assert "docker" not in _groups(again.user)
    finally:
        stop_sshd(again)
    assert subprocess.run(["id", again.user], capture_output=True, check=False).returncode != 0
