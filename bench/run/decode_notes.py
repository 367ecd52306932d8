"""Notes under the tables on what the decode matrix rests on: speculative decoding's
acceptance (from the vllm:spec_decode_* counters over each window, or another engine's
own, see bench.engines) and the prefix-cache
hit rate of each cell's C requests launched together (what backs "TTFT mostly excludes
prefill"), and what the GPUs did: the cells flagged `gpu_throttled` and where energy per
output token came from. Shown in tables.md and so in report.html; absent when no cell
has them.
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import median

from bench.results import CellExtras, Results

MEASURED = ("valid", "not_ready")


def _values(results: Results, pick: Callable[[CellExtras], float | None]) -> list[float]:
    return [
        v
        for c in results.cells
        if c.status in MEASURED and c.extras is not None and (v := pick(c.extras)) is not None
    ]


def _spread(values: list[float], fmt: Callable[[float], str], unit: str = "") -> str:
    lo, hi = min(values), max(values)
    middle = fmt(median(values)) + unit
    return middle if fmt(lo) == fmt(hi) else f"{middle} (cells range {fmt(lo)} to {fmt(hi)})"


def _pct(x: float) -> str:
    return f"{x * 100:.1f} %"


def spec_decode_note(results: Results) -> str | None:
    rates = _values(results, lambda e: e.spec_decode_acceptance_rate)
    lengths = _values(results, lambda e: e.spec_decode_acceptance_length)
    if not rates and not lengths:
        return None
    parts = []
    if rates:
        parts.append(f"acceptance rate {_spread(rates, _pct)} (accepted / draft tokens)")
    if lengths:
        parts.append(
            "mean acceptance length "
            + _spread(lengths, lambda x: f"{x:.2f}", " tokens per step")
            + " (1 + accepted / drafts)"
        )
    n = max(len(rates), len(lengths))
    source = "vllm:spec_decode_* counters"
    fact = results.server.facts_source.get("spec_decode", "")
    if results.server.engine not in (None, "vllm") and fact.startswith("metrics:"):
        source = fact.removeprefix("metrics:")  # another engine's (bench.engines)
    return (
        f"Speculative decoding: {' and '.join(parts)}; median over the windows of {n} "
        f"measured decode cells, from the server's {source}."
    )


def launch_prefix_note(results: Results) -> str | None:
    rates = _values(results, lambda e: e.launch_prefix_cache_hit_rate)
    if not rates:
        return None
    return (
        f"Prefix-cache hit rate of the C requests each decode cell launches together: "
        f"{_spread(rates, _pct)} over {len(rates)} cells (the row's scout warmed the "
        "cache with the same prompt; this is what makes TTFT mostly exclude prefill)."
    )


def gpu_note(results: Results) -> str | None:
    gpus = [c for c in results.cells if c.gpu is not None]
    if not gpus:
        return None
    flagged = [c for c in results.cells if "gpu_throttled" in c.flags]
    source = {
        "energy_counter": "the driver's cumulative energy counter",
        "power_integral": "nvidia-smi's power samples integrated over each window",
        None: "nowhere (no usable power or energy readings)",
    }[results.measurement.energy_from]
    throttled = (
        f"{len(flagged)} of {len(gpus)} decode cells are marked GPU throttled "
        f"({results.measurement.gpu_validity}); a verdict judges them only with "
        "--accept gpu_throttled."
        if flagged
        else f"No decode cell of {len(gpus)} was GPU throttled."
    )
    return f"GPUs: {throttled} Energy per output token from {source}."


def notes(results: Results) -> list[str]:
    found = (spec_decode_note(results), launch_prefix_note(results), gpu_note(results))
    return [n for n in found if n]
