"""GPU telemetry through nvidia-smi, sampled during each measurement window.

Power, SM clock, temperature, utilisation and the active clock-limit reasons, sampled by
a background `nvidia-smi --query-gpu ... -lms` and summarised per window. Without
nvidia-smi the sampler records nothing.

Energy of a window, per GPU, summed over GPUs, says where it came from (`energy_source`):
- `energy_counter`: the driver's cumulative energy counter (NVML's total energy consumption,
  millijoules since the driver loaded, Volta and newer), read through nvidia-smi's
  `total_energy_consumption` query field: its last sample minus its first. Whether this
  nvidia-smi offers the field is probed once per sampler (some releases refuse it as "not a
  valid field", some GPUs answer [N/A]), as the clock-limit field's name is.
- `power_integral`: otherwise, the trapezoid integral of power.draw over the samples' own
  timestamps (the same span as the counter's difference).
"""

from __future__ import annotations

import itertools
import shutil
import subprocess
import threading
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from bench import run_files
from bench.errors import UsageError, validation_message
from bench.host import procs
from bench.host.inventory import Runner, csv_rows, number, run_command, value

GPU_TELEMETRY_NAME = run_files.GPU_TELEMETRY  # the run directory's file of these samples


class _TelemetryModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# Drivers from R535 call them "clocks_event_reasons"; older ones only know the old name.
THROTTLE_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")
TELEMETRY_FIELDS = (
    "timestamp",
    "index",
    "power.draw",
    "clocks.sm",
    "temperature.gpu",
    "utilization.gpu",
    "utilization.memory",
)
# NVML's nvmlDeviceGetTotalEnergyConsumption as nvidia-smi names it (mJ); probed, see above.
ENERGY_FIELD = "total_energy_consumption"
EnergySource = Literal["energy_counter", "power_integral"]
# NVML's nvmlClocksEventReason* bits.
THROTTLE_BITS = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}


class GpuSample(_TelemetryModel):
    at_s: float  # seconds since the first sample of the window (nvidia-smi's clock)
    index: int
    power_w: float | None
    sm_clock_mhz: float | None
    temperature_c: float | None
    utilization_pct: float | None
    memory_utilization_pct: float | None
    throttle_reasons: tuple[str, ...]
    # The driver's cumulative energy counter, mJ (None: not offered, or a sample without it).
    energy_mj: float | None = None


class GpuWindowStats(_TelemetryModel):
    index: int
    samples: int
    energy_j: float | None
    energy_source: EnergySource | None = None  # None: no energy (and before it was recorded)
    mean_power_w: float | None
    max_power_w: float | None
    mean_sm_clock_mhz: float | None
    min_sm_clock_mhz: float | None
    max_temperature_c: float | None
    mean_utilization_pct: float | None
    throttle_reasons: dict[str, float]  # reason -> share of samples it was active in


class WindowTelemetry(_TelemetryModel):
    gpus: tuple[GpuWindowStats, ...]
    energy_j: float | None  # all GPUs
    energy_per_output_token_j: float | None
    # energy_counter only when every GPU's energy came from its counter; else power_integral.
    energy_source: EnergySource | None = None


def throttle_reasons(raw: str) -> tuple[str, ...]:
    text = value(raw)
    if text is None:
        return ()
    try:
        mask = int(text, 16)
    except ValueError:
        return ()
    names = [name for bit, name in THROTTLE_BITS.items() if mask & bit]
    known = sum(THROTTLE_BITS)
    if mask & ~known:
        names.append(f"other_0x{mask & ~known:x}")
    return tuple(names)


def throttle_field(run: Runner, executable: str) -> str | None:
    """The name this driver accepts for the active clock-limit reasons, if any."""
    for field in THROTTLE_FIELDS:
        rc, _, _ = run([executable, f"--query-gpu={field}", "--format=csv,noheader"])
        if rc == 0:
            return field
    return None


def energy_field(run: Runner, executable: str) -> str | None:
    """`total_energy_consumption` when this nvidia-smi accepts it and every GPU answers a
    number (a driver without the counter answers [N/A] or refuses the field), else None."""
    rc, out, _ = run([executable, f"--query-gpu={ENERGY_FIELD}", "--format=csv,noheader,nounits"])
    answers = [line for line in out.splitlines() if line.strip()]
    if rc != 0 or not answers or any(number(a) is None for a in answers):
        return None
    return ENERGY_FIELD


def _timestamp(raw: str) -> datetime | None:
    try:
        return datetime.strptime(raw.strip(), "%Y/%m/%d %H:%M:%S.%f")
    except ValueError:
        return None


def parse_telemetry(
    text: str, *, with_throttle: bool, with_energy: bool = False
) -> list[GpuSample]:
    """Rows of TELEMETRY_FIELDS, then the clock-limit reasons and the energy counter when
    they were asked for (in that order)."""
    base = len(TELEMETRY_FIELDS)
    width = base + (1 if with_throttle else 0) + (1 if with_energy else 0)
    parsed = []
    for f in csv_rows(text, width):
        at = _timestamp(f[0])
        index = number(f[1])
        if at is None or index is None:
            continue
        parsed.append((at, int(index), f))
    if not parsed:
        return []
    origin = min(at for at, _, _ in parsed)
    return [
        GpuSample(
            at_s=(at - origin).total_seconds(),
            index=index,
            power_w=number(f[2]),
            sm_clock_mhz=number(f[3]),
            temperature_c=number(f[4]),
            utilization_pct=number(f[5]),
            memory_utilization_pct=number(f[6]),
            throttle_reasons=throttle_reasons(f[base]) if with_throttle else (),
            energy_mj=number(f[width - 1]) if with_energy else None,
        )
        for at, index, f in parsed
    ]


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _energy_j(samples: list[GpuSample]) -> tuple[float | None, EnergySource | None]:
    """(joules, source) of one GPU's samples in time order: the counter's difference when
    its first and last samples have it and it did not go back (a driver reload resets it),
    else the power integral; (None, None) with fewer than two usable samples."""
    counter = [s.energy_mj for s in samples if s.energy_mj is not None]
    first, last = (samples[0].energy_mj, samples[-1].energy_mj) if samples else (None, None)
    rising = all(b >= a for a, b in itertools.pairwise(counter))
    if first is not None and last is not None and len(counter) >= 2 and rising:
        return (last - first) / 1000.0, "energy_counter"
    points = [(s.at_s, s.power_w) for s in samples if s.power_w is not None]
    if len(points) < 2:
        return None, None
    joules = sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(points))
    return joules, "power_integral"


def summarize(samples: Sequence[GpuSample], output_tokens: int | None) -> WindowTelemetry:
    stats = []
    for index in sorted({s.index for s in samples}):
        mine = sorted((s for s in samples if s.index == index), key=lambda s: s.at_s)
        power = [s.power_w for s in mine if s.power_w is not None]
        clock = [s.sm_clock_mhz for s in mine if s.sm_clock_mhz is not None]
        temps = [s.temperature_c for s in mine if s.temperature_c is not None]
        util = [s.utilization_pct for s in mine if s.utilization_pct is not None]
        reasons: dict[str, float] = {}
        for s in mine:
            for r in s.throttle_reasons:
                reasons[r] = reasons.get(r, 0.0) + 1 / len(mine)
        energy_j, source = _energy_j(mine)
        stats.append(
            GpuWindowStats(
                index=index,
                samples=len(mine),
                energy_j=energy_j,
                energy_source=source,
                mean_power_w=_mean(power),
                max_power_w=max(power, default=None),
                mean_sm_clock_mhz=_mean(clock),
                min_sm_clock_mhz=min(clock, default=None),
                max_temperature_c=max(temps, default=None),
                mean_utilization_pct=_mean(util),
                throttle_reasons={k: round(v, 4) for k, v in sorted(reasons.items())},
            )
        )
    energies = [g.energy_j for g in stats]
    total = sum(e for e in energies if e is not None) if energies and None not in energies else None
    per_token = total / output_tokens if total is not None and output_tokens else None
    sources = {g.energy_source for g in stats}
    came_from: EnergySource | None = None
    if total is not None:
        came_from = "energy_counter" if sources == {"energy_counter"} else "power_integral"
    return WindowTelemetry(
        gpus=tuple(stats),
        energy_j=total,
        energy_per_output_token_j=per_token,
        energy_source=came_from,
    )


class GpuSampler:
    """Runs `nvidia-smi ... -lms N` for the length of a window and keeps its lines.

    One long-lived nvidia-smi per window rather than one process per sample: sampling
    stays periodic at the driver's clock and costs the host almost nothing.
    """

    def __init__(
        self,
        interval_s: float = 0.5,
        *,
        run: Runner = run_command,
        executable: str | None = None,
    ) -> None:
        self.interval_s = interval_s
        self._exe = executable or shutil.which("nvidia-smi")
        self._throttle = throttle_field(run, self._exe) if self._exe else None
        self._energy = energy_field(run, self._exe) if self._exe else None
        self._proc: subprocess.Popen[str] | None = None
        self._lines: list[str] = []
        self._reader: threading.Thread | None = None

    @property
    def available(self) -> bool:
        return self._exe is not None

    @property
    def fields(self) -> tuple[str | None, str | None]:
        """(the clock-limit field, the energy counter field) this nvidia-smi accepted."""
        return self._throttle, self._energy

    def start(self) -> None:
        if self._exe is None or self._proc is not None:
            return
        fields = [
            *TELEMETRY_FIELDS,
            *([self._throttle] if self._throttle else []),
            *([self._energy] if self._energy else []),
        ]
        self._lines = []
        try:
            self._proc = subprocess.Popen(
                [
                    self._exe,
                    f"--query-gpu={','.join(fields)}",
                    "--format=csv,noheader,nounits",
                    "-lms",
                    str(max(1, round(self.interval_s * 1000))),
                ],
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                stdin=subprocess.DEVNULL,
                text=True,
            )
        except OSError:
            self._proc = None
            return
        stream = self._proc.stdout
        assert stream is not None
        self._reader = threading.Thread(target=self._drain, args=(stream,), daemon=True)
        self._reader.start()

    def _drain(self, stream: IO[str]) -> None:
        for line in stream:
            self._lines.append(line)

    def stop(self) -> list[GpuSample]:
        proc, self._proc = self._proc, None
        if proc is None:
            return []
        procs.stop(proc)
        if self._reader is not None:
            self._reader.join(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()
        return parse_telemetry(
            "".join(self._lines),
            with_throttle=self._throttle is not None,
            with_energy=self._energy is not None,
        )


class WindowRecord(_TelemetryModel):
    """One line of gpu_telemetry.jsonl: a measurement window's samples and their summary."""

    context_label: str
    concurrency: int
    trial: int = 0
    output_tokens: int | None
    telemetry: WindowTelemetry
    samples: tuple[GpuSample, ...]


def append_window(
    path: Path,
    *,
    context_label: str,
    concurrency: int,
    trial: int,
    samples: Sequence[GpuSample],
    output_tokens: int | None,
) -> WindowRecord:
    """Summarise a window's samples and append them to the run's gpu_telemetry.jsonl."""
    record = WindowRecord(
        context_label=context_label,
        concurrency=concurrency,
        trial=trial,
        output_tokens=output_tokens,
        telemetry=summarize(samples, output_tokens),
        samples=tuple(samples),
    )
    with path.open("a", encoding="utf-8") as fh:
        fh.write(record.model_dump_json() + "\n")
    return record


def read_windows(path: Path) -> list[WindowRecord]:
    """The file's windows; a line that is not one is one UsageError naming the file and
    the line (issue 29, H8: it was a pydantic traceback)."""
    if not path.is_file():
        return []
    out = []
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot be read ({exc})") from None
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append(WindowRecord.model_validate_json(line))
        except ValidationError as exc:
            raise UsageError(
                f"{path} line {n}: not a telemetry window: {validation_message(exc)}"
            ) from None
    return out
