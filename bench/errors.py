"""Run failures as one small exception tree, and the named exit codes of the CLI.

    BenchError                      exit code carried by the class
    ├── UsageError                  bad input the user can fix (EXIT.USAGE)
    │   ├── ProfileError            unknown or malformed profile / launch profile
    │   ├── SettingsError           malformed settings or environment value
    │   └── CardError               a published card that does not read (names the line)
    ├── ServerError                 the server under test is unreachable or unusable
    │   └── ServerUnreachable       nothing answered (refused, reset, closed, time-out)
    ├── RunFailed                   a sweep could not complete
    ├── VerifyFailed                a bundle failed verification (names the file)
    ├── HostCheckFailed             preflight of a GPU host failed
    ├── ToolMissing                 an external tool the step needs is not installed
    └── Interrupted                 Ctrl-C / SIGTERM; what finished is kept

Request failures are *not* exceptions: they are data on the request record.
The CLI (`bench.cli`) is the one place that turns these into a message and an exit code.
"""

from __future__ import annotations

from enum import IntEnum

from pydantic import ValidationError


class Exit(IntEnum):
    """Named exit codes, documented in the README."""

    OK = 0
    NOT_REPRODUCED = 1  # a verdict that says "no": reproduce failed, compare found a change
    USAGE = 2  # bad input: arguments, settings, profile, card
    SERVER = 3  # the server under test could not be reached or misbehaved
    RUN_FAILED = 4  # the sweep stopped before finishing (partial results kept)
    VERIFY_FAILED = 5  # a bundle failed hash, signature or schema checks
    HOST_CHECK = 6  # the GPU host failed preflight
    TOOL_MISSING = 7  # a required external tool is not installed
    DISK = 8  # results could not be written (disk full, permissions)
    PARTIAL = 9  # a verdict on part only: cells of the card not measured, cells not comparable
    NOT_COMPARABLE = 10  # settings differ from the card's / between the runs (not --accept-ed)
    INCONCLUSIVE = 11  # reproduce with trials: an interval straddles the tolerance band
    INTERRUPTED = 130  # Ctrl-C or SIGTERM; finished cells are kept


class BenchError(Exception):
    """Base of every failure the CLI reports as one line."""

    exit_code: Exit = Exit.RUN_FAILED

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class UsageError(BenchError):
    exit_code = Exit.USAGE


class ProfileError(UsageError):
    pass


class SettingsError(UsageError):
    pass


class CardError(UsageError):
    pass


class ServerError(BenchError):
    exit_code = Exit.SERVER


class ServerUnreachable(ServerError):
    """No HTTP answer at all: a run that stops on it marks the cells the crash cut."""


class RunFailed(BenchError):
    exit_code = Exit.RUN_FAILED


class VerifyFailed(BenchError):
    exit_code = Exit.VERIFY_FAILED


class HostCheckFailed(BenchError):
    exit_code = Exit.HOST_CHECK


class ToolMissing(BenchError):
    exit_code = Exit.TOOL_MISSING


class DiskError(BenchError):
    exit_code = Exit.DISK


class Interrupted(BenchError):
    exit_code = Exit.INTERRUPTED


def first_problem(exc: ValidationError, whole: str = "") -> tuple[str, str]:
    """(where, what) of a validation error's first problem, for a one-line message: the
    dotted path of the field (`whole` when it is the document itself) and pydantic's
    message without its "Value error, " prefix."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or whole
    return where, str(first["msg"]).removeprefix("Value error, ")
