"""A reproduce verdict as a signed statement beside the bundle (`--attest KEY`).

`prepare` hashes the subjects (bench.bundle.verdict_attestation: the run, the card, any
reference bundles) before the verdict reads them, and checks the key as `bench sign` does:
a missing key, or one others can read, is a UsageError; a key that cannot sign the
envelope (a passphrase, RSA) leaves the verdict without an attestation, said in one
warning line, as a bundle signed with one is left without attestation.intoto.json.
`finish` writes the verdict's predicate, signed, to `<bundle stem>.verdict.intoto.json`.

The predicate (PREDICATE_TYPE https://github.com/bench/attestation/verdict/v1):

    kind          "reproduce" (a speed-test card) | "reproduce-publisher" (bench.publishers)
    outcome       the verdict's word (REPRODUCED, NOT REPRODUCED, PARTIAL, ...)
    exit_code     what `bench reproduce` exits with; exit_name its name (bench.errors.Exit)
    summary       the verdict's one line
    tolerance     {"throughput_pct", "latency_pct"} | {"pct"}
    run, card     {"subject": NAME, "name": ...}: which subject is which
    references    [subject names] (--reference bundles), when any
    cells         per cell (speed-test card): "cell", "verdict", its figures' "figure",
                  "published", "ours" (at server speed; tok/s, seconds), "delta_pct",
                  "outcome"; or figures and constraints (a publisher's card)
    listed, total how many of the cells (figures) are listed: at most MAX_ROWS
    bench         {"version"}: the bench that made the verdict
    made_at       when, UTC
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

import bench
from bench.bundle import dsse, sign
from bench.bundle import verdict_attestation as va
from bench.errors import Exit, UsageError
from bench.publishers.reproduce import PublisherReproduction
from bench.verdict.reproduce import Reproduction


def add_attest_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--attest",
        type=Path,
        default=None,
        metavar="KEY",
        help="also write the verdict as an in-toto statement in a DSSE envelope signed with "
        "KEY (an unencrypted ed25519 key, e.g. bench local's ~/.config/bench/signing_ed25519); "
        "`bench verify BUNDLE --verdict FILE --card CARD` checks it",
    )
    p.add_argument(
        "--attest-out",
        type=Path,
        default=None,
        metavar="FILE",
        help="where --attest writes (default: <bundle stem>.verdict.intoto.json beside it)",
    )


def workstation_key() -> Path:
    """`bench local`'s signing key (made on its first use): the orchestrator's summary signs
    its verdicts with it when it is there (the workstation holds no bundle key of its own:
    the hosts' keys sign the bundles)."""
    return Path.home() / ".config" / "bench" / "signing_ed25519"


@dataclass(frozen=True, slots=True)
class Pending:
    """A verdict attestation to write once the verdict is made: its subjects hashed."""

    key: Path
    out: Path
    run: va.Subject
    card: va.Subject
    references: tuple[va.Subject, ...] = ()


def prepare(
    key: Path | None,
    out: Path | None,
    *,
    run: Path,
    card: Path,
    references: Sequence[Path] = (),
) -> Pending | None:
    """The subjects hashed and the key checked (module docstring); None: no attestation."""
    if key is None:
        return None
    sign.check_private_key(key)
    try:
        dsse.load_private_key(key)
    except UsageError as exc:
        _warn(exc.one_line())
        return None
    try:
        return Pending(
            key,
            out or va.default_out(run),
            va.run_subject(run),
            va.card_subject(card),
            tuple(va.run_subject(r) for r in references),
        )
    except UsageError as exc:  # an unsigned run directory: the verdict still stands
        _warn(exc.one_line())
        return None


def _warn(why: str) -> None:
    structlog.get_logger("bench.verdict").warning("no_verdict_attestation", why=why)


def finish(pending: Pending | None, body: dict[str, Any]) -> Path | None:
    """Write the attestation of a verdict (`body`: reproduction_body or publisher_body)."""
    if pending is None:
        return None
    subjects = [pending.run, pending.card, *pending.references]
    names = [s.name for s in subjects]
    if len(set(names)) != len(names):  # a reference named as the run: keep subjects apart
        subjects = [va.Subject(f"{i}:{s.name}", s.sha256) for i, s in enumerate(subjects)]
    predicate = {
        **body,
        "run": {**body.get("run", {}), "subject": subjects[0].name},
        "card": {**body.get("card", {}), "subject": subjects[1].name},
        "bench": {"version": bench.__version__},
        "made_at": va.now_iso(),
    }
    if pending.references:
        predicate["references"] = [s.name for s in subjects[2:]]
    fingerprint = va.write(pending.out, va.statement(subjects, predicate), pending.key)
    print(f"verdict attestation: {pending.out} (signed by {fingerprint})", file=sys.stderr)
    return pending.out


def _num(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _exit(code: Exit) -> dict[str, Any]:
    return {"exit_code": int(code), "exit_name": code.name}


def reproduction_body(result: Reproduction) -> dict[str, Any]:
    """A speed-test card's verdict: every cell with its figures (at most MAX_ROWS cells)."""
    cells = [
        {
            "cell": f"{c.key[0]} {c.key[1]} x {c.key[2]}",
            "verdict": c.verdict,
            "figures": [
                {
                    "figure": f.metric.name,
                    "published": _num(f.card),
                    "ours": _num(f.ours),
                    "delta_pct": _num(f.delta_pct),
                    "outcome": f.outcome,
                }
                for f in c.figures
            ],
        }
        for c in result.cells
    ]
    return {
        "kind": "reproduce",
        "outcome": result.overall,
        **_exit(result.exit_code),
        "summary": result.summary(),
        "tolerance": {
            "throughput_pct": result.tolerances.throughput_pct,
            "latency_pct": result.tolerances.latency_pct,
        },
        "run": {"name": result.ours.name},
        "card": {"name": result.card.name},
        "settings_differ": [d.name for d in result.settings.blocking],
        "cells": cells[: va.MAX_ROWS],
        "listed": min(len(cells), va.MAX_ROWS),
        "total": len(cells),
    }


def publisher_body(result: PublisherReproduction) -> dict[str, Any]:
    """A publisher's card's verdict: its figures and constraints."""
    figures = [
        {
            "figure": r.name,
            "unit": r.unit,
            "published": _num(r.published),
            "ours": _num(r.ours),
            "band": None
            if r.band_low is None or r.band_high is None
            else [_num(r.band_low), _num(r.band_high)],
            "outcome": r.outcome,
        }
        for r in result.figures
    ]
    card = result.card
    return {
        "kind": "reproduce-publisher",
        "outcome": result.outcome,
        **_exit(result.exit_code()),
        "summary": result.headline(),
        "reason": result.reason,
        "tolerance": {"pct": result.tolerance_pct},
        "card": {"name": f"{card.publisher}:{card.point_id}"},
        "trials": result.trials,
        "figures": figures[: va.MAX_ROWS],
        "constraints": [{"constraint": c.name, "outcome": c.outcome} for c in result.constraints][
            : va.MAX_ROWS
        ],
        "listed": min(len(figures), va.MAX_ROWS),
        "total": len(figures),
    }
