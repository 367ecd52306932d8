"""`provision preflight HOST[,HOST...]`: check each host, print its table.

Every host is checked even when one fails; with one host its own failure is the error.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from bench.command_line import SubParsers
from bench.errors import Exit, HostCheckFailed
from bench.settings import Settings
from provisioning.commands.options import add_common, target_choice
from provisioning.hosts import inventory
from provisioning.runs.targets import TargetChoice, preflight_host, resolve_target


def register(sub: SubParsers) -> None:
    p = sub.add_parser("preflight", help="check a GPU host and print the table")
    add_common(p)
    p.set_defaults(func=_preflight)


def _preflight(args: argparse.Namespace, settings: Settings) -> int:
    names = inventory.parse_host_list(args.host)
    return preflight_hosts(names, target_choice(args), trust_new_host=args.trust_new_host)


def preflight_hosts(names: Sequence[str], choice: TargetChoice, *, trust_new_host: bool) -> int:
    failed: list[str] = []
    for name in names:
        target = resolve_target(choice, name)
        try:
            preflight_host(target, trust_new_host=trust_new_host, environ=dict(os.environ))
        except HostCheckFailed as exc:
            if len(names) == 1:
                raise
            print(f"provision: {exc.one_line()}", file=sys.stderr)
            failed.append(name)
    if failed:
        raise HostCheckFailed(f"preflight failed on {', '.join(failed)}")
    return int(Exit.OK)
