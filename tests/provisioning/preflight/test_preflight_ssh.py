"""Preflight against the real sshd standing for the GPU host (no GPU on this machine)."""

from __future__ import annotations

import pytest

from bench.errors import HostCheckFailed
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.preflight import checks, report
from provisioning.preflight.report import Status
from provisioning.preflight.requirements import load_requirements
from provisioning.runs import targets
from tests.provisioning.conftest import SshTestHost

pytestmark = [pytest.mark.integration, pytest.mark.ssh]

A100_SMI = """\
cat <<'OUT'
0, NVIDIA A100-SXM4-80GB, 81920, 535.104.05
1, NVIDIA A100-SXM4-80GB, 81920, 535.104.05
OUT
"""


def _run(ssh_host: SshTestHost) -> report.Report:
    host = inventory.resolve(ssh_host.alias)
    with Remote(host) as remote:
        return checks.run_preflight(
            remote,
            load_requirements("published", 4),
            host=host.name,
            ssh_found=host.address,
            model_cache=host.model_cache,
            hf_token_present=False,
        )


def test_host_without_gpu_fails_the_gpu_check(ssh_host: SshTestHost) -> None:
    report = _run(ssh_host)
    by = {c.name: c for c in report.checks}
    assert by["ssh"].status is Status.OK
    assert by["GPUs"].status is Status.FAIL
    assert by["GPUs"].found == "nvidia-smi not found; launch published needs 4 GPUs"
    assert by["clock"].status is not Status.FAIL  # same machine: no offset
    with pytest.raises(HostCheckFailed, match="preflight of bench-test-host failed: GPUs"):
        report.raise_if_failed()


def test_stand_in_nvidia_smi_with_other_gpus_names_the_mismatch(ssh_host: SshTestHost) -> None:
    ssh_host.stand_in("nvidia-smi", A100_SMI)
    by = {c.name: c for c in _run(ssh_host).checks}
    assert by["GPUs"].status is Status.FAIL
    assert by["GPUs"].found == "2x NVIDIA A100-SXM4-80GB; launch published needs 4x RTX PRO 6000"
    assert by["driver"].status is Status.FAIL
    assert by["driver"].found == "535.104.05 is older than 580, needed by CUDA 13.2"
    assert by["GPU memory"].status is Status.FAIL


def test_docker_and_disk_are_read_from_the_host(ssh_host: SshTestHost) -> None:
    by = {c.name: c for c in _run(ssh_host).checks}
    assert by["docker"].status is Status.OK, by["docker"].found
    assert by["docker"].found.startswith("Docker ")
    assert "GiB free" in by["disk"].found


def test_docker_sdk_connection_is_checked_too(ssh_host: SshTestHost) -> None:
    # ssh (and so our own connection) finds the host key in a file named by the config;
    # the Docker SDK only reads ~/.ssh/known_hosts: preflight must say so before any run.
    elsewhere = ssh_host.home / "elsewhere_known_hosts"
    ssh_host.known_hosts.rename(elsewhere)
    config = ssh_host.ssh_config.read_text()
    ssh_host.ssh_config.write_text(config + f"  UserKnownHostsFile {elsewhere}\n")
    host = inventory.resolve(ssh_host.alias)
    with Remote(host) as remote:
        assert remote.run("true").ok
    check = targets.sdk_check(host)
    assert check.status is Status.FAIL
    assert "~/.ssh/known_hosts" in check.fix
    ssh_host.known_hosts.write_text(elsewhere.read_text())
    ok = targets.sdk_check(host)
    assert ok.status is Status.OK and ok.found.startswith("Docker SDK: ")


def _pro6000_smi(cuda: str) -> str:
    """A stand-in nvidia-smi for 4x RTX PRO 6000 whose header reports CUDA `cuda`."""
    rows = "\n".join(
        f"{i}, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, 97887, 580.95.05"
        for i in range(4)
    )
    return (
        'case "$1" in --query-gpu=*) cat <<OUT\n' + rows + "\nOUT\n;;\n"
        "*) echo '| NVIDIA-SMI 580.95.05   Driver Version: 580.95.05   CUDA Version: "
        + cuda
        + " |';;\nesac\n"
    )


def _published_target(ssh_host: SshTestHost) -> targets.HostTarget:
    choice = targets.TargetChoice(inventory=inventory.Inventory(), profile="published")
    return targets.resolve_target(choice, ssh_host.alias)


def test_a_cuda_13_0_driver_is_refused_in_one_line(ssh_host: SshTestHost) -> None:
    ssh_host.stand_in("nvidia-smi", _pro6000_smi("13.0"))
    target = _published_target(ssh_host)
    with pytest.raises(HostCheckFailed) as info:
        targets.preflight_host(target, trust_new_host=False, environ={})
    assert "driver CUDA" in info.value.message
    assert info.value.hint == (
        "install an NVIDIA driver that supports CUDA 13.2 or newer "
        "(nvidia-smi must show CUDA Version >= 13.2)"
    )


def test_a_cuda_13_2_driver_passes_the_cuda_check(ssh_host: SshTestHost) -> None:
    ssh_host.stand_in("nvidia-smi", _pro6000_smi("13.2"))
    target = _published_target(ssh_host)
    host = target.host
    with Remote(host) as remote:
        report = checks.run_preflight(
            remote,
            target.requirements,
            host=host.name,
            ssh_found=host.address,
            model_cache=host.model_cache,
            hf_token_present=False,
        )
    by = {c.name: c for c in report.checks}
    assert by["driver CUDA"].status is Status.OK, by["driver CUDA"]
    assert by["driver CUDA"].found.startswith("driver supports CUDA 13.2; image needs >= 13.2")
