"""GPUs through nvidia-smi: what is installed (inventory, driver and CUDA versions).

nvidia-smi is the one interface used (it ships with every driver, inside the NVIDIA
container runtime too); NVML bindings would add a dependency for the same numbers.
Without nvidia-smi, or when it cannot reach a driver, everything reports "no GPU" with
the reason.

CSV from `--query-gpu ... --format=csv,noheader,nounits` is parsed field by field; a
value nvidia-smi cannot give ("[N/A]", "[Not Supported]") becomes None, never 0. The
field parsers here are shared with `bench.host.telemetry`.
"""

from __future__ import annotations

import math
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

Runner = Callable[[Sequence[str]], tuple[int, str, str]]

INVENTORY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "power.limit",
    "clocks.max.sm",
    "driver_version",
)
_MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "[gpu lost]"}
_UNIT = re.compile(r"\s*(W|MiB|MHz|%|C)$")
_TIMEOUT_S = 30.0


class _InventoryModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GpuInfo(_InventoryModel):
    index: int
    name: str
    uuid: str | None
    pci_bus_id: str | None
    memory_total_mib: float | None
    power_limit_w: float | None
    max_sm_clock_mhz: float | None


class GpuInventory(_InventoryModel):
    available: bool
    reason: str | None = None  # why there is no GPU, when available is False
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: tuple[GpuInfo, ...] = ()


def run_command(argv: Sequence[str]) -> tuple[int, str, str]:
    try:
        done = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
    except FileNotFoundError:
        return 127, "", f"{argv[0]}: not found"
    except subprocess.TimeoutExpired:
        return 124, "", f"{argv[0]}: no answer in {_TIMEOUT_S:.0f} s"
    return done.returncode, done.stdout, done.stderr


def value(raw: str) -> str | None:
    text = raw.strip()
    return None if text.lower() in _MISSING else text


def number(raw: str) -> float | None:
    text = value(raw)
    if text is None:
        return None
    try:
        parsed = float(_UNIT.sub("", text))
    except ValueError:
        return None
    return parsed if math.isfinite(parsed) else None  # "nan", "inf": no reading


def csv_rows(text: str, width: int) -> list[list[str]]:
    """Rows of nvidia-smi CSV with exactly `width` fields; a header or a torn line is dropped."""
    rows = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != width or fields[0] in {"index", "timestamp"}:
            continue
        rows.append(fields)
    return rows


def parse_inventory(text: str) -> tuple[str | None, list[GpuInfo]]:
    gpus = []
    drivers = set()
    for f in csv_rows(text, len(INVENTORY_FIELDS)):
        index = number(f[0])
        if index is None:
            continue
        gpus.append(
            GpuInfo(
                index=int(index),
                name=f[1],
                uuid=value(f[2]),
                pci_bus_id=value(f[3]),
                memory_total_mib=number(f[4]),
                power_limit_w=number(f[5]),
                max_sm_clock_mhz=number(f[6]),
            )
        )
        if (driver := value(f[7])) is not None:
            drivers.add(driver)
    return (sorted(drivers)[0] if drivers else None), gpus


def parse_cuda_version(text: str) -> str | None:
    """From `nvidia-smi -q` ("CUDA Version : 12.4") or the plain banner ("CUDA Version: 12.4")."""
    found = re.search(r"CUDA Version\s*:\s*([0-9][0-9.]*)", text)
    return found.group(1) if found else None


def _no_gpu(reason: str) -> GpuInventory:
    return GpuInventory(available=False, reason=reason)


def inventory(run: Runner = run_command, executable: str | None = None) -> GpuInventory:
    exe = executable or shutil.which("nvidia-smi")
    if exe is None:
        return _no_gpu("nvidia-smi not found on PATH")
    rc, out, err = run(
        [exe, f"--query-gpu={','.join(INVENTORY_FIELDS)}", "--format=csv,noheader,nounits"]
    )
    if rc != 0:
        first = (err or out).strip().splitlines()
        return _no_gpu(f"nvidia-smi failed: {first[0] if first else f'exit status {rc}'}")
    driver, gpus = parse_inventory(out)
    if not gpus:
        return _no_gpu("nvidia-smi lists no GPU")
    rc, out, _ = run([exe, "-q"])
    return GpuInventory(
        available=True,
        driver_version=driver,
        cuda_version=parse_cuda_version(out) if rc == 0 else None,
        gpus=tuple(gpus),
    )
