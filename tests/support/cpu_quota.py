"""A CPU quota on a process and everything it starts: the planted slowdown of the live verdict
test (issue 27), a real lever on a real server instead of a simulated factor.

The kernel's CFS bandwidth control, through the cgroup file system the machine offers: cgroup
v1's `cpu` controller (cpu.cfs_quota_us over cpu.cfs_period_us, this machine) or cgroup v2's
cpu.max. A folder of its own is made under the controller's root; the server is started through
`wrap(argv)`, a shell that writes its own pid into the group's cgroup.procs and then execs the
server, so the server and every process it forks (vLLM's engine core) run under the quota from
their first instruction. The folder is removed at the end, once its processes are gone."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

V1 = Path("/sys/fs/cgroup/cpu")
V2 = Path("/sys/fs/cgroup")
PERIOD_US = 100_000


class NoCpuQuota(RuntimeError):
    """No writable cgroup with the cpu controller here; the message says what was tried."""


@dataclass(frozen=True)
class CpuQuota:
    folder: Path
    cpus: float  # CPUs' worth of time per period the group may use

    def wrap(self, argv: Sequence[str]) -> list[str]:
        procs = self.folder / "cgroup.procs"
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(procs), *argv]

    def throttled_s(self) -> float:
        """Seconds the group was held back by the quota so far (cpu.stat's throttled time)."""
        stat = dict(
            line.split() for line in (self.folder / "cpu.stat").read_text().splitlines() if line
        )
        if "throttled_usec" in stat:
            return int(stat["throttled_usec"]) / 1e6
        return int(stat.get("throttled_time", 0)) / 1e9


def _controller_root() -> tuple[Path, str]:
    if (V1 / "cpu.cfs_quota_us").is_file() and os.access(V1, os.W_OK):
        return V1, "v1"
    controllers = V2 / "cgroup.controllers"
    if (
        controllers.is_file()
        and "cpu" in controllers.read_text().split()
        and os.access(V2, os.W_OK)
    ):
        return V2, "v2"
    raise NoCpuQuota(
        f"no writable cgroup cpu controller ({V1}/cpu.cfs_quota_us nor cpu in "
        f"{controllers}): the live verdict test needs root on a machine with CFS bandwidth control"
    )


# The scheduler's weight of a task at niceness -20 .. 19 (the kernel's sched_prio_to_weight):
# a cgroup v1 group's cpu.shares at the weight of one task of that niceness.
NICE_WEIGHT = (
    88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916,
    9548, 7620, 6100, 4904, 3906, 3121, 2501, 1991, 1586, 1277,
    1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
    110, 87, 70, 56, 45, 36, 29, 23, 18, 15,
)  # fmt: skip


@contextlib.contextmanager
def cpu_quota(cpus: float, name: str, nice: int | None = None) -> Iterator[CpuQuota]:
    """A group whose processes together get at most CPUS of CPU time per period.

    Against the machine's other work the group competes as one task, of the default weight
    (niceness 0) whatever its processes' own niceness: niceness orders the tasks inside a
    group, not the group against the rest. NICE gives the group the weight of one task of
    that niceness (cpu.shares, v1; cpu.weight.nice, v2), so that the quota, not the load
    beside it, is what holds it back."""
    root, version = _controller_root()
    folder = root / f"bench-quota-{name}-{os.getpid()}"
    folder.mkdir()
    try:
        quota = int(cpus * PERIOD_US)
        if version == "v1":
            (folder / "cpu.cfs_period_us").write_text(str(PERIOD_US))
            (folder / "cpu.cfs_quota_us").write_text(str(quota))
            if nice is not None:
                (folder / "cpu.shares").write_text(str(NICE_WEIGHT[nice + 20]))
        else:
            (folder / "cpu.max").write_text(f"{quota} {PERIOD_US}")
            if nice is not None:
                (folder / "cpu.weight.nice").write_text(str(nice))
        yield CpuQuota(folder, cpus)
    finally:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                folder.rmdir()
                break
            except OSError:  # its last processes are still being reaped
                time.sleep(0.1)
