"""`provision clean HOST[,HOST...] [--run-id ID]`: remove the containers a run left.

For after a crash or `kill -9` of the orchestrator, which cannot clean up itself.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from bench.command_line import SubParsers
from bench.errors import Exit
from bench.settings import Settings
from provisioning.commands.options import add_common
from provisioning.containers.engine import DockerEngine
from provisioning.flow.host_run import scope_of
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.runs.workers import check_run_id


def register(sub: SubParsers) -> None:
    p = sub.add_parser("clean", help="remove containers left by a run (e.g. after kill -9)")
    add_common(p)
    p.add_argument("--run-id", default=None, help="only this run (default: every vllm-bench run)")
    p.set_defaults(func=_clean)


def _clean(args: argparse.Namespace, settings: Settings) -> int:
    check_run_id(args.run_id)
    listed = inventory.load_inventory(args.inventory)
    names = inventory.parse_host_list(args.host)
    return clean(names, listed, run_id=args.run_id, trust_new_host=args.trust_new_host)


def clean(
    names: Sequence[str], listed: inventory.Inventory, *, run_id: str | None, trust_new_host: bool
) -> int:
    """Remove the containers of RUN_ID (else of every run) on each host named."""
    for name in names:
        host = inventory.resolve(name, inventory=listed)
        with Remote(host, trust_new_host=trust_new_host):  # checks the host key first
            pass
        with DockerEngine(host) as engine:
            scopes = [scope_of(run_id, host.name)] if run_id else sorted(engine.run_ids())
            removed = [n for scope in scopes for n in engine.remove_run(scope)]
        print(f"{host.name}: removed {len(removed)} container(s){': ' if removed else ''}"
              f"{', '.join(removed)}")  # fmt: skip
    return int(Exit.OK)
