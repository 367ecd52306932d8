"""The `bench` command: the one place that turns failures into a message and an exit code.

Each subcommand lives in the module that owns it and exposes
`register(subparsers) -> None`, setting `func(args, settings) -> int` as the handler.
Add a module to COMMAND_MODULES to add a subcommand.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Callable, Sequence
from typing import Protocol

import structlog

from bench import __version__, logs
from bench.errors import BenchError, Exit, Interrupted, exit_through_make
from bench.settings import Settings, load_settings

# Modules that define subcommands (imported lazily so `bench --help` stays fast).
COMMAND_MODULES: tuple[str, ...] = (
    "bench.twin.cli",
    "bench.card.command",
    "bench.run_cmd",
    "bench.bundle.commands",
    "bench.environment",
    "bench.verdict.command",
    "bench.verdict.fleet_command",
    "bench.local_cmd",
    "bench.report.command",
    "bench.provenance_cmd",
)


class _Registers(Protocol):
    def register(self, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None: ...


Handler = Callable[[argparse.Namespace, Settings], int]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bench", description="Reproducible LLM inference benchmarks for vLLM."
    )
    parser.add_argument("--version", action="version", version=f"bench {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        module: _Registers = importlib.import_module(name)
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
    try:
        settings = load_settings()
        logs.configure(settings.log_format, settings.log_level)
        signal.signal(signal.SIGTERM, _raise_on_sigterm)
        handler: Handler = args.func
        return handler(args, settings)
    except BenchError as exc:
        print(f"bench: error: {exc.one_line()}", file=sys.stderr)
        log.debug("command_failed", error=exc.one_line(), exit_code=int(exc.exit_code))
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print(f"bench: {Interrupted('interrupted').one_line()}", file=sys.stderr)
        return int(Exit.INTERRUPTED)


if __name__ == "__main__":
    sys.exit(main())
