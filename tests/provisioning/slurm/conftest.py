"""A real Slurm (tests/setup/slurm.sh: Debian's slurm-wlm and munge, two nodes on this
machine, partition `debug`) and the orchestrator tests' real Docker engine and bench image.

`slurm_cluster` starts what is not running once per session and stops what it started. A
cluster that does not come up is a failing test with the script's own words, never a skip.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.provisioning.conftest import ROOT, bench_image

SLURM_SH = ROOT / "tests" / "setup" / "slurm.sh"

__all__ = ["SlurmCluster", "bench_image", "slurm_cluster"]


@dataclass(frozen=True)
class SlurmCluster:
    conf: Path  # slurm.conf; SLURM_CONF names it for sbatch, squeue, ...
    partition: str = "debug"
    nodes: tuple[str, ...] = ("bench-n1", "bench-n2")

    @property
    def env(self) -> dict[str, str]:
        return {"SLURM_CONF": str(self.conf)}

    @property
    def state_dir(self) -> Path:
        return self.conf.parent / "state"


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    proc = subprocess.run(
        [str(SLURM_SH), "start"], capture_output=True, text=True, check=False, timeout=1800
    )
    if proc.returncode != 0:
        pytest.fail(f"tests/setup/slurm.sh start failed ({proc.returncode}): {proc.stderr[-3000:]}")
    try:
        yield SlurmCluster(conf=Path(proc.stdout.strip().splitlines()[-1]))
    finally:
        subprocess.run([str(SLURM_SH), "stop"], capture_output=True, check=False, timeout=120)
