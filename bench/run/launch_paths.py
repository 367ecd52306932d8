"""The answer paths a server's launch promises, read from its command line.

vLLM's `--reasoning-parser NAME` moves a reasoning model's thinking into the answer's
reasoning field; `--enable-auto-tool-choice` with `--tool-call-parser NAME` turns a tool
call the model writes into the answer's `tool_calls`. A commit that breaks either parser
answers differently even when every token is the same, so the answer fingerprint sends one
prompt for each path the launch enables (bench.run.fingerprint).

The launch is the server's argv as `bench run` found it (environment.json: read from /proc
when bench runs beside the server); with none known, no path is promised. Each flag is
`--flag value` or `--flag=value`; the last one given wins, as with argparse. A parser name
is kept only when it is a plain name (letters, digits, `_`, `-`, `.`, at most 64), so a
hostile argv puts nothing else into results.json.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
REASONING_FLAG = "--reasoning-parser"
TOOL_CHOICE_FLAG = "--enable-auto-tool-choice"
TOOL_PARSER_FLAG = "--tool-call-parser"


@dataclass(frozen=True)
class LaunchPaths:
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None  # set only with --enable-auto-tool-choice too

    @property
    def any(self) -> bool:
        return self.reasoning_parser is not None or self.tool_call_parser is not None


def _value(argv: Sequence[str], flag: str) -> str | None:
    found = None
    for i, word in enumerate(argv):
        if word == flag and i + 1 < len(argv):
            found = argv[i + 1]
        elif word.startswith(flag + "="):
            found = word[len(flag) + 1 :]
    return found if found is not None and _NAME.fullmatch(found) else None


def from_argv(argv: Sequence[str]) -> LaunchPaths:
    """The paths ARGV enables (module docstring)."""
    tools = _value(argv, TOOL_PARSER_FLAG) if TOOL_CHOICE_FLAG in argv else None
    return LaunchPaths(reasoning_parser=_value(argv, REASONING_FLAG), tool_call_parser=tools)
