"""The one runner of both command lines, `bench` (bench.cli) and `provision` (provisioning.cli).

Each command module exposes `register(subparsers) -> None` and sets `func(args, settings) ->
int` as its handler; `parser_of` builds a program's parser from its command modules, and
`run` is the one place that loads the settings, calls the handler and turns a failure into
one line on stderr and its named exit code (bench.errors): BenchError → its code, Ctrl-C or
SIGTERM → Exit.INTERRUPTED. (`bench` never imports provisioning: provisioning uses this.)
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol, TypeAlias

import structlog

from bench import escape, logs
from bench.errors import BenchError, Exit, Interrupted
from bench.secrets import KnownSecrets
from bench.settings import Settings, load_settings

# A string: the class is not subscriptable at run time.
SubParsers: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
Handler: TypeAlias = Callable[[argparse.Namespace, Settings], int]


class Registers(Protocol):
    def register(self, sub: SubParsers) -> None: ...


def parser_of(
    prog: str, description: str, commands: Iterable[Registers], *, version: str | None = None
) -> argparse.ArgumentParser:
    """PROG's parser: one subcommand per registration, in the order COMMANDS lists them."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    if version is not None:
        parser.add_argument("--version", action="version", version=version)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in commands:
        module.register(sub)
    return parser


def bench_program() -> str:
    """`bench` as a shell on this machine runs it, for the commands a run prints: the console
    script beside this Python, else this Python with `-P -m bench` (`python -m bench` run
    from the folder that holds the clone, named bench, would import that folder instead of
    the package)."""
    script = Path(sys.executable).with_name("bench")
    if script.is_file():
        return shlex.quote(str(script))
    return f"{shlex.quote(sys.executable)} -P -m bench"


def _raise_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(program: str, args: argparse.Namespace, *, logger: str | None = None) -> int:
    """Call ARGS' handler with the settings; a failure is one line and its exit code."""
    log = structlog.get_logger(logger or program)
    masks = KnownSecrets.of(environ=os.environ)
    try:
        settings = load_settings()
        masks = settings.known_secrets(os.environ)
        logs.configure(settings.log_format, settings.log_level)
        signal.signal(signal.SIGTERM, _raise_on_sigterm)
        handler: Handler = args.func
        return handler(args, settings)
    except BenchError as exc:
        # A message may quote a name from outside (an archive member, a model id): its
        # control characters are shown escaped, never sent to the terminal (issue 29, M3).
        # A message may quote what a server echoed (issue 29, rule 3; issue 48).
        line = masks.mask(exc.one_line())
        print(f"{program}: error: {escape.terminal(line)}", file=sys.stderr)
        log.debug("command_failed", error=line, exit_code=int(exc.exit_code))
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print(f"{program}: {Interrupted('interrupted').one_line()}", file=sys.stderr)
        return int(Exit.INTERRUPTED)
