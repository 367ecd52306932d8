"""docs/commands.md, written from the Makefile's `## ` help lines and the argparse parsers of
`bench` and `provision` (built in-process), so the reference cannot drift from the code:
tests/unit/test_docs.py compares the committed page with what this prints.

    python -m tools.commands_doc > docs/commands.md      (`make commands-doc`)
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `target: prerequisites ## what it does`, as `make help` reads them.
HOME_PATH = re.compile(r"(?<![\w~])/\S*?/(\.config/|\.cache/)")
HELP_LINE = re.compile(r"^([a-zA-Z0-9_-]+):[^=#]*## (.*)$")

HEADER = """\
# Commands

Every `make` target, `bench` command and `provision` command with each of its options: this
page is written by `make commands-doc` from the Makefile and the command parsers, and
`tests/unit/test_docs.py` fails when it is not what they say. The commands live in
`.venv/bin` (`make setup` makes it): `.venv/bin/bench`, `.venv/bin/provision` (or
`.venv/bin/python -m provisioning`). What each does at length: the pages linked from the
[README](../README.md#docs).
"""


def make_targets(makefile: str) -> list[tuple[str, str]]:
    return [
        (m.group(1), m.group(2)) for line in makefile.splitlines() if (m := HELP_LINE.match(line))
    ]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _subcommands(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return [(name, helps.get(name, ""), sub) for name, sub in action.choices.items()]
    return []


def _option(action: argparse.Action) -> str:
    names = ", ".join(action.option_strings)
    if action.nargs == 0:
        return names
    metavar = action.metavar or action.dest.upper()
    return f"{names} {metavar if isinstance(metavar, str) else ' '.join(metavar)}"


def _commands(path: str, parser: argparse.ArgumentParser, about: str) -> Iterator[str]:
    subs = _subcommands(parser)
    if subs:
        for name, help_text, sub in subs:
            yield from _commands(f"{path} {name}", sub, help_text)
        return
    formatter = parser._get_formatter()
    positionals = " ".join(
        a.metavar if isinstance(a.metavar, str) else a.dest.upper()
        for a in parser._actions
        if not a.option_strings
    )
    yield f"### `{path}`{' ' + positionals if positionals else ''}\n"
    if about:
        yield f"{_cell(about)}.\n" if not about.endswith(".") else f"{_cell(about)}\n"
    options = [
        a
        for a in parser._actions
        if a.option_strings and a.help != argparse.SUPPRESS and "--help" not in a.option_strings
    ]
    if options:
        yield "| option | what |\n|---|---|"
        for action in options:
            help_text = formatter._expand_help(action) if action.help else ""
            # A default under the home directory reads the same for every reader (the
            # parsers may have read HOME when first imported: any home reads as ~).
            help_text = HOME_PATH.sub(r"~/\1", help_text)
            yield f"| `{_cell(_option(action))}` | {_cell(help_text)} |"
        yield ""


def page() -> str:
    from bench.cli import build_parser as bench_parser
    from provisioning.cli import build_parser as provision_parser  # noqa: TID251 (reads its parser)

    lines = [HEADER, "## make targets\n", "| target | what |", "|---|---|"]
    makefile = (ROOT / "Makefile").read_text("utf-8")
    lines += [f"| `make {t}` | {_cell(h)} |" for t, h in make_targets(makefile)]
    lines += ["", "## bench\n"]
    lines += list(_commands("bench", bench_parser(), ""))
    lines += ["## provision\n"]
    lines += list(_commands("provision", provision_parser(), ""))
    return "\n".join(lines).rstrip("\n") + "\n"


def main() -> int:
    sys.stdout.write(page())
    return 0


if __name__ == "__main__":
    sys.exit(main())
