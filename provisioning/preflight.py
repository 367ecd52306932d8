"""Preflight of a GPU host: one line per check, each with what to do when it fails.

Checks run over SSH with plain commands (nvidia-smi, docker info, df, date) so that the
host needs nothing installed by us. The GPU, driver and runtime checks compare against the
launch's Requirements; a failed check stops the run before anything is started.
"""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol

from tabulate import tabulate

from bench.errors import BenchError, HostCheckFailed
from provisioning import cuda_compat, weights
from provisioning.remote import CommandResult, Probe
from provisioning.requirements import GIB, Requirements

CLOCK_TOLERANCE_S = 2.0
_NVIDIA_SMI = (
    "nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader,nounits"
)


class Status(StrEnum):
    OK = "ok"
    FAIL = "FAIL"
    WARN = "warn"
    SKIP = "-"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    found: str
    fix: str = ""


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int
    driver: str


class SshCaps(Protocol):
    """What the host's sshd allows on one connection (provisioning.remote.Remote has these)."""

    def session_capacity(self, wanted: int) -> int: ...

    def sftp_problem(self) -> str | None: ...

    def forwarding_problem(self) -> str | None: ...


def check_ssh_limits(caps: SshCaps, sessions_needed: int) -> list[Check]:
    """Sessions per connection (the Docker SDK holds up to `sessions_needed` on its own
    connection), SFTP (run files and the bundle travel over it), TCP forwarding to the
    host's loopback (readiness reaches the server's port through it). Sessions first: an
    SFTP session would count against the limit."""
    have = caps.session_capacity(sessions_needed)
    sessions = _ok_or_fail(
        "ssh sessions",
        None if have >= sessions_needed else have,
        f">= {have} per connection (needs {sessions_needed})",
        f"sshd allows {have} session(s) per connection; the run needs {sessions_needed}",
        f"set MaxSessions {sessions_needed} or more in the host's sshd_config "
        "(OpenSSH's default is 10)",
    )
    problem = caps.sftp_problem()
    sftp = _ok_or_fail(
        "sftp",
        problem,
        "SFTP subsystem available",
        f"no SFTP on the host ({problem}); run files and the bundle travel over it",
        "enable it in the host's sshd_config: Subsystem sftp /usr/lib/openssh/sftp-server",
    )
    problem = caps.forwarding_problem()
    forwarding = _ok_or_fail(
        "port forwarding",
        problem,
        "TCP to the host's 127.0.0.1 allowed",
        f"sshd refuses TCP forwarding ({problem}); the server's port is reached through it",
        "allow it for this account in sshd_config: AllowTcpForwarding local",
    )
    return [sessions, sftp, forwarding]


def _ok_or_fail(name: str, problem: object, ok: str, failed: str, fix: str) -> Check:
    """OK with OK's text when PROBLEM is None, else FAIL with FAILED and FIX."""
    if problem is None:
        return Check(name, Status.OK, ok)
    return Check(name, Status.FAIL, failed, fix)


@dataclass
class Report:
    host: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status is not Status.FAIL for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status is Status.FAIL]

    def table(self) -> str:
        rows = [(c.name, str(c.status), c.found, c.fix) for c in self.checks]
        return tabulate(rows, headers=("check", "status", "found", "what to do"), tablefmt="simple")

    def raise_if_failed(self) -> None:
        if not self.ok:
            names = ", ".join(c.name for c in self.failed)
            raise HostCheckFailed(
                f"preflight of {self.host} failed: {names}",
                hint=self.failed[0].fix or "see the table above",
            )


def parse_nvidia_smi(text: str) -> list[Gpu]:
    gpus = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            raise ValueError(f"unexpected nvidia-smi line: {line!r}")
        index, name, mem, driver = parts
        gpus.append(Gpu(int(index), name, int(float(mem)), driver))
    return gpus


def driver_version(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in text.split(".") if p.isdigit())


def _fmt_version(v: tuple[int, ...]) -> str:
    return ".".join(str(p) for p in v) if v[1:] != (0,) else str(v[0])


def _summary(gpus: list[Gpu]) -> str:
    names: dict[str, int] = {}
    for g in gpus:
        names[g.name] = names.get(g.name, 0) + 1
    return ", ".join(f"{n}x {name}" for name, n in names.items())


def check_gpus(probe: Probe, req: Requirements) -> tuple[list[Check], list[Gpu]]:
    """GPU count and model, memory per GPU, driver version."""
    if req.gpus == 0:
        skip = f"not needed (launch profile {req.profile} runs on CPU)"
        return [Check(n, Status.SKIP, skip) for n in ("GPUs", "GPU memory", "driver")], []
    res = probe.run(_NVIDIA_SMI)
    if not res.ok:
        missing = res.exit_code == 127 or "not found" in res.stderr
        found = "nvidia-smi not found" if missing else f"nvidia-smi failed: {_last(res)}"
        fix = (
            "install the NVIDIA driver (R580+) or pick a GPU host"
            if missing
            else "check the NVIDIA driver on the host (`nvidia-smi` must work)"
        )
        return [
            Check("GPUs", Status.FAIL, f"{found}; launch {req.profile} needs {req.gpus} GPUs", fix),
            Check("GPU memory", Status.SKIP, "not checked (no GPU list)"),
            Check("driver", Status.SKIP, "not checked (no GPU list)"),
        ], []
    try:
        gpus = parse_nvidia_smi(res.stdout)
    except ValueError as exc:
        return [Check("GPUs", Status.FAIL, str(exc), "report this nvidia-smi output")], []
    want = f"{req.gpus}x {req.gpu_model}" if req.gpu_model else f"{req.gpus} GPUs"
    matching = [g for g in gpus if req.gpu_model is None or req.gpu_model in g.name]
    found = _summary(gpus) or "no GPU"
    checks = []
    if len(matching) >= req.gpus:
        checks.append(Check("GPUs", Status.OK, f"{found} (needs {want})"))
    else:
        checks.append(
            Check(
                "GPUs",
                Status.FAIL,
                f"{found}; launch {req.profile} needs {want}",
                "use a host with the published GPUs (or a launch profile written for these GPUs)",
            )
        )
    used = (matching or gpus)[: req.gpus]
    if req.gpu_memory_mib is None or not used:
        checks.append(Check("GPU memory", Status.SKIP, "no minimum in the requirements"))
    else:
        low = [g for g in used if g.memory_mib < req.gpu_memory_mib]
        mem = ", ".join(sorted({f"{g.memory_mib} MiB" for g in used}))
        if low:
            checks.append(
                Check(
                    "GPU memory",
                    Status.FAIL,
                    f"{mem} per GPU; needs >= {req.gpu_memory_mib} MiB",
                    "use GPUs with more memory",
                )
            )
        else:
            checks.append(Check("GPU memory", Status.OK, f"{mem} per GPU"))
    drivers = sorted({g.driver for g in gpus})
    oldest = min((driver_version(d) for d in drivers), default=())
    need = _fmt_version(req.min_driver)
    if oldest and oldest >= req.min_driver:
        checks.append(
            Check("driver", Status.OK, f"{', '.join(drivers)} (CUDA 13.2 needs >= {need})")
        )
    else:
        checks.append(
            Check(
                "driver",
                Status.FAIL,
                f"{', '.join(drivers) or 'unknown'} is older than {need}, needed by CUDA 13.2",
                f"upgrade the NVIDIA driver to R{req.min_driver[0]} or newer",
            )
        )
    return checks, gpus


def check_driver_cuda(probe: Probe, req: Requirements, gpus_found: bool) -> Check:
    """The driver's CUDA ceiling against the image's NVIDIA_REQUIRE_CUDA (cuda_compat)."""
    name = "driver CUDA"
    if req.gpus == 0:
        return Check(name, Status.SKIP, "not needed (no GPU)")
    if not gpus_found:
        return Check(name, Status.SKIP, "not checked (no GPU list)")
    need = None
    if req.image_ref:
        res = probe.run(cuda_compat.image_env_command(req.image_ref))
        need = cuda_compat.from_inspect(res, "the host", req.image_ref)
    need = need or req.image_cuda
    if need is None:
        return Check(
            name,
            Status.WARN,
            "the image's CUDA requirement is unknown",
            "check NVIDIA_REQUIRE_CUDA",
        )
    res = probe.run("nvidia-smi")
    have = cuda_compat.driver_cuda(res.stdout) if res.ok else None
    want = cuda_compat.fmt(need.version)
    fix = (
        f"install an NVIDIA driver that supports CUDA {want} or newer "
        f"(nvidia-smi must show CUDA Version >= {want})"
    )
    if have is None:
        return Check(name, Status.FAIL, "nvidia-smi shows no CUDA Version", fix)
    found = f"driver supports CUDA {cuda_compat.fmt(have)}; image needs >= {want} ({need.source})"
    if have < need.version:
        return Check(name, Status.FAIL, found, fix)
    return Check(name, Status.OK, found)


def _last(res: CommandResult) -> str:
    lines = (res.stderr.strip() or res.stdout.strip()).splitlines()
    return lines[-1] if lines else f"exit code {res.exit_code}"


def docker_info(probe: Probe) -> tuple[Check, dict[str, object]]:
    res = probe.run("docker info --format '{{json .}}'")
    if res.exit_code == 127:
        return Check(
            "docker", Status.FAIL, "docker not installed", "install Docker Engine on the host"
        ), {}
    if not res.ok:
        detail = _last(res)
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


def _shell_path(path: str) -> str:
    """PATH as a POSIX shell word, a leading ~ as the account's "$HOME"."""
    return '"$HOME"' + shlex.quote(path[1:]) if path.startswith("~") else shlex.quote(path)


def _free_bytes(probe: Probe, path: str) -> tuple[int, str] | None:
    """Free bytes on the filesystem that holds PATH (its nearest existing parent)."""
    quoted = _shell_path(path)
    script = f'p={quoted}; while [ ! -e "$p" ]; do p=$(dirname "$p"); done; df -PB1 "$p"'
    res = probe.run(f"sh -c {shlex.quote(script)}")
    if not res.ok:
        return None
    last = res.stdout.strip().splitlines()[-1].split()
    return int(last[3]), last[5]


def _present_bytes(probe: Probe, cache: str, model: str) -> int:
    quoted = _shell_path(cache)
    sub = shlex.quote("/hub/models--" + model.replace("/", "--"))
    res = probe.run(f"sh -c {shlex.quote(f'du -sb {quoted}{sub} 2>/dev/null || echo 0')}")
    try:
        return int(res.stdout.split()[0])
    except (ValueError, IndexError):
        return 0


def check_disk(probe: Probe, req: Requirements, model_cache: str, info: dict[str, object]) -> Check:
    need: dict[str, int] = {}
    where: dict[str, str] = {}
    cache_fs = _free_bytes(probe, model_cache)
    if req.weights_bytes and req.hf_model:
        have = _present_bytes(probe, model_cache, req.hf_model)
        if cache_fs is None:
            return Check("disk", Status.FAIL, f"cannot stat {model_cache}", "check model_cache")
        need[cache_fs[1]] = max(0, req.weights_bytes - have)
        where[cache_fs[1]] = "weights"
    image_present = False
    if req.image_ref:
        image_present = probe.run(f"docker image inspect {shlex.quote(req.image_ref)}").ok
    root = str(info.get("DockerRootDir") or "/var/lib/docker")
    docker_fs = _free_bytes(probe, root)
    if req.image_bytes and not image_present and docker_fs is not None:
        need[docker_fs[1]] = need.get(docker_fs[1], 0) + req.image_bytes
        where[docker_fs[1]] = " + ".join(filter(None, [where.get(docker_fs[1]), "image"]))
    free = {fs[1]: fs[0] for fs in (cache_fs, docker_fs) if fs is not None}
    parts, short = [], []
    for mount, bytes_needed in need.items():
        free_gib, need_gib = free[mount] / GIB, bytes_needed / GIB
        parts.append(f"{mount}: {free_gib:.0f} GiB free, {where[mount]} need {need_gib:.0f}")
        if free[mount] < bytes_needed:
            short.append(mount)
    if not need:
        return Check("disk", Status.OK, "nothing to download (weights and image present)")
    if short:
        return Check("disk", Status.FAIL, "; ".join(parts), f"free space on {', '.join(short)}")
    return Check("disk", Status.OK, "; ".join(parts))


def check_weights(probe: Probe, req: Requirements, model_cache: str) -> Check:
    """The pinned revision (or, unpinned, refs/main) in the host's cache when downloads are
    off; otherwise what the weights step will fetch."""
    name = "weights"
    if not (req.weights_bytes and req.hf_model):
        return Check(name, Status.SKIP, "not applicable (the launch profile loads no weights)")
    cache = model_cache
    if cache.startswith("~"):
        cache = probe.run('printf %s "$HOME"').stdout.strip() + cache[1:]
    model, rev = req.hf_model, req.model_revision
    if rev is not None:
        present = weights.has_snapshot(probe, cache, model, rev)
        if present:
            return Check(name, Status.OK, f"{model} at {rev} (pinned) in {model_cache}")
        if req.download_weights:
            return Check(name, Status.OK, f"{model} at {rev} (pinned) will be downloaded")
        return Check(
            name,
            Status.FAIL,
            f"{model} at the pinned {rev} is not in {model_cache} and downloads are off",
            f"on the host: HF_HOME={model_cache} hf download {model} --revision {rev} "
            "(or run without --no-weights-download)",
        )
    main = weights.resolved_main(probe, cache, model)
    if req.download_weights:
        return Check(name, Status.WARN, f"{model} not pinned: the hub's main is fetched", "")
    if main is not None and weights.has_snapshot(probe, cache, model, main):
        return Check(name, Status.WARN, f"{model} at {main}, not pinned by the profile")
    return Check(
        name,
        Status.FAIL,
        f"{model} is not in {model_cache} and downloads are off",
        f"on the host: HF_HOME={model_cache} hf download {model}",
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
        "disk",
    ]
    rest += ["weights", "HF token", "clock"]
    report = Report(host=host, checks=[Check("ssh", Status.FAIL, error.message, error.hint or "")])
    report.checks += [Check(n, Status.SKIP, "not checked (needs SSH)") for n in rest]
    return report
