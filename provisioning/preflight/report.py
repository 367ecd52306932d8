"""What a preflight reports: one Check per line (name, status, what was found, what to do
when it failed), the Report of a host as a table, and the helpers the check families
(provisioning.preflight.checks, preflight_gpu, preflight_storage) share."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from tabulate import tabulate

from bench.errors import HostCheckFailed
from provisioning.hosts.shell import CommandResult


class Status(StrEnum):
    OK = "ok"
    FAIL = "FAIL"
    WARN = "warn"
    SKIP = "-"


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    found: str
    fix: str = ""


@dataclass
class Report:
    host: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.status is not Status.FAIL for c in self.checks)

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status is Status.FAIL]

    def table(self) -> str:
        rows = [(c.name, str(c.status), c.found, c.fix) for c in self.checks]
        return tabulate(rows, headers=("check", "status", "found", "what to do"), tablefmt="simple")

    def raise_if_failed(self) -> None:
        if not self.ok:
            names = ", ".join(c.name for c in self.failed)
            raise HostCheckFailed(
                f"preflight of {self.host} failed: {names}",
                hint=self.failed[0].fix or "see the table above",
            )


def ok_or_fail(name: str, problem: object, ok: str, failed: str, fix: str) -> Check:
    """OK with OK's text when PROBLEM is None, else FAIL with FAILED and FIX."""
    if problem is None:
        return Check(name, Status.OK, ok)
    return Check(name, Status.FAIL, failed, fix)


def last_line(res: CommandResult) -> str:
    """The last line of what the command printed (stderr first); its exit code if none."""
    lines = (res.stderr.strip() or res.stdout.strip()).splitlines()
    return lines[-1] if lines else f"exit code {res.exit_code}"
