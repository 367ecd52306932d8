"""`bench environment`: record where a run happened (environment.json) into a run directory."""

from __future__ import annotations

import argparse
import shlex
from datetime import UTC, datetime
from pathlib import Path

from bench.errors import UsageError
from bench.host.environment import capture, server_is_twin, server_version_of, write
from bench.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("environment", help="record where a run happened (environment.json)")
    p.add_argument("--out", type=Path, required=True, metavar="DIR", help="the run directory")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--server-port", type=int, help="read the launch of the server on it")
    where.add_argument("--server-pid", type=int, help="read the launch of this process")
    where.add_argument("--launch-argv", help="the launch command line, when not beside it")
    p.add_argument("--vllm-version", default=None)
    p.add_argument("--image-digest", default=None, help="sha256:... of the server's image")
    p.add_argument(
        "--image-labels",
        type=Path,
        default=Path("/etc/bench/image-labels.json"),
        help="JSON object of the image's labels (default: the one baked into the image)",
    )
    p.set_defaults(func=_environment)


def _environment(args: argparse.Namespace, settings: Settings) -> int:
    out: Path = args.out
    if not out.is_dir():
        raise UsageError(f"{out}: not a directory", hint="give the run directory of `bench run`")
    given = shlex.split(args.launch_argv) if args.launch_argv else None
    env = capture(
        settings,
        now=datetime.now(UTC),
        server_port=args.server_port,
        server_pid=args.server_pid,
        given_argv=given,
        vllm_version=args.vllm_version or server_version_of(out),
        image_digest=args.image_digest,
        image_labels_file=args.image_labels,
        twin=server_is_twin(out),
    )
    print(write(out, env))
    return 0
