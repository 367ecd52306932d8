"""Preflight checks of a host's GPUs: count and model, memory per GPU, driver version
(nvidia-smi's GPU list), and the driver's CUDA ceiling against the image's
NVIDIA_REQUIRE_CUDA (provisioning.image.cuda_compat)."""

from __future__ import annotations

from dataclasses import dataclass

from provisioning.hosts.shell import Probe
from provisioning.image import cuda_compat
from provisioning.preflight.report import Check, Status, last_line
from provisioning.preflight.requirements import Requirements

_NVIDIA_SMI = (
    "nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader,nounits"
)


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_mib: int
    driver: str


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
        found = "nvidia-smi not found" if missing else f"nvidia-smi failed: {last_line(res)}"
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
