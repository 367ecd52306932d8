"""The end of a run of one or more hosts (or Slurm nodes): the summary table, each
bundle's tables, the fleet report when several measured the same sweep, each verdict
against the published card, and the exit code that follows from them.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from tabulate import tabulate

import bench.cards
from bench.bundle import sign
from bench.errors import BenchError, Exit, Interrupted, UsageError
from bench.fleet import nodes as fleet_nodes
from bench.fleet import report as fleet
from bench.fleet import rule as fleet_rule
from bench.fleet.tables import fleet_markdown
from bench.launch_profile import LaunchProfile
from bench.publishers.command import is_publisher_card
from bench.verdict import attest, publisher_card
from bench.verdict.command import load_reference
from bench.verdict.reproduce import Tolerances, reproduce
from bench.verdict.run_source import Verification, load_run
from bench.verdict.tables import reproduce_markdown
from provisioning.flow.options import HostOutcome

CARDS_DIR = Path(bench.cards.__file__).parent


def default_card(profile: LaunchProfile) -> Path | None:
    """The profile's published card as shipped in bench/cards/, if it names one."""
    path = CARDS_DIR / profile.card if profile.card else None
    return path if path is not None and path.is_file() else None


def _verdict(bundle: Path, card: Path, allowed: Path) -> Exit:
    """Print the reproduce verdict of one bundle against the card; its exit code (0 when
    reproduced; 1 not, 9 partial, 10 settings differ, 11 inconclusive). A publisher's card
    (`bench card import --from`) is judged by its publisher's definitions.

    The verdict is made here, on the workstation, which holds no bundle key of its own (each
    host's key signs its bundles): it is signed with `bench local`'s key when this machine
    has one (attest.workstation_key, trusted in ~/.config/bench/allowed_signers), written
    beside the bundle as <run>.verdict.intoto.json; without one, a note says so."""
    key = _workstation_key()
    if is_publisher_card(card):
        return Exit(publisher_card.judged(bundle, card, Verification((allowed,)), attest_key=key))
    pending = attest.prepare(key, None, run=bundle, card=card)
    ours = load_run(bundle, Verification((allowed,)))
    result = reproduce(ours, load_reference(card), Tolerances())
    print(reproduce_markdown(result))
    attest.finish(pending, attest.reproduction_body(result))
    return result.exit_code


def _workstation_key() -> Path | None:
    """`bench local`'s key when it can sign a verdict; else None, said in one line."""
    key = attest.workstation_key()
    if not key.exists():
        print(f"(no verdict attestation: no signing key {key} on this machine; "
              "`bench local` makes one)", file=sys.stderr)  # fmt: skip
        return None
    try:
        sign.check_private_key(key)
    except UsageError as exc:
        print(f"(no verdict attestation: {exc.one_line()})", file=sys.stderr)
        return None
    return key


class Ran(Protocol):
    """What the summary reads of a host's (or a Slurm node's) run."""

    @property
    def outcome(self) -> HostOutcome: ...

    @property
    def error(self) -> BenchError | None: ...


def _fleet_report(done: Sequence[tuple[str, Path]], allowed: Path) -> None:
    """Several hosts or nodes measured the same sweep: per cell and figure the value on
    every node, and (with 3 or more) the nodes that stand out (`bench fleet`)."""
    try:
        nodes = fleet_nodes.load_nodes(
            [d for _, d in done], Verification((allowed,)), names=[h for h, _ in done]
        )
    except BenchError as exc:
        print(f"fleet report: {exc.one_line()}", file=sys.stderr)
        return
    print("\n" + fleet_markdown(fleet.fleet(nodes, fleet_rule.Rule())))
    if len(nodes) < fleet_rule.MIN_NODES:
        print(f"(with {len(nodes)} nodes no node can be told to stand out: that needs "
              f"{fleet_rule.MIN_NODES} or more)")  # fmt: skip


def summarise(
    workers: Sequence[Ran], allowed: Path, card: Path | None, *, fleet_of: bool = False
) -> int:
    """The table of runs, each bundle's tables, the fleet report when `fleet_of` several
    hosts measured the same sweep, each verdict against the card; the exit code."""
    rows = []
    for w in workers:
        o = w.outcome
        state = (
            "interrupted" if isinstance(w.error, Interrupted)
            else "failed" if w.error is not None
            else "complete" if o.complete else "partial"
        )  # fmt: skip
        where = str(o.local_dir) if o.local_dir else "-"
        took = sum(o.timings_s.values())
        steps = ", ".join(f"{k} {v:.1f}" for k, v in o.timings_s.items())
        rows.append((o.host, o.run_id, state, where, f"{took:.1f}", steps))
    print()
    print(tabulate(rows, headers=("host", "run", "state", "bundle", "s", "time per step (s)")))
    for w in workers:
        d = w.outcome.local_dir
        if d is not None and (d / "tables.md").is_file():
            print(f"\n## {w.outcome.host}: {d}\n")
            print((d / "tables.md").read_text())
            print(f"verified with {allowed}")
    done = [(w.outcome.host, w.outcome.local_dir) for w in workers if w.outcome.local_dir]
    if fleet_of and len(done) >= 2:
        _fleet_report(done, allowed)
    verdicts: list[Exit] = []
    for w in workers:
        d = w.outcome.local_dir
        if card is not None and d is not None and w.error is None:
            print(f"\n## {w.outcome.host}: against {card}\n")
            verdicts.append(_verdict(d, card, allowed))
    for w in workers:
        if w.error is not None:
            print(f"provision: {w.outcome.host}: {w.error.one_line()}", file=sys.stderr)
    errors = [w.error for w in workers if w.error is not None]
    if any(isinstance(e, Interrupted) for e in errors):
        return int(Exit.INTERRUPTED)
    if errors:
        return int(errors[0].exit_code)
    # The first host's verdict that is not a "yes" decides (1 not reproduced before 9/10/11).
    worst = sorted((v for v in verdicts if v != Exit.OK), key=lambda v: v != Exit.NOT_REPRODUCED)
    return int(worst[0]) if worst else int(Exit.OK)
