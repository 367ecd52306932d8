"""The `bench` command: its subcommands, run by bench.command_line (the one place that turns
failures into a message and an exit code, for `provision` too).

Each subcommand lives in `command.py` of the package that owns it and exposes
`register(subparsers) -> None`, setting `func(args, settings) -> int` as the handler.
Add the module to COMMANDS to add a subcommand.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bench import __version__, command_line
from bench.bundle import command as bundle_command
from bench.errors import exit_through_make
from bench.export import command as export_command
from bench.fleet import command as fleet_command
from bench.history import command as history_command
from bench.host import command as host_command
from bench.local import command as local_command
from bench.provenance import command as provenance_command
from bench.publishers import command as card_command
from bench.report import command as report_command
from bench.run import command as run_command
from bench.twin import command as twin_command
from bench.verdict import command as verdict_command

# The modules that define subcommands, in the order `bench --help` lists them.
COMMANDS: tuple[command_line.Registers, ...] = (
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
    history_command,
)


def build_parser() -> argparse.ArgumentParser:
    return command_line.parser_of(
        "bench",
        "Reproducible LLM inference benchmarks for vLLM.",
        COMMANDS,
        version=f"bench {__version__}",
    )


def main(argv: Sequence[str] | None = None) -> int:
    return exit_through_make("bench", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    # The words as typed: a handler can tell a flag given with its default value from none.
    args.argv = list(sys.argv[1:] if argv is None else argv)
    return command_line.run("bench", args)


if __name__ == "__main__":
    sys.exit(main())
