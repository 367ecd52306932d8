"""`make bench HOST=gpu01 CARD=card.json` for another publisher's card (`bench card import
--from`): the card brings the run's traffic (`bench.publishers.workload`, as `bench card
workload` writes it) and, where the publisher gives the server's command, its launch profile
(`bench.publishers.launch.seed_profile`, as `bench card launch` writes it); the verdict is
`bench reproduce` with the publisher's definitions (provisioning.runs.summary passes the card
on, and reproduce tells a publisher's card by its contents).

Both are written under the results folder (`cards/<card>-card.toml`, `cards/<card>-launch.toml`)
so the run can be repeated with the very same files. A card without the server's command
(InferenceX's dump, MLPerf's summary) is refused with the line that says what it lacks, unless
PROFILE= names the launch profile; WORKLOAD= beside such a card is refused (it brings its own).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

from bench import writes
from bench.card.launch import profile_toml
from bench.errors import UsageError
from bench.publishers.command import is_publisher_card, load_card
from bench.publishers.launch import seed_profile
from bench.publishers.workload import workload_and_notes, workload_toml
from provisioning.flow import workload as flow_workload
from provisioning.flow.workload import WorkloadChoice

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True, slots=True)
class PublisherCardRun:
    profile: str | None  # the seeded launch profile's path; None: PROFILE= as given
    workload: WorkloadChoice


def plan(
    card_path: Path | None,
    *,
    profile: str | None,
    workload_given: bool,
    results: Path,
) -> PublisherCardRun | None:
    """None unless CARD_PATH is a publisher's card; else its traffic and launch profile,
    written under RESULTS/cards (module docstring). CardError / UsageError, one line."""
    if card_path is None or not is_publisher_card(card_path):
        return None
    if workload_given:
        raise UsageError(
            f"{card_path} is a publisher's card: it brings its own traffic, and a workload "
            "was given too",
            hint="drop WORKLOAD=, RATES= and SLO=",
        )
    card = load_card(card_path)
    workload, notes = workload_and_notes(card)
    folder = results / "cards"
    stem = _UNSAFE.sub("-", card_path.stem)[:64] or "card"
    seeded: str | None = None
    if profile is None:
        launch = seed_profile(card, f"{stem}-launch")  # CardError: what the card lacks
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{stem}-launch.toml"
        writes.write_atomic(path, profile_toml(launch))
        seeded = str(path)
    folder.mkdir(parents=True, exist_ok=True)
    spec = folder / f"{stem}-card.toml"
    writes.write_atomic(spec, workload_toml(workload))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    said = f"the card's traffic: {spec}" + (f"; its launch profile: {seeded}" if seeded else "")
    print(said, file=sys.stderr)
    choice = flow_workload.choose(str(spec), None, None)
    assert choice is not None  # a file was given
    return PublisherCardRun(seeded, choice)
