"""A reproduce verdict as a signed statement beside the bundle (`--attest KEY`).

`prepare` hashes the subjects (bench.bundle.verdict_attestation: the run, the card, any
reference bundles) before the verdict reads them, and checks the key as `bench sign` does:
a missing key, or one others can read, is a UsageError; a key that cannot sign the
envelope (a passphrase, RSA) leaves the verdict without an attestation, said in one
warning line, as a bundle signed with one is left without attestation.intoto.json.
`finish` writes the verdict's predicate, signed, to `<bundle stem>.verdict.intoto.json`.

`bench compare --attest KEY` does the same for one comparison (A B, or A1 A2 --vs B1 B2):
`prepare_compare` hashes every bundle of both sides, `finish` writes `compare_body` to
`<first B bundle's stem>.compare.intoto.json` beside it (bench verify --compared/--vs).

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

A compare's predicate (the same type):

    kind          "compare"
    outcome       the compare's word: CHANGED, EQUIVALENT, NOT RESOLVED (bench.verdict.headline),
                  NOT COMPARABLE (settings differ) or NOT COMPARED (no cell compared)
    exit_code     what `bench compare` exits with; exit_name its name
    summary       the compare's last line (headline.verdict)
    alpha         --alpha as used; margin {"pct", "figures": {FIGURE: PCT}}; min_effect
                  {"throughput_pct", "latency_pct"}
    a, b          {"name": ..., "subjects": [NAME, ...]}: which subjects are side A and side B
    settings_differ  the settings that make the sides not comparable
    figures       per figure judged: "cell", "figure", "delta_pct", its 95 % interval "low",
                  "high" (Δ %), "outcome" (changed | equivalent | not resolved)
    listed, total, bench, made_at   as above
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

import bench
from bench.bundle import dsse, sign
from bench.bundle import verdict_attestation as va
from bench.errors import Exit, UsageError
from bench.publishers.reproduce import PublisherReproduction
from bench.verdict import headline
from bench.verdict.cells import Key
from bench.verdict.compare import Comparison, PriorUse
from bench.verdict.reproduce import Reproduction


def add_attest_args(
    p: argparse.ArgumentParser,
    *,
    checked_by: str = "--card CARD",
    default_out: str = "<bundle stem>.verdict.intoto.json beside it",
) -> None:
    p.add_argument(
        "--attest",
        type=Path,
        default=None,
        metavar="KEY",
        help="also write the verdict as an in-toto statement in a DSSE envelope signed with "
        "KEY (an unencrypted ed25519 key, e.g. bench local's ~/.config/bench/signing_ed25519); "
        f"`bench verify BUNDLE --verdict FILE {checked_by}` checks it",
    )
    p.add_argument(
        "--attest-out",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"where --attest writes (default: {default_out})",
    )


def workstation_key() -> Path:
    """`bench local`'s signing key (made on its first use): the orchestrator's summary signs
    its verdicts with it when it is there (the workstation holds no bundle key of its own:
    the hosts' keys sign the bundles)."""
    return Path.home() / ".config" / "bench" / "signing_ed25519"


@dataclass(frozen=True, slots=True)
class Pending:
    """A verdict attestation to write once the verdict is made: its subjects hashed.

    A reproduce's subjects are the run, the card and any references; a compare's
    (`side_a` set) side A's bundles, then side B's: the first `side_a` are side A."""

    key: Path
    out: Path
    subjects: tuple[va.Subject, ...]
    side_a: int | None = None


def prepare(
    key: Path | None,
    out: Path | None,
    *,
    run: Path,
    card: Path,
    references: Sequence[Path] = (),
) -> Pending | None:
    """The subjects hashed and the key checked (module docstring); None: no attestation."""
    return _prepare(
        key,
        lambda key: Pending(
            key,
            out or va.default_out(run),
            (va.run_subject(run), va.card_subject(card), *map(va.run_subject, references)),
        ),
    )


def prepare_compare(
    key: Path | None, out: Path | None, *, a: Sequence[Path], b: Sequence[Path]
) -> Pending | None:
    """A compare's subjects (every bundle of side A, then of side B) hashed and the key
    checked, as `prepare`; the default out is `<first B's stem>.compare.intoto.json`."""
    return _prepare(
        key,
        lambda key: Pending(
            key,
            out or va.default_out(b[0], va.COMPARE_SUFFIX),
            tuple(va.run_subject(r) for r in (*a, *b)),
            side_a=len(a),
        ),
    )


def _prepare(key: Path | None, hashed: Callable[[Path], Pending]) -> Pending | None:
    if key is None:
        return None
    sign.check_private_key(key)
    try:
        dsse.load_private_key(key)
    except UsageError as exc:
        _warn(exc.one_line())
        return None
    try:
        return hashed(key)
    except UsageError as exc:  # an unsigned run directory: the verdict still stands
        _warn(exc.one_line())
        return None


def _warn(why: str) -> None:
    structlog.get_logger("bench.verdict").warning("no_verdict_attestation", why=why)


def finish(pending: Pending | None, body: dict[str, Any]) -> Path | None:
    """Write the attestation of a verdict (`body`: reproduction_body, publisher_body or,
    for a Pending of prepare_compare, compare_body)."""
    if pending is None:
        return None
    subjects = list(pending.subjects)
    names = [s.name for s in subjects]
    if len(set(names)) != len(names):  # a reference named as the run: keep subjects apart
        subjects = [va.Subject(f"{i}:{s.name}", s.sha256) for i, s in enumerate(subjects)]
        names = [s.name for s in subjects]
    made = {"bench": {"version": bench.__version__}, "made_at": va.now_iso()}
    if pending.side_a is not None:
        n = pending.side_a
        predicate = {
            **body,
            "a": {**body.get("a", {}), "subjects": names[:n]},
            "b": {**body.get("b", {}), "subjects": names[n:]},
            **made,
        }
    else:
        predicate = {
            **body,
            "run": {**body.get("run", {}), "subject": names[0]},
            "card": {**body.get("card", {}), "subject": names[1]},
            **made,
        }
        if len(names) > 2:
            predicate["references"] = names[2:]
    fingerprint = va.write(pending.out, va.statement(subjects, predicate), pending.key)
    print(f"verdict attestation: {pending.out} (signed by {fingerprint})", file=sys.stderr)
    return pending.out


def _num(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def _cell(key: Key) -> str:
    return f"{key[0]} {key[1]} x {key[2]}"


def _listed(key: str, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """At most MAX_ROWS rows under `key`, and how many are listed of how many."""
    return {key: rows[: va.MAX_ROWS], "listed": min(len(rows), va.MAX_ROWS), "total": len(rows)}


def _exit(code: Exit) -> dict[str, Any]:
    return {"exit_code": int(code), "exit_name": code.name}


def reproduction_body(result: Reproduction) -> dict[str, Any]:
    """A speed-test card's verdict: every cell with its figures (at most MAX_ROWS cells)."""
    cells = [
        {
            "cell": _cell(c.key),
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
        **_listed("cells", cells),
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


def compare_body(c: Comparison, code: Exit) -> dict[str, Any]:
    """A compare's verdict (one comparison: A against B): every figure judged (a Δ %% made)
    with its interval, at most MAX_ROWS of them."""
    rows = [
        {
            "cell": _cell(x.key),
            "figure": f.metric.name,
            "delta_pct": _num(f.delta_pct),
            "low": None if f.ci_pct is None else _num(f.ci_pct[0]),
            "high": None if f.ci_pct is None else _num(f.ci_pct[1]),
            "outcome": f.outcome,
        }
        for x in c.cells
        for f in x.figures
        if f.delta_pct is not None
    ]
    word = headline.outcome(c)
    policy = c.policy
    return {
        "kind": "compare",
        "outcome": "NOT COMPARABLE"
        if not c.settings.comparable
        else (word or "not compared").upper(),
        **_exit(code),
        "summary": headline.verdict(c),
        "alpha": policy.alpha,
        "margin": {"pct": policy.margin_pct, "figures": dict(policy.figure_margins)},
        "min_effect": {
            "throughput_pct": policy.min_effect_throughput_pct,
            "latency_pct": policy.min_effect_latency_pct,
        },
        "a": {"name": c.a.name},
        "b": {"name": c.b.name},
        "settings_differ": [d.name for d in c.settings.blocking],
        "noise_prior": None if c.prior is None else _prior(c.prior),
        **_listed("figures", rows),
    }


def _prior(use: PriorUse) -> dict[str, Any]:
    """The noise measured before the compare (--noise-from): where from, and whether used."""
    p = use.prior
    return {
        "source": p.source,
        "runs": p.runs,
        "builds": p.builds,
        "run_level_sd_pct": _num(p.run_sd_log * 100.0),
        "used": use.used,
        "why_not": use.why_not,
    }
