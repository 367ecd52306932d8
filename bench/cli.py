"""The `bench` command: the one place that turns failures into a message and an exit code.

Each subcommand lives in `command.py` of the package that owns it and exposes
`register(subparsers) -> None`, setting `func(args, settings) -> int` as the handler.
Add the module to COMMANDS to add a subcommand.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

import structlog

from bench import __version__, escape, logs
from bench.bundle import command as bundle_command
from bench.card import command as card_command
from bench.errors import BenchError, Exit, Interrupted, exit_through_make
from bench.export import command as export_command
from bench.fleet import command as fleet_command
from bench.host import command as host_command
from bench.local import command as local_command
from bench.provenance import command as provenance_command
from bench.report import command as report_command
from bench.run import command as run_command
from bench.settings import Settings, load_settings
from bench.twin import command as twin_command
from bench.verdict import command as verdict_command


class _Registers(Protocol):
    def register(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None: ...


# The modules that define subcommands, in the order `bench --help` lists them.
COMMANDS: tuple[_Registers, ...] = (
    twin_command,
    card_command,
    run_command,
    bundle_command,
    host_command,
    verdict_command,
    fleet_command,
    local_command,
    report_command,
    provenance_command,
    export_command,
)


Handler = Callable[[argparse.Namespace, Settings], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench", description="Reproducible LLM inference benchmarks for vLLM."
    )
    parser.add_argument("--version", action="version", version=f"bench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.register(sub)
    return parser


def _raise_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    return exit_through_make("bench", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # The words as typed: a handler can tell a flag given with its default value from none.
    args.argv = list(sys.argv[1:] if argv is None else argv)
    log = structlog.get_logger("bench")
    secret: str | None = None
    try:
        settings = load_settings()
        secret = settings.api_key.get_secret_value() if settings.api_key else None
        logs.configure(settings.log_format, settings.log_level)
        signal.signal(signal.SIGTERM, _raise_on_sigterm)
        handler: Handler = args.func
        return handler(args, settings)
    except BenchError as exc:
        # A message may quote a name from outside (an archive member, a model id): its
        # control characters are shown escaped, never sent to the terminal (issue 29, M3).
        line = exc.one_line()
        if secret:  # a message may quote what a server echoed (issue 29, rule 3)
            line = line.replace(secret, "********")
        print(f"bench: error: {escape.terminal(line)}", file=sys.stderr)
        log.debug("command_failed", error=line, exit_code=int(exc.exit_code))
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print(f"bench: {Interrupted('interrupted').one_line()}", file=sys.stderr)
        return int(Exit.INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
