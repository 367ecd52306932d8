"""Preflight of a GPU host: one line per check, each with what to do when it fails.

Checks run over SSH with plain commands (nvidia-smi, docker info, df, date) so that the
host needs nothing installed by us. The GPU, driver and runtime checks compare against the
launch's Requirements; a failed check stops the run before anything is started.

This module runs them in order (run_preflight) and holds the SSH, Docker, token and clock
checks; the GPU checks are provisioning.preflight.gpu's, the disk and weights checks
provisioning.preflight.storage's, the Check/Report types provisioning.preflight.report's
(import them from there).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Protocol

from bench.errors import BenchError
from provisioning.hosts.shell import Probe
from provisioning.preflight.gpu import (
    check_driver_cuda,
    check_gpus,
)
from provisioning.preflight.memory import check_memory
from provisioning.preflight.report import Check, Report, Status, last_line, ok_or_fail
from provisioning.preflight.requirements import Requirements
from provisioning.preflight.storage import check_disk, check_weights

CLOCK_TOLERANCE_S = 2.0


class SshCaps(Protocol):
    """What the host's sshd allows on one connection (provisioning.hosts.remote.Remote
    has these)."""

    def session_capacity(self, wanted: int) -> int: ...

    def sftp_problem(self) -> str | None: ...

    def forwarding_problem(self) -> str | None: ...


def check_ssh_limits(caps: SshCaps, sessions_needed: int) -> list[Check]:
    """Sessions per connection (the Docker SDK holds up to `sessions_needed` on its own
    connection), SFTP (run files and the bundle travel over it), TCP forwarding to the
    host's loopback (readiness reaches the server's port through it). Sessions first: an
    SFTP session would count against the limit."""
    have = caps.session_capacity(sessions_needed)
    sessions = ok_or_fail(
        "ssh sessions",
        None if have >= sessions_needed else have,
        f">= {have} per connection (needs {sessions_needed})",
        f"sshd allows {have} session(s) per connection; the run needs {sessions_needed}",
        f"set MaxSessions {sessions_needed} or more in the host's sshd_config "
        "(OpenSSH's default is 10)",
    )
    problem = caps.sftp_problem()
    sftp = ok_or_fail(
        "sftp",
        problem,
        "SFTP subsystem available",
        f"no SFTP on the host ({problem}); run files and the bundle travel over it",
        "enable it in the host's sshd_config: Subsystem sftp /usr/lib/openssh/sftp-server",
    )
    problem = caps.forwarding_problem()
    forwarding = ok_or_fail(
        "port forwarding",
        problem,
        "TCP to the host's 127.0.0.1 allowed",
        f"sshd refuses TCP forwarding ({problem}); the server's port is reached through it",
        "allow it for this account in sshd_config: AllowTcpForwarding local",
    )
    return [sessions, sftp, forwarding]


def docker_info(probe: Probe) -> tuple[Check, dict[str, object]]:
    res = probe.run("docker info --format '{{json .}}'")
    if res.exit_code == 127:
        return Check(
            "docker", Status.FAIL, "docker not installed", "install Docker Engine on the host"
        ), {}
    if not res.ok:
        detail = last_line(res)
        fix = (
            "add the SSH user to the docker group (then log in again)"
            if "permission denied" in detail.lower()
            else "start the Docker daemon (systemctl start docker)"
        )
        return Check("docker", Status.FAIL, detail, fix), {}
    try:
        info: dict[str, object] = json.loads(res.stdout)
    except json.JSONDecodeError:
        return Check("docker", Status.FAIL, "docker info printed no JSON", "check Docker"), {}
    if info.get("ServerErrors"):
        return Check(
            "docker", Status.FAIL, str(info["ServerErrors"]), "start the Docker daemon"
        ), {}
    return Check("docker", Status.OK, f"Docker {info.get('ServerVersion', '?')}"), info


def check_runtime(probe: Probe, req: Requirements, info: dict[str, object]) -> Check:
    if req.gpus == 0:
        return Check("NVIDIA runtime", Status.SKIP, "not needed (no GPU)")
    runtimes = info.get("Runtimes")
    names = sorted(runtimes) if isinstance(runtimes, dict) else []
    if "nvidia" in names:
        return Check("NVIDIA runtime", Status.OK, "docker runtime 'nvidia'")
    res = probe.run("command -v nvidia-container-runtime-hook nvidia-ctk nvidia-container-cli")
    if res.ok and res.stdout.strip():
        tool = res.stdout.split()[0].rsplit("/", 1)[-1]
        return Check("NVIDIA runtime", Status.OK, f"{tool} (GPU requests through the hook)")
    return Check(
        "NVIDIA runtime",
        Status.FAIL,
        f"not found (docker runtimes: {', '.join(names) or 'none'})",
        "install nvidia-container-toolkit, then `nvidia-ctk runtime configure --runtime=docker`",
    )


def check_hf_token(req: Requirements, token_present: bool) -> Check:
    if not req.hf_token_required:
        return Check(
            "HF token", Status.OK, "not needed" + (f" ({req.hf_model})" if req.hf_model else "")
        )
    if token_present:
        return Check("HF token", Status.OK, "set (HF_TOKEN)")
    return Check(
        "HF token",
        Status.FAIL,
        f"{req.hf_model} is gated and HF_TOKEN is not set",
        "export HF_TOKEN=<a token with access to the model> (it is passed to containers only)",
    )


def check_clock(probe: Probe, clock: Callable[[], float]) -> Check:
    before = clock()
    res = probe.run(
        "date +%s.%N; (timedatectl show -p NTPSynchronized --value 2>/dev/null || true)"
    )
    after = clock()
    lines = res.stdout.split()
    try:
        remote = float(lines[0])
    except (ValueError, IndexError):
        return Check(
            "clock", Status.WARN, "could not read the host's clock", "check `date` on the host"
        )
    offset = remote - (before + after) / 2
    bound = (after - before) / 2
    ntp = lines[1] if len(lines) > 1 else "unknown"
    found = f"offset {offset:+.2f} s (±{bound:.2f}), NTP synchronised: {ntp}"
    if abs(offset) - bound > CLOCK_TOLERANCE_S:
        return Check(
            "clock", Status.FAIL, found, "sync the host's clock (chrony or systemd-timesyncd)"
        )
    if ntp == "no":
        return Check("clock", Status.WARN, found, "enable NTP: timedatectl set-ntp true")
    return Check("clock", Status.OK, found)


def run_preflight(
    probe: Probe,
    req: Requirements,
    *,
    host: str,
    ssh_found: str,
    model_cache: str,
    hf_token_present: bool,
    clock: Callable[[], float] = time.time,
    caps: SshCaps | None = None,
    sessions_needed: int = 4,
) -> Report:
    """Every check, in order; SSH is already known to work when this is called."""
    report = Report(host=host, checks=[Check("ssh", Status.OK, ssh_found)])
    if caps is not None:
        report.checks += check_ssh_limits(caps, sessions_needed)
    docker, info = docker_info(probe)
    report.checks.append(docker)
    gpu_checks, gpus = check_gpus(probe, req)
    report.checks += gpu_checks
    report.checks.append(check_driver_cuda(probe, req, bool(gpus)))
    report.checks.append(check_runtime(probe, req, info))
    report.checks.append(check_memory(probe, req))
    report.checks.append(check_disk(probe, req, model_cache, info))
    report.checks.append(check_weights(probe, req, model_cache))
    report.checks.append(check_hf_token(req, hf_token_present))
    report.checks.append(check_clock(probe, clock))
    return report


def ssh_failed_report(host: str, error: BenchError) -> Report:
    rest = [
        "ssh sessions",
        "sftp",
        "port forwarding",
        "docker",
        "GPUs",
        "GPU memory",
        "driver",
        "driver CUDA",
        "NVIDIA runtime",
        "memory",
        "disk",
    ]
    rest += ["weights", "HF token", "clock"]
    report = Report(host=host, checks=[Check("ssh", Status.FAIL, error.message, error.hint or "")])
    report.checks += [Check(n, Status.SKIP, "not checked (needs SSH)") for n in rest]
    return report
