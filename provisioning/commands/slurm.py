"""The Slurm side of `provision`: the `--slurm`/`--cluster` options of `bench`, and the
commands `node-run` (one node's part of the job; srun runs it) and `attach` (follow a job
submitted before). Each turns its arguments into provisioning.slurm.submit's choices once.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.command_line import SubParsers
from bench.history import recording
from bench.settings import Settings
from provisioning.commands.options import (
    DEFAULT_INVENTORY,
    history_choice,
    live_choice,
    traces_wanted,
)
from provisioning.hosts import inventory
from provisioning.slurm import node, submit
from provisioning.slurm.submit import ClusterChoice, FollowChoice, SlurmChoice


def register(sub: SubParsers) -> None:
    p = sub.add_parser(
        "node-run",
        help="one node's part of a Slurm job (srun runs it on each node; not for direct use)",
    )
    p.add_argument("run_dir", type=Path, help="the job's run directory (shared filesystem)")
    p.add_argument("--node", default=None, help="this node's name (default: SLURMD_NODENAME)")
    p.set_defaults(func=_node_run)

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
    recording.add_args(p)
    p.set_defaults(func=_attach)


def add_slurm(p: argparse.ArgumentParser) -> None:
    """`bench`'s Slurm options (instead of HOST)."""
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


def _inventory(args: argparse.Namespace, *, needed: bool) -> inventory.Inventory:
    """hosts.toml, read once, when a login node or a cluster is named in it."""
    return inventory.load_inventory(args.inventory) if needed else inventory.Inventory()


def _follow_choice(args: argparse.Namespace, settings: Settings) -> FollowChoice:
    return FollowChoice(
        results=args.results,
        allowed_signers=args.allowed_signers,
        card=args.card,
        no_verdict=args.no_verdict,
        history=history_choice(args, settings),
    )


def slurm_choice(args: argparse.Namespace, settings: Settings) -> SlurmChoice:
    """`bench --slurm|--cluster`'s arguments (and the words after --) as a SlurmChoice."""
    listed = _inventory(args, needed=bool(args.cluster or args.slurm_login))
    return SlurmChoice(
        cluster=ClusterChoice(
            inventory=listed,
            login=args.slurm_login,
            shared_dir=args.shared_dir,
            checkout=args.cluster_checkout,
            trust_new_host=args.trust_new_host,
            results=args.results,
        ),
        follow=_follow_choice(args, settings),
        partition=args.slurm,
        cluster_name=args.cluster,
        inventory_path=args.inventory,
        nodes=args.nodes,
        account=args.account,
        image_tar=args.image_tar,
        run_id=args.run_id,
        keep=args.keep,
        profile=args.profile,
        image=args.image,
        bench_args=tuple(args.bench_args),
        download_weights=not args.no_weights_download,
        live=live_choice(args),
        server_traces=traces_wanted(args),
    )


def _attach(args: argparse.Namespace, settings: Settings) -> int:
    cluster = ClusterChoice(
        inventory=_inventory(args, needed=bool(args.slurm_login)),
        login=args.slurm_login,
        trust_new_host=args.trust_new_host,
        results=args.results,
    )
    return submit.attach(args.run_dir, cluster, _follow_choice(args, settings))


def _node_run(args: argparse.Namespace, settings: Settings) -> int:
    return node.node_run(args.run_dir, args.node, settings)
