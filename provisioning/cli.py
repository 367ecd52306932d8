"""The orchestrator's command (`python -m provisioning`, or `provision`): runs on the workstation.

    provision preflight HOST [--profile NAME]     check the host, print the table
    provision bench HOST[,HOST...] [--keep]       the whole flow, one bundle per host
    provision compare HOST --image-a A --image-b B  both sweeps, then `bench compare`
    provision compare-commits HOST --commit-a A --commit-b B  an image per vLLM commit, built
                                                  on the host; both sweeps; `bench compare`
    provision bisect HOST --good G --bad B --cell 64x8K --vllm-repo DIR  the first commit
                                                  that moved the cell's figure
    provision clean HOST [--run-id ID]            remove containers a crashed run left
    provision bench --slurm PARTITION --nodes N   the fleet as one Slurm job (one task per
                                                  node; provisioning/slurm/submit.py)
    provision node-run RUN_DIR                    one node's part of that job (run by srun)
    provision attach RUN_DIR                      follow that job again (submitter stopped)

Each command is a module of provisioning/commands that registers its own parser, as bench's
`command.py` modules do; bench.command_line runs them for both programs (`bench` never
imports this package): one line and the named exit code of bench.errors on failure.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from bench import command_line
from bench.errors import exit_through_make
from provisioning.commands import bench, bisect, clean, compare, preflight, slurm

# The modules that define subcommands, in the order `provision --help` lists them.
COMMANDS: tuple[command_line.Registers, ...] = (preflight, bench, compare, bisect, clean, slurm)


def build_parser() -> argparse.ArgumentParser:
    return command_line.parser_of(
        "provision", "Run the benchmark on a GPU host over SSH.", COMMANDS
    )


def main(argv: Sequence[str] | None = None) -> int:
    return exit_through_make("provision", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after `--` is for `bench run` inside the container, untouched by argparse.
    cut = argv.index("--") if "--" in argv else len(argv)
    after = argparse.Namespace(bench_args=tuple(argv[cut + 1 :]))
    args = build_parser().parse_args(argv[:cut], namespace=after)
    return command_line.run("provision", args, logger="provisioning")
