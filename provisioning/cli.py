"""The orchestrator's command (`python -m provisioning`, or `provision`): runs on the workstation.

    provision preflight HOST [--profile NAME]     check the host, print the table
    provision bench HOST[,HOST...] [--keep]       the whole flow, one bundle per host

`bench` never imports this package, so it has its own entry point; it maps failures to
one line and the named exit codes of bench.errors, like bench's own CLI.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

from bench import logs
from bench.errors import BenchError, Exit, HostCheckFailed, Interrupted
from bench.settings import Settings, load_settings
from provisioning import hosts, preflight
from provisioning.launch import launch_gpus
from provisioning.remote import Remote
from provisioning.requirements import load_requirements

DEFAULT_INVENTORY = Path("hosts.toml")
DEFAULT_PROFILE = "published"


def _hf_token_present(environ: dict[str, str]) -> bool:
    return bool(environ.get("HF_TOKEN") or environ.get("HUGGING_FACE_HUB_TOKEN"))


def _resolve(args: argparse.Namespace, name: str) -> tuple[hosts.Host, str]:
    inventory = hosts.load_inventory(args.inventory)
    host = hosts.resolve(name, inventory=inventory)
    profile = args.profile or host.profile or DEFAULT_PROFILE
    return host, profile


def preflight_host(
    host: hosts.Host, profile: str, *, trust_new_host: bool, environ: dict[str, str]
) -> preflight.Report:
    """Connect, run every check, print the table; raises HostCheckFailed when one fails."""
    req = load_requirements(profile, launch_gpus(profile))
    remote = Remote(host, trust_new_host=trust_new_host)
    try:
        remote.connect()
    except HostCheckFailed as exc:
        report = preflight.ssh_failed_report(host.name, exc)
        print(report.table())
        raise
    try:
        found = f"{host.address}, host key {remote.host_key_fingerprint}"
        report = preflight.run_preflight(
            remote,
            req,
            host=host.name,
            ssh_found=found,
            model_cache=host.model_cache,
            hf_token_present=_hf_token_present(environ),
        )
    finally:
        remote.close()
    print(f"preflight of {host.name} for launch profile {profile}:")
    print(report.table())
    report.raise_if_failed()
    return report


def _cmd_preflight(args: argparse.Namespace, settings: Settings) -> int:
    failed: list[str] = []
    names = hosts.parse_host_list(args.host)
    for name in names:
        host, profile = _resolve(args, name)
        try:
            preflight_host(
                host, profile, trust_new_host=args.trust_new_host, environ=dict(os.environ)
            )
        except HostCheckFailed as exc:
            if len(names) == 1:
                raise
            print(f"provision: {exc.one_line()}", file=sys.stderr)
            failed.append(name)
    if failed:
        raise HostCheckFailed(f"preflight failed on {', '.join(failed)}")
    return int(Exit.OK)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("host", help="an ssh alias or hostname; several as gpu01,gpu02")
    p.add_argument("--profile", help="launch profile (default: the inventory's, else published)")
    p.add_argument(
        "--inventory",
        type=Path,
        default=DEFAULT_INVENTORY,
        help="hosts.toml with per-host user, port, key, profile, model_cache",
    )
    p.add_argument(
        "--trust-new-host",
        action="store_true",
        help="accept and record the key of a host seen for the first time",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="provision", description="Run the benchmark on a GPU host over SSH."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    p = sub.add_parser("preflight", help="check a GPU host and print the table")
    _add_common(p)
    p.set_defaults(func=_cmd_preflight)
    return parser


def _raise_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    log = structlog.get_logger("provisioning")
    try:
        settings = load_settings()
        logs.configure(settings.log_format, settings.log_level)
        signal.signal(signal.SIGTERM, _raise_on_sigterm)
        code: int = args.func(args, settings)
        return code
    except BenchError as exc:
        print(f"provision: error: {exc.one_line()}", file=sys.stderr)
        log.debug("command_failed", error=exc.one_line(), exit_code=int(exc.exit_code))
        return int(exc.exit_code)
    except KeyboardInterrupt:
        print(f"provision: {Interrupted('interrupted').one_line()}", file=sys.stderr)
        return int(Exit.INTERRUPTED)
