"""Was a cell measured on GPUs running as they should? The `gpu_throttled` flag.

The telemetry of each decode window (`bench.host.telemetry`) becomes the cell's `gpu`
entry; after every cell the whole run is judged again, because a GPU's steady clock is
the run's own:

- **Clock limits.** A window in which any GPU had a thermal or hardware limit active
  (`THROTTLING`: hw_slowdown, sw/hw_thermal_slowdown, hw_power_brake_slowdown) in at
  least `MIN_SHARE` of its samples. Idle, sync boost, application and display clock
  settings are not throttling, and neither is the software power cap alone: a GPU at
  full load runs at its power limit by design (an H200 under a bf16 matmul load at
  646 TFLOP/s had sw_power_cap active in 82 % of its samples, `make gpu-check`,
  2026-12-04), so flagging it would flag every busy cell. It is recorded in the cell's
  `throttle_reasons`, and a power cap that costs a window its speed shows as a clock
  far below steady, next.
- **Clock far below steady.** A GPU's steady clock is the median, over the run's measured
  windows, of its mean SM clock in each; "far below" is a window mean more than
  `FAR_BELOW` (10 %) under it. Boost clocks under a steady load move by a few percent
  (the driver's 15 MHz steps, temperature), so 10 % is well outside them and well inside
  what a thermal slowdown costs. With one window there is no steady clock to be below.

A flagged cell keeps its status and figures; a verdict treats it as not ready unless the
user accepts the flag by name (`--accept gpu_throttled`).
"""

from __future__ import annotations

import statistics

from bench.host.telemetry import WindowTelemetry
from bench.results import CellGpu, CellResult, EnergySource, Results

THROTTLING = (
    "hw_slowdown",
    "sw_thermal_slowdown",
    "hw_thermal_slowdown",
    "hw_power_brake_slowdown",
)
MIN_SHARE = 0.05
FAR_BELOW = 0.10
RULE = (
    f"gpu_throttled: a GPU had {'/'.join(THROTTLING)} active in >= {MIN_SHARE:.0%} of its "
    f"samples in the window, or its mean SM clock was more than {FAR_BELOW:.0%} below its "
    "steady clock (the median of its window means over the run)"
)


def cell_gpu(window: WindowTelemetry) -> CellGpu:
    """A window's telemetry as the cell's `gpu` entry (the steady clocks come later)."""
    shares: dict[str, float] = {}
    for g in window.gpus:
        for reason, share in g.throttle_reasons.items():
            shares[reason] = max(shares.get(reason, 0.0), share)
    return CellGpu(
        samples=sum(g.samples for g in window.gpus),
        energy_j=window.energy_j,
        energy_per_output_token_j=window.energy_per_output_token_j,
        energy_source=window.energy_source,
        throttle_reasons=dict(sorted(shares.items())),
        mean_sm_clock_mhz={
            str(g.index): round(g.mean_sm_clock_mhz, 1)
            for g in window.gpus
            if g.mean_sm_clock_mhz is not None
        },
    )


def steady_clocks(gpus: list[CellGpu]) -> dict[str, float]:
    """GPU index -> the median of its window means (windows with a clock reading)."""
    by_gpu: dict[str, list[float]] = {}
    for g in gpus:
        for index, mhz in g.mean_sm_clock_mhz.items():
            by_gpu.setdefault(index, []).append(mhz)
    return {i: statistics.median(v) for i, v in sorted(by_gpu.items()) if len(v) >= 2}


def throttled(gpu: CellGpu, steady: dict[str, float]) -> str | None:
    """Why the window counts as throttled, or None."""
    why = [
        f"{reason} active in {share:.0%} of samples"
        for reason, share in gpu.throttle_reasons.items()
        if reason in THROTTLING and share >= MIN_SHARE
    ]
    for index, mhz in sorted(gpu.mean_sm_clock_mhz.items()):
        ref = steady.get(index)
        if ref is not None and mhz < (1.0 - FAR_BELOW) * ref:
            why.append(f"GPU {index} SM clock {mhz:,.0f} MHz, {1 - mhz / ref:.0%} below its "
                       f"steady {ref:,.0f} MHz")  # fmt: skip
    return "; ".join(why) or None


def _judged(cell: CellResult, steady: dict[str, float]) -> CellResult:
    if cell.gpu is None:
        return cell
    gpu = cell.gpu.model_copy(
        update={
            "steady_sm_clock_mhz": {i: steady[i] for i in cell.gpu.mean_sm_clock_mhz if i in steady}
        }
    )
    flags = {k: v for k, v in cell.flags.items() if k != "gpu_throttled"}
    why = throttled(gpu, steady)
    if why is not None:
        flags["gpu_throttled"] = why
    return cell.model_copy(update={"gpu": gpu, "flags": flags})


def energy_from(cells: tuple[CellResult, ...]) -> EnergySource | None:
    sources = {c.gpu.energy_source for c in cells if c.gpu and c.gpu.energy_source}
    if not sources:
        return None
    return "energy_counter" if sources == {"energy_counter"} else "power_integral"


def judged(results: Results) -> Results:
    """RESULTS with every cell's gpu_throttled flag decided against the run's steady
    clocks so far, and the measurement saying where energy came from and by what rule."""
    measured = [c.gpu for c in results.cells if c.gpu is not None and c.figures is not None]
    if not measured and not any(c.gpu for c in results.cells):
        return results
    steady = steady_clocks(measured)
    cells = tuple(_judged(c, steady) for c in results.cells)
    measurement = results.measurement.model_copy(
        update={"energy_from": energy_from(cells), "gpu_validity": RULE}
    )
    return results.model_copy(update={"cells": cells, "measurement": measurement})
