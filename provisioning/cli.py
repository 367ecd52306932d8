"""The orchestrator's command (`python -m provisioning`, or `provision`): runs on the workstation.

    provision preflight HOST [--profile NAME]     check the host, print the table
    provision bench HOST[,HOST...] [--keep]       the whole flow, one bundle per host
    provision compare HOST --image-a A --image-b B  both sweeps, then `bench compare`
    provision compare-commits HOST --commit-a A --commit-b B  an image per vLLM commit, built
                                                  on the host; both sweeps; `bench compare`
    provision clean HOST [--run-id ID]            remove containers a crashed run left
    provision bench --slurm PARTITION --nodes N   the fleet as one Slurm job (one task per
                                                  node; provisioning/slurm/submit.py)
    provision node-run RUN_DIR                    one node's part of that job (run by srun)
    provision attach RUN_DIR                      follow that job again (submitter stopped)

`bench` never imports this package, so it has its own entry point; it maps failures to
one line and the named exit codes of bench.errors, like bench's own CLI.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from pathlib import Path

import structlog

from bench import logs
from bench.errors import BenchError, Exit, Interrupted, UsageError, exit_through_make
from bench.settings import Settings, load_settings
from provisioning.commands import bench, bisect, compare
from provisioning.image.build import SOURCES
from provisioning.slurm import node, submit

DEFAULT_INVENTORY = Path("hosts.toml")


def _add_common(p: argparse.ArgumentParser, *, host_optional: bool = False) -> None:
    if host_optional:
        p.add_argument(
            "host", nargs="?", help="an ssh alias or hostname; several as gpu01,gpu02 "
            "(none with --slurm)",
        )  # fmt: skip
    else:
        p.add_argument("host", help="an ssh alias or hostname; several as gpu01,gpu02")
    p.add_argument("--profile", help="launch profile (default: the inventory's, else published)")
    p.add_argument(
        "--inventory",
        type=Path,
        default=DEFAULT_INVENTORY,
        help="hosts.toml with per-host user, port, key, profile, model_cache",
    )
    p.add_argument("--image", help="image to run (default: the profile's target as built here)")
    p.add_argument(
        "--trust-new-host",
        action="store_true",
        help="accept and record the key of a host seen for the first time",
    )
    p.add_argument(
        "--no-weights-download",
        action="store_true",
        help="the weights must already be in the host's cache (the profile's pinned revision, "
        "else refs/main); preflight fails when they are not",
    )


def _add_pair_outputs(p: argparse.ArgumentParser) -> None:
    """Where the two runs of a comparison (compare, compare-commits) go."""
    p.add_argument("--results", type=Path, default=Path("results"), help="local results folder")
    p.add_argument(
        "--run-id",
        default=None,
        help="runs are <run-id>-a1, -b1, ... (with one trial a side: <run-id>-a and -b)",
    )
    p.add_argument("--allowed-signers", type=Path, default=None)
    p.add_argument(
        "--trials-per-side",
        type=int,
        default=3,
        metavar="N",
        help="sweeps per image, each a separate signed bundle (default 3: run-to-run noise "
        "is measured from them)",
    )
    p.add_argument(
        "--order",
        choices=("interleaved", "blocked", "sequential"),
        default="interleaved",
        help="interleaved (default): A B B A A B ..., so drift over hours is balanced; "
        "blocked: all A, then all B (fewer image switches; the verdict says drift is not "
        "controlled); sequential: A B A, then more sweeps of the cells still open only, "
        "up to 5 a side (about 55 %% of the server time; --trials-per-side is ignored)",
    )


def _add_build_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--build-arg",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a Dockerfile build argument for builds on the host (repeatable), "
        "e.g. PYTHON_BASE=bench-base:latest on an offline host",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="provision", description="Run the benchmark on a GPU host over SSH."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add in (
        _cmd_preflight,
        _cmd_bench,
        _cmd_compare,
        _cmd_compare_commits,
        _cmd_bisect,
        _cmd_clean,
        _cmd_node_run,
        _cmd_attach,
    ):
        add(sub)
    return parser


def _cmd_preflight(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("preflight", help="check a GPU host and print the table")
    _add_common(p)
    p.set_defaults(func=bench.cmd_preflight)


def _cmd_bench(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bench",
        help="the whole flow: preflight, server, sweep, signed bundle",
        epilog="arguments after -- go to `bench run` inside the container",
    )
    _add_common(p, host_optional=True)
    p.add_argument("--keep", action="store_true", help="leave the server running afterwards")
    p.add_argument("--results", type=Path, default=Path("results"), help="local results folder")
    p.add_argument("--run-id", default=None, help="default: UTC time + random suffix")
    p.add_argument(
        "--card",
        type=Path,
        default=None,
        help="published card to judge each bundle against (default: the profile's, bench/cards/)",
    )
    p.add_argument(
        "--no-verdict", action="store_true", help="print no verdict (e.g. for a partial sweep)"
    )
    p.add_argument(
        "--allowed-signers",
        type=Path,
        default=None,
        help="local allowed-signers file the host keys are added to "
        "(default ~/.config/vllm-bench/allowed_signers)",
    )
    p.add_argument(
        "--image-source",
        choices=SOURCES,
        default="auto",
        help="stream: this machine's image when the host lacks it (docker save/load); "
        "build: build the profile's stage on the host from this checkout; auto (default): "
        "stream, or build on the host when neither has the image",
    )
    _add_build_args(p)
    _add_slurm(p)
    p.set_defaults(func=_bench)


def _cmd_compare(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare",
        help="two images on one host, one sweep after the other, then bench compare",
        epilog="arguments after -- go to `bench run` inside the container",
    )
    _add_common(p)
    p.add_argument("--image-a", required=True, help="image of run A (the baseline)")
    p.add_argument("--image-b", required=True, help="image of run B")
    _add_pair_outputs(p)
    p.set_defaults(func=compare.cmd_compare)


def _cmd_compare_commits(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "compare-commits",
        help="an image per vLLM commit built on the host, both sweeps, then bench compare",
        epilog="arguments after -- go to `bench run` inside the container",
    )
    _add_common(p)
    p.add_argument("--commit-a", required=True, help="vLLM commit of run A (7-40 hex digits)")
    p.add_argument("--commit-b", required=True, help="vLLM commit of run B")
    _add_build_args(p)
    for side in ("a", "b"):
        p.add_argument(
            f"--build-arg-{side}",
            action="append",
            default=[],
            metavar="NAME=VALUE",
            help=f"a build argument for image {side.upper()} only (e.g. an exact VLLM_VERSION)",
        )
    _add_pair_outputs(p)
    p.set_defaults(func=compare.cmd_compare_commits)


def _cmd_bisect(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "bisect",
        help="the first vLLM commit between GOOD and BAD that moved one cell's figure",
        epilog="arguments after -- go to `bench run` inside the container. Exit 0: a culprit "
        "(or the skipped suspects) named; 1: BAD does not differ from GOOD.",
    )
    _add_common(p)
    p.add_argument("--good", required=True, help="a vLLM commit with the old figure")
    p.add_argument("--bad", required=True, help="a later vLLM commit with the moved figure")
    p.add_argument(
        "--vllm-repo",
        type=Path,
        required=True,
        help="a local vLLM clone holding both commits (for the commit list)",
    )
    p.add_argument("--cell", required=True, help="CONCURRENCYxCONTEXT, e.g. 64x8K")
    p.add_argument("--figure", choices=tuple(bisect.FIGURES), default="total")
    p.add_argument("--trials", type=int, default=3, help="sweeps per commit (separate bundles)")
    p.add_argument("--results", type=Path, default=Path("results"), help="local results folder")
    p.add_argument("--run-id", default=None, help="bundles are <run-id>-<commit>-<trial>")
    p.add_argument("--allowed-signers", type=Path, default=None)
    _add_build_args(p)
    p.set_defaults(func=bisect.cmd_bisect)


def _cmd_clean(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("clean", help="remove containers left by a run (e.g. after kill -9)")
    _add_common(p)
    p.add_argument("--run-id", default=None, help="only this run (default: every vllm-bench run)")
    p.set_defaults(func=bench.cmd_clean)


def _cmd_node_run(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "node-run",
        help="one node's part of a Slurm job (srun runs it on each node; not for direct use)",
    )
    p.add_argument("run_dir", type=Path, help="the job's run directory (shared filesystem)")
    p.add_argument("--node", default=None, help="this node's name (default: SLURMD_NODENAME)")
    p.set_defaults(func=node.cmd_node_run)


def _cmd_attach(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "attach",
        help="follow a Slurm fleet job submitted before, then collect, verify, summarise",
    )
    p.add_argument("run_dir", type=Path, help="the job's run directory (SHARED_DIR/<run id>)")
    p.add_argument("--slurm-login", metavar="HOST", help="the login node it was submitted on")
    p.add_argument("--inventory", type=Path, default=DEFAULT_INVENTORY, help="hosts.toml")
    p.add_argument("--trust-new-host", action="store_true", help="as for bench")
    p.add_argument("--results", type=Path, default=Path("results"), help="local results folder")
    p.add_argument("--allowed-signers", type=Path, default=None)
    p.add_argument("--card", type=Path, default=None, help="published card (as for bench)")
    p.add_argument("--no-verdict", action="store_true", help="print no verdict")
    p.set_defaults(func=submit.cmd_attach)


def _add_slurm(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Slurm (instead of HOST)")
    g.add_argument("--slurm", metavar="PARTITION", help="submit one job to this partition")
    g.add_argument(
        "--cluster",
        metavar="NAME",
        help="the inventory's [clusters.NAME]: partition, account, login node, shared folder, "
        "checkout (options given here win)",
    )
    g.add_argument("--nodes", type=int, default=1, help="nodes of the job, one bundle each")
    g.add_argument("--account", default=None, help="Slurm account to charge (sbatch --account)")
    g.add_argument(
        "--shared-dir",
        type=Path,
        default=None,
        help="a folder every node and this machine see (default: RESULTS/slurm); the job's "
        "run directory is made in it",
    )
    g.add_argument(
        "--slurm-login",
        metavar="HOST",
        help="run sbatch/squeue/scancel on this login node over SSH (named like any host); "
        "default: here, when sbatch is on PATH",
    )
    g.add_argument(
        "--cluster-checkout",
        metavar="PATH",
        help="with --slurm-login: this project's checkout (with its .venv) on the cluster's "
        "shared filesystem; the tasks start there",
    )
    g.add_argument(
        "--image-tar",
        type=Path,
        default=None,
        help="a `docker save` of the image on the shared filesystem, loaded on a node that "
        "lacks the image",
    )


def _bench(args: argparse.Namespace, settings: Settings) -> int:
    if args.slurm or args.cluster:
        if args.host:
            raise UsageError("give HOST or --slurm PARTITION, not both")
        return submit.cmd_bench_slurm(args, settings)
    if not args.host:
        raise UsageError("no host given", hint="HOST=gpu01, or SLURM=partition NODES=2")
    return bench.cmd_bench(args, settings)


def _raise_on_sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    return exit_through_make("provision", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after `--` is for `bench run` inside the container, untouched by argparse.
    cut = argv.index("--") if "--" in argv else len(argv)
    args = build_parser().parse_args(argv[:cut])
    args.bench_args = tuple(argv[cut + 1 :])
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
