"""The commands behind `provision preflight`, `bench` and `clean`.

Every host is checked first; nothing starts anywhere unless every host passes. Then each
host runs its flow in its own thread (one bundle per host); Ctrl-C interrupts them all,
each brings back what finished and removes its containers; one summary at the end.

Its parts: provisioning.runs.targets (a host resolved and preflighted),
provisioning.runs.workers (run ids, the threads that run hosts), provisioning.runs.summary
(the summary, verdicts, exit code).
"""

from __future__ import annotations

import argparse
import os
import sys

from bench.errors import Exit, HostCheckFailed
from bench.settings import Settings
from provisioning.containers.engine import Engine
from provisioning.flow import signing
from provisioning.flow.host_run import HostRun, scope_of
from provisioning.flow.options import Options, Secrets
from provisioning.hosts import inventory
from provisioning.hosts.remote import Remote
from provisioning.runs.summary import default_card, summarise
from provisioning.runs.targets import (
    build_spec,
    hf_token,
    preflight_host,
    resolve_target,
)
from provisioning.runs.workers import Worker, check_run_id, new_run_id, run_all


def cmd_preflight(args: argparse.Namespace, settings: Settings) -> int:
    names = inventory.parse_host_list(args.host)
    failed: list[str] = []
    for name in names:
        target = resolve_target(args, name)
        try:
            preflight_host(target, trust_new_host=args.trust_new_host, environ=dict(os.environ))
        except HostCheckFailed as exc:
            if len(names) == 1:
                raise
            print(f"provision: {exc.one_line()}", file=sys.stderr)
            failed.append(name)
    if failed:
        raise HostCheckFailed(f"preflight failed on {', '.join(failed)}")
    return int(Exit.OK)


def cmd_clean(args: argparse.Namespace, settings: Settings) -> int:
    """Remove the containers of one run (--run-id) or of every run on the hosts.

    For after a crash or `kill -9` of the orchestrator, which cannot clean up itself.
    """
    check_run_id(args.run_id)
    listed = inventory.load_inventory(args.inventory)
    for name in inventory.parse_host_list(args.host):
        host = inventory.resolve(name, inventory=listed)
        with Remote(host, trust_new_host=args.trust_new_host):  # checks the host key first
            pass
        with Engine(host) as engine:
            scopes = [scope_of(args.run_id, host.name)] if args.run_id else sorted(engine.run_ids())
            removed = [n for scope in scopes for n in engine.remove_run(scope)]
        print(f"{host.name}: removed {len(removed)} container(s){': ' if removed else ''}"
              f"{', '.join(removed)}")  # fmt: skip
    return int(Exit.OK)


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    environ = dict(os.environ)
    check_run_id(args.run_id)
    targets = [resolve_target(args, name) for name in inventory.parse_host_list(args.host)]
    for target in targets:  # nothing starts unless every host passes
        preflight_host(target, trust_new_host=args.trust_new_host, environ=environ)
    run_id = args.run_id or new_run_id()
    bench_args = tuple(args.bench_args)
    allowed = args.allowed_signers or signing.default_allowed_signers()
    workers = []
    for t in targets:
        opts = Options(
            profile=t.profile,
            requirements=t.requirements,
            image_ref=t.image_ref,
            run_id=run_id,
            results_dir=args.results,
            allowed_signers=allowed,
            bench_args=bench_args,
            keep=args.keep,
            secrets=Secrets(api_key=settings.api_key, hf_token=hf_token(environ)),
            image_source=args.image_source,
            build=build_spec(args, t),
        )
        workers.append(Worker(HostRun(t.host, opts, remote=Remote(t.host))))
    run_all(workers)
    card = None if args.no_verdict else args.card or default_card(targets[0].profile)
    return summarise(workers, allowed, card, fleet_of=True)
