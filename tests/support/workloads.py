"""Workload files for tests that run one: a rate sweep's TOML from its few numbers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def rate_toml(
    name: str,
    rates: Sequence[float],
    requests: int,
    lengths: tuple[int, int],
    *,
    seed: int = 0,
    range_ratio: float = 0.0,
    slo: Mapping[str, float] | None = None,
    description: str = "",
) -> str:
    """A Poisson sweep at `rates` of `requests` a point, lengths (input, output) drawn by
    vLLM's rule with `range_ratio`; `slo` as the file's [slo] keys (ttft_p99_s = 0.5)."""
    lines = [
        f"name = {name!r}",
        f"description = {description!r}" if description else "",
        f"seed = {seed}",
        "[arrivals]",
        'kind = "rate"',
        f"rates = [{', '.join(f'{r:g}' for r in rates)}]",
        'process = "poisson"',
        f"requests = {requests}",
        "[lengths]",
        f"input_tokens = {lengths[0]}",
        f"output_tokens = {lengths[1]}",
        f"range_ratio = {range_ratio:g}",
    ]
    if slo:
        lines += ["[slo]", *(f"{k} = {v:g}" for k, v in slo.items())]
    return "\n".join(line for line in lines if line) + "\n"
