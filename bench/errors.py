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
    ├── HistoryError                the results history's database cannot be used
    └── Interrupted                 Ctrl-C / SIGTERM; what finished is kept

Request failures are *not* exceptions: they are data on the request record.
The CLI (`bench.cli`) is the one place that turns these into a message and an exit code.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable
from enum import IntEnum

from pydantic import ValidationError


class Exit(IntEnum):
    """Named exit codes, documented in docs/faults.md."""

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
    INCONCLUSIVE = 11  # reproduce: an interval straddles the band; compare: not resolved
    HISTORY = 12  # the results history's database could not be opened, read or written
    INTERRUPTED = 130  # Ctrl-C or SIGTERM; finished cells are kept


# What each code means, as docs/faults.md's "Exit codes" table says it (a test holds them equal).
MEANING: dict[Exit, str] = {
    Exit.OK: 'done; a reproduce verdict of "yes"; a compare whose every cell is EQUIVALENT '
    "within the margin",
    Exit.NOT_REPRODUCED: (
        'a verdict of "no": a cell outside tolerance, a change found, or a node of a fleet '
        "stands out"
    ),
    Exit.USAGE: "bad input: arguments, settings, profile, card",
    Exit.SERVER: "the server under test could not be reached or misbehaved",
    Exit.RUN_FAILED: "the sweep stopped before finishing (finished cells are kept)",
    Exit.VERIFY_FAILED: "a bundle failed its hash, signature or schema check",
    Exit.HOST_CHECK: "the GPU host failed preflight",
    Exit.TOOL_MISSING: "an external tool the step needs is not installed",
    Exit.DISK: "results could not be written",
    Exit.PARTIAL: "a verdict on part only: the run covers part of the card, or compare cannot "
    "compare some cells",
    Exit.NOT_COMPARABLE: "settings differ from the card's (or between compared runs) and were "
    "not `--accept`-ed",
    Exit.INCONCLUSIVE: "reproduce with trials: a cell's 95 % interval straddles the tolerance "
    "band; compare: NOT RESOLVED, neither a change nor equivalence within the margin",
    Exit.HISTORY: "the results history's database could not be opened, read or written",
    Exit.INTERRUPTED: "Ctrl-C or SIGTERM; finished cells are kept",
}

# GNU make exits 2 whenever a recipe fails, whatever the program's code (make has no way to
# pass it on). The Makefile's recipes set this to their target's name; a program that fails
# under it ends with one line giving its own code and the command a script should call.
MAKE_TARGET_ENV = "BENCH_MAKE_TARGET"


def direct_command() -> str:
    """This process's command line as a shell takes it (`python -m X` when run so: then
    sys.argv[0] is the module's file, and the interpreter's own words come first)."""
    head = sys.orig_argv[: len(sys.orig_argv) - len(sys.argv) + 1]
    if "-m" in head:
        return shlex.join(sys.orig_argv)
    return shlex.join(sys.argv)


def make_line(target: str, program: str, code: int, command: str) -> str:
    """The line a failed recipe of `make TARGET` ends with."""
    try:
        named = f"{Exit(code).name}: {MEANING[Exit(code)]}"
    except ValueError:
        named = "not a named code"
    return (
        f"make {target}: {program} exited {code} ({named}); make itself exits 2, "
        f"scripts should call {command} to get the code"
    )


def exit_through_make(program: str, main: Callable[[], int]) -> int:
    """Run a CLI's `main`; when a Makefile recipe ran it (MAKE_TARGET_ENV) and it fails, say
    its named code on stderr. Taken out of the environment so commands it starts stay quiet."""
    target = os.environ.pop(MAKE_TARGET_ENV, "")
    try:
        code = main()
    except SystemExit as exc:  # argparse's own exit (2 on bad arguments, 0 for --help)
        status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if target and status:
            print(make_line(target, program, status, direct_command()), file=sys.stderr)
        raise
    if target and code:
        print(make_line(target, program, code, direct_command()), file=sys.stderr)
    return code


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


class HistoryError(BenchError):
    exit_code = Exit.HISTORY


class Interrupted(BenchError):
    exit_code = Exit.INTERRUPTED


def first_problem(exc: ValidationError, whole: str = "") -> tuple[str, str]:
    """(where, what) of a validation error's first problem: the dotted path of the field
    (`whole` when it is the document itself) and pydantic's message without its
    "Value error, " prefix. The one reader of pydantic's error list (see
    `validation_message`)."""
    errors = exc.errors()
    if not errors:
        return whole, "not valid"
    first = errors[0]
    # A key is the input's own text (a TOML key may hold a newline): escaped to one line.
    where = ".".join(one_line(str(p)) for p in first["loc"]) or whole
    return where, " ".join(str(first["msg"]).removeprefix("Value error, ").split())


def one_line(text: str) -> str:
    """`text` with its control characters escaped (\\n, \\x1b): one line, whatever it held."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )


def validation_message(exc: ValidationError, whole: str = "") -> str:
    """A validation error as one line: "where: what" of its first problem (just "what"
    when it has no place and `whole` is empty), and how many more there are."""
    where, what = first_problem(exc, whole)
    line = f"{where}: {what}" if where else what
    more = exc.error_count() - 1
    return line + (f" (and {more} more)" if more > 0 else "")
