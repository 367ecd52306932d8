"""`make bench CARD=card.json` on this machine, for another publisher's card (`bench card
import --from`): the twin is fitted to the card (`bench.twin.card_fit`), the run sends the
card's traffic (`bench.publishers.workload`), and the verdict is `bench reproduce` with the
publisher's definitions.

The fitted profile and the workload are written beside the run directory
(`<run>-twin.json`, `<run>-card.toml`), so the run can be repeated by hand with the very
same files; what differs from the publisher's own traffic is said on stderr, as `bench card
workload` says it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from bench import writes
from bench.publishers.command import is_publisher_card, load_card
from bench.publishers.workload import workload_and_notes, workload_toml
from bench.twin import card_fit


@dataclass(frozen=True, slots=True)
class CardTwin:
    profile: Path  # the fitted twin profile (JSON)
    workload: Path  # the card's traffic (TOML)


def is_card(path: Path | None) -> bool:
    return path is not None and is_publisher_card(path)


def prepare(card_path: Path, out: Path) -> CardTwin:
    """Fit the twin to the card and write its traffic; the fit's lines and the traffic's
    notes on stderr. CardError (one line) for a card that cannot be fitted or run."""
    card = load_card(card_path)
    workload, notes = workload_and_notes(card)
    fitted = card_fit.fit(card)
    profile = out.with_name(out.name + "-twin.json")
    spec = out.with_name(out.name + "-card.toml")
    writes.write_atomic(profile, fitted.profile.model_dump_json(indent=2) + "\n")
    writes.write_atomic(spec, workload_toml(workload))
    said = [f"twin fitted to {card.publisher}'s point {card.point_id}:", *fitted.lines()]
    said += [f"note: {n}" for n in notes]
    said.append(f"fitted profile {profile}, the card's traffic {spec}")
    sys.stderr.write("\n".join(said) + "\n")
    return CardTwin(profile, spec)
