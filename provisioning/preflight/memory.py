"""Preflight check of a host's memory: MemTotal from /proc/meminfo against what the launch
profile says it needs (host_requirements.toml, `host_memory_gib`, with its reason there).

MemTotal, not MemAvailable: the page cache that holds weights read before counts as
available, and a host that just ran another job reports little; what cannot change
before the run is how much memory the machine has.
"""

from __future__ import annotations

from provisioning.hosts.shell import Probe
from provisioning.preflight.report import Check, Status
from provisioning.preflight.requirements import GIB, Requirements

_KIB = 1024


def mem_total_bytes(meminfo: str) -> int | None:
    """MemTotal of /proc/meminfo's text in bytes, None when it is not there or not a
    number in range (a hostile or broken host)."""
    for line in meminfo.splitlines():
        name, _, rest = line.partition(":")
        if name.strip() != "MemTotal":
            continue
        parts = rest.split()
        number = parts[0] if len(parts) == 2 and parts[1] == "kB" else ""
        # ASCII digits only: str.isdigit (and int) take other scripts' digits too.
        if number.isascii() and number.isdigit() and len(number) <= 15:
            return int(number) * _KIB
        return None
    return None


def check_memory(probe: Probe, req: Requirements) -> Check:
    res = probe.run("cat /proc/meminfo")
    total = mem_total_bytes(res.stdout) if res.ok else None
    if total is None:
        return Check(
            "memory",
            Status.WARN,
            "could not read MemTotal from /proc/meminfo",
            f"make sure the host has {req.memory_bytes / GIB:.0f} GiB of RAM"
            if req.memory_bytes
            else "check `cat /proc/meminfo` on the host",
        )
    found = f"{total / GIB:.0f} GiB"
    if req.memory_bytes and total < req.memory_bytes:
        return Check(
            "memory",
            Status.FAIL,
            f"{found}; the {req.profile} launch needs {req.memory_bytes / GIB:.0f} GiB "
            f"({req.memory_why})",
            "run it on a host with more RAM, or a smaller profile (PROFILE=smoke)",
        )
    need = f" (needs {req.memory_bytes / GIB:.0f} GiB)" if req.memory_bytes else ""
    return Check("memory", Status.OK, found + need)
