"""The nodes of a fleet: each one's bundle loaded and verified as `bench compare` does,
the environment facts a fleet compares (from environment.json), its GPUs' mean SM clock
over the measured windows (from gpu_telemetry.jsonl), and its name.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import run_files, stats
from bench.bundle import provenance
from bench.errors import BenchError
from bench.host import telemetry
from bench.verdict import run_source
from bench.verdict import settings as settings_mod
from bench.verdict.cells import RunFigures

# Environment facts compared between nodes, in the order they are named.
FACTS: tuple[str, ...] = (
    "driver",
    "CUDA",
    "GPU model",
    "GPU count",
    "GPU max SM clock",
    "GPU power limit",
    "image",
    "vLLM",
    "kernel",
)


@dataclass(frozen=True)
class Node:
    name: str
    run: RunFigures
    facts: dict[str, str] = field(default_factory=dict)
    # The mean SM clock of its GPUs over the measured windows (gpu_telemetry.jsonl).
    window_clock_mhz: float | None = None

    @property
    def settings(self) -> dict[str, str]:
        out = dict(self.run.settings)
        if self.run.image_id:
            out["image"] = self.run.image_id
        return out


@dataclass(frozen=True)
class Recorded:
    """What a bundle records beside its figures: environment.json, and the GPUs' mean SM
    clock over the measured windows (None without GPU telemetry)."""

    env: Any
    window_clock_mhz: float | None


def read_recorded(directory: Path) -> Recorded:
    """For `run_source.load_run_with`: read from the verified bundle's directory."""
    return Recorded(
        run_source.read_environment(directory),
        window_clock(directory / run_files.GPU_TELEMETRY),
    )


def window_clock(path: Path) -> float | None:
    """The mean over windows and GPUs of the mean SM clock; None when not recorded or
    not readable (a telemetry file that does not parse is no evidence either way)."""
    try:
        windows = telemetry.read_windows(path)
    except (OSError, ValueError, BenchError):  # bad UTF-8, bad JSON: read_windows's one line
        return None
    clocks = [
        g.mean_sm_clock_mhz
        for w in windows
        for g in w.telemetry.gpus
        if g.mean_sm_clock_mhz is not None
    ]
    return stats.mean(clocks) if clocks else None


def load_nodes(
    paths: Sequence[Path], how: run_source.Verification, names: Sequence[str] | None = None
) -> list[Node]:
    """One node per bundle, each verified as `bench compare` verifies (VerifyFailed,
    exit 5, for one that does not), named `names` when the caller knows the hosts (the
    hostname a container records is its own), else by `node_names`."""
    loaded = [run_source.load_run_with(p, how, read_recorded) for p in paths]
    run_source.refuse_repeats([(str(p), run) for p, (run, _) in zip(paths, loaded, strict=True)])
    if names is None:
        names = node_names([str(p) for p in paths], [hostname(rec.env) for _, rec in loaded])
    return [
        Node(name, run, facts_of(rec.env), rec.window_clock_mhz)
        for name, (run, rec) in zip(names, loaded, strict=True)
    ]


def facts_of(env: Any) -> dict[str, str]:
    """The environment facts a fleet compares, from environment.json as plain JSON; a
    fact that is not recorded is left out."""
    env = env if isinstance(env, dict) else {}
    gpu = env.get("gpu") if isinstance(env.get("gpu"), dict) else {}
    gpus = [g for g in gpu.get("gpus") or [] if isinstance(g, dict)]

    def joined(key: str, unit: str) -> str | None:
        found = sorted({float(g[key]) for g in gpus if isinstance(g.get(key), int | float)})
        return ", ".join(f"{v:g} {unit}" for v in found) if found else None

    host = env.get("host") if isinstance(env.get("host"), dict) else {}
    names = sorted({settings_mod.gpu_name(str(g.get("name", "?"))) for g in gpus})
    out: dict[str, str | None] = {
        "driver": gpu.get("driver_version"),
        "CUDA": gpu.get("cuda_version"),
        "GPU model": ", ".join(names) if names else None,
        "GPU count": str(len(gpus)) if gpus else None,
        "GPU max SM clock": joined("max_sm_clock_mhz", "MHz"),
        "GPU power limit": joined("power_limit_w", "W"),
        "image": provenance.image_id(env),
        "vLLM": env.get("vllm_version"),
        "kernel": host.get("kernel"),
    }
    return {k: str(v) for k, v in out.items() if v is not None and str(v) != ""}


def node_names(paths: Sequence[str], hostnames: Sequence[str | None]) -> list[str]:
    """Each node's name: its recorded hostname when every bundle records a different one,
    else the bundle's name (without .tar.gz), else that with a number."""
    if all(hostnames) and len(set(hostnames)) == len(hostnames):
        return [str(h) for h in hostnames]
    names = []
    for p in paths:
        name = p.rstrip("/").rsplit("/", 1)[-1]
        for suffix in (".tar.gz", ".tgz"):
            name = name.removesuffix(suffix)
        if name == run_files.RESULTS:
            parts = p.rstrip("/").rsplit("/", 2)
            name = parts[-2] if len(parts) >= 2 else name
        names.append(name)
    if len(set(names)) != len(names):
        names = [f"{n}#{i + 1}" for i, n in enumerate(names)]
    return names


def hostname(env: Any) -> str | None:
    host = env.get("host") if isinstance(env, dict) else None
    name = host.get("hostname") if isinstance(host, dict) else None
    return str(name) if name else None
