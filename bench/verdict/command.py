"""`bench reproduce BUNDLE --card FILE` and `bench compare A B [C ...]`."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
from pydantic import ValidationError

from bench.card.model import Card
from bench.card.parse import read_card
from bench.errors import CardError, Exit, UsageError, validation_message
from bench.publishers.command import is_publisher_card
from bench.settings import Settings
from bench.verdict import attest, equivalence, headline, page, publisher_card
from bench.verdict.card_source import from_card
from bench.verdict.cells import METRICS, RunFigures
from bench.verdict.compare import ALPHA, Comparison, Policy, compare
from bench.verdict.noise_prior import NoisePrior
from bench.verdict.reproduce import Tolerances, reproduce
from bench.verdict.run_source import (
    Verification,
    add_verification_args,
    load_run,
    load_run_and_profile,
    merge_runs,
    refuse_repeats,
)
from bench.verdict.settings import add_accept_arg, parse_accept
from bench.verdict.tables import compare_markdown, reproduce_markdown


def _percent(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a percentage: {text!r}") from None
    if not 0 <= value < 1000:
        raise argparse.ArgumentTypeError(f"a percentage between 0 and 1000, got {text}")
    return value


def _add_verification(p: argparse.ArgumentParser) -> None:
    add_verification_args(p)
    add_accept_arg(p)


def verification(args: argparse.Namespace) -> Verification:
    return Verification(tuple(args.allowed_signers), bool(args.unverified))


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    rep = sub.add_parser("reproduce", help="judge a run against a published card")
    rep.add_argument("bundle", type=Path, help="bundle .tar.gz, run directory or results.json")
    rep.add_argument("--card", type=Path, required=True, help="card text, or its imported JSON")
    rep.add_argument(
        "--tolerance-throughput",
        type=_percent,
        default=5.0,
        metavar="PCT",
        help="allowed |Δ %%| of tok/s figures (default 5)",
    )
    rep.add_argument(
        "--tolerance-latency",
        type=_percent,
        default=10.0,
        metavar="PCT",
        help="allowed |Δ %%| of TTFT and time between tokens (default 10)",
    )
    rep.add_argument(
        "--reference",
        type=Path,
        nargs="+",
        metavar="BUNDLE",
        help="bundles of a reference run (one or more): the run's answers are judged against "
        "theirs as bench compare judges B against A; one that answers differently is NOT "
        "REPRODUCED unless --accept answers",
    )
    rep.add_argument(
        "--tolerance",
        type=_percent,
        default=5.0,
        metavar="PCT",
        help="a publisher's card (bench card import --from): allowed |Δ %%| of every figure "
        "(default 5)",
    )
    rep.add_argument(
        "--all-figures",
        action="store_true",
        help="a publisher's card: judge its tail percentiles (p99 of one published run) too; "
        "by default they are shown, not judged",
    )
    rep.add_argument("--html", type=Path, metavar="OUT", help="also write an HTML page")
    attest.add_attest_args(rep)
    _add_verification(rep)
    rep.set_defaults(func=run_reproduce)
    cmp_ = sub.add_parser("compare", help="per-cell changes of runs B, C, ... against run A")
    cmp_.add_argument(
        "runs",
        type=Path,
        nargs="+",
        metavar="RUN",
        help="bundles .tar.gz, run directories or results.json; the first is A",
    )
    cmp_.add_argument(
        "--vs",
        type=Path,
        nargs="+",
        metavar="RUN_B",
        help="side B's bundles (one per trial run); then every RUN is side A's",
    )
    cmp_.add_argument(
        "--order",
        choices=("interleaved", "blocked", "unknown"),
        default="unknown",
        help="how the trial runs of A and B were ordered on the host (for the verdict)",
    )
    add_alpha_arg(cmp_)
    cmp_.add_argument(
        "--min-effect-throughput",
        type=_percent,
        default=0.0,
        metavar="PCT",
        help="smallest |Δ %%| of tok/s that counts as a change (default 0)",
    )
    cmp_.add_argument(
        "--min-effect-latency",
        type=_percent,
        default=0.0,
        metavar="PCT",
        help="smallest |Δ %%| of a latency that counts as a change (default 0)",
    )
    add_margin_arg(cmp_)
    add_noise_from_arg(
        cmp_,
        series="the host and launch profile of --noise-host and --noise-profile; the runs "
        "compared left out",
    )
    cmp_.add_argument(
        "--noise-host",
        metavar="HOST",
        help="with --noise-from: the host whose runs it reads, as the history records it "
        "(default: side A's first run's, from its environment.json)",
    )
    cmp_.add_argument(
        "--noise-profile",
        metavar="PROFILE",
        help="with --noise-from: the launch profile whose runs it reads (twin:NAME on a "
        "twin; default: side A's first run's, from its recipe.json)",
    )
    cmp_.add_argument("--html", type=Path, metavar="OUT", help="also write an HTML page")
    attest.add_attest_args(
        cmp_,
        checked_by="--compared A... --vs B...",
        default_out="<first B bundle's stem>.compare.intoto.json beside it; one comparison "
        "only: A B, or A1 A2 --vs B1 B2",
    )
    _add_verification(cmp_)
    cmp_.set_defaults(func=run_compare)  # fmt: skip


def load_reference(path: Path) -> RunFigures:
    if path.suffix == ".json":
        try:
            card = Card.model_validate_json(path.read_bytes())
        except OSError as exc:
            raise CardError(f"{path}: cannot read the card: {exc.strerror}") from None
        except ValidationError as exc:
            raise CardError(
                f"{path}: not a card imported by `bench card import`: {validation_message(exc)}"
            ) from None
        return from_card(card)
    return from_card(read_card(path))


def run_reproduce(args: argparse.Namespace, settings: Settings) -> int:
    if is_publisher_card(args.card):
        return publisher_card.reproduce(args, verification(args))
    card = load_reference(args.card)
    how = verification(args)
    pending = attest.prepare(
        args.attest,
        args.attest_out,
        run=args.bundle,
        card=args.card,
        references=args.reference or (),
    )
    ours = load_run(args.bundle, how)
    reference = None
    if args.reference:
        refs = [load_run(p, how) for p in args.reference]
        refuse_repeats(
            [
                (str(p), r)
                for p, r in zip([args.bundle, *args.reference], [ours, *refs], strict=True)
            ]
        )
        reference = merge_runs(refs, "reference")
    tol = Tolerances(args.tolerance_throughput, args.tolerance_latency)
    result = reproduce(ours, card, tol, parse_accept(args.accept), reference)
    sys.stdout.write(reproduce_markdown(result))
    if args.html:
        page.write(args.html, page.reproduce_page(result))
    attest.finish(pending, attest.reproduction_body(result))
    structlog.get_logger("bench.verdict").info(
        "reproduce_judged",
        bundle=str(args.bundle),
        card=card.name,
        verdict=result.overall,
        compared=len(result.judged),
        failed=[f"{k[0]} {k[1]}x{k[2]}" for k in (c.key for c in result.failed)],
        answers_differ=result.answers is not None and result.answers.different,
    )
    return int(result.exit_code)


def add_alpha_arg(p: argparse.ArgumentParser) -> None:
    """--alpha: what a compare spends under no change (bench compare, provision compare)."""
    p.add_argument(
        "--alpha",
        type=float,
        default=ALPHA,
        help="what a compare spends under no change (default %(default)g): the run-level "
        "model's whole-run test half, the false-discovery rate over cells x figures the rest",
    )


def checked_alpha(alpha: float) -> float:
    """--alpha as given, or a one-line UsageError when it is not strictly between 0 and 1."""
    if not 0 < alpha < 1:  # also NaN
        raise UsageError(f"--alpha must be between 0 and 1, got {alpha}")
    return alpha


def _history_given(text: str) -> str:
    """--noise-from's value: never empty (database.locate would read its default file)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("a history is needed: a SQLite file or postgresql:// URL")
    return text


def add_noise_from_arg(p: argparse.ArgumentParser, *, series: str) -> None:
    """--noise-from: the run-to-run noise measured before a compare (bench compare,
    provision compare); SERIES says whose runs it reads."""
    p.add_argument(
        "--noise-from",
        type=_history_given,
        metavar="URL|FILE",
        help="a results history (postgresql://user@host/db, password from PGPASSWORD or "
        "~/.pgpass, or a SQLite file): the run-to-run noise of its repeated runs of one "
        f"build ({series}) is pooled with the compare's own unless the compare's runs are "
        "noisier; with 1 run a side the verdict tests on it alone",
    )


def _noise_prior(
    args: argparse.Namespace, first: RunFigures, profile: str | None, compared: Sequence[RunFigures]
) -> NoisePrior:
    """--noise-from's prior: the runs of --noise-host (default: side A's first run's host)
    and --noise-profile (default: its launch profile), the runs compared left out."""
    # Deferred: the history (bench.history) builds on the verdicts; only --noise-from reads it.
    from bench.history import database, noise_runs

    target = database.locate(args.noise_from, None)
    host = args.noise_host or first.metadata.get("host")
    profile = args.noise_profile or profile or first.metadata.get("launch profile")
    for flag, value, where in (("--noise-host", host, "environment.json"),
                               ("--noise-profile", profile, "recipe.json")):  # fmt: skip
        if not value:
            raise UsageError(
                f"--noise-from: side A's first run ({first.name}) does not say its "
                f"{flag.removeprefix('--noise-')} ({where})",
                hint=f"give {flag} as the history records it (`bench history report` offers "
                "its hosts and profiles as filters)",
            )
    return noise_runs.from_history(target, host=str(host), profile=str(profile), compared=compared)


def run_compare(args: argparse.Namespace, settings: Settings) -> int:
    if len(args.runs) < 2 and not args.vs:
        raise UsageError(
            "compare needs at least two runs",
            hint="bench compare A B [C ...], or bench compare A1 A2 A3 --vs B1 B2 B3",
        )
    for flag in ("noise_host", "noise_profile"):
        if getattr(args, flag) is not None and args.noise_from is None:
            raise UsageError(
                f"--{flag.replace('_', '-')} needs --noise-from",
                hint="--noise-from URL|FILE: the history whose runs it names",
            )
    policy = Policy(
        checked_alpha(args.alpha),
        args.min_effect_throughput,
        args.min_effect_latency,
        accept=parse_accept(args.accept),
        **margins(args.margin),
    )
    side_b = args.vs or args.runs[1:]
    if args.attest is not None and not args.vs and len(args.runs) > 2:
        raise UsageError(
            "--attest attests one comparison: A against B",
            hint="bench compare A B --attest KEY, or bench compare A1 A2 --vs B1 B2 --attest KEY",
        )
    pending = attest.prepare_compare(
        args.attest, args.attest_out, a=args.runs if args.vs else args.runs[:1], b=side_b
    )
    how = verification(args)
    first, profile = load_run_and_profile(args.runs[0], how)
    runs = [first, *(load_run(p, how) for p in args.runs[1:])]
    others = [load_run(p, how) for p in args.vs or []]
    refuse_repeats(
        [(str(p), r) for p, r in zip([*args.runs, *(args.vs or [])], runs + others, strict=True)]
    )
    if args.noise_from is not None:
        prior = _noise_prior(args, first, profile, runs + others)
        policy = dataclasses.replace(policy, noise_prior=prior)
    if args.vs:
        side_a = merge_runs(runs, f"A ({len(runs)} runs)" if len(runs) > 1 else runs[0].name)
        name_b = f"B ({len(others)} runs)" if len(others) > 1 else others[0].name
        comparisons = [compare(side_a, merge_runs(others, name_b), policy)]
    else:
        comparisons = [compare(runs[0], other, policy) for other in runs[1:]]
    order = {
        "blocked": "Order: blocked (all A, then all B): drift over hours is NOT controlled "
        "and may read as a change.\n",
        "interleaved": "Order: interleaved (A B B A A B): drift over time is balanced "
        "between the sides.\n",
        "unknown": "",
    }[args.order]
    sys.stdout.write(order + "\n".join(compare_markdown(c) for c in comparisons))
    if args.html:
        page.write(args.html, page.compare_page(comparisons))
    code = compare_exit(comparisons)
    attest.finish(pending, attest.compare_body(comparisons[0], code))
    flagged = sum(len(c.flagged) for c in comparisons)
    structlog.get_logger("bench.verdict").info(
        "compare_judged",
        runs=[str(p) for p in args.runs],
        flagged_cells=flagged,
        answers_differ=any(c.answers.different for c in comparisons),
    )
    return int(code)


def add_margin_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--margin",
        action="append",
        default=[],
        metavar="PCT|FIGURE=PCT",
        help="the equivalence margin: a figure not changed is EQUIVALENT when its change is "
        "shown within ±PCT %% (default 5), else NOT RESOLVED; FIGURE=PCT sets one figure's "
        f"({', '.join(m.name for m in METRICS)}); repeatable",
    )


def margins(given: list[str]) -> dict[str, Any]:
    """Policy's margin fields from --margin values (UsageError naming a bad one)."""
    known = {m.name for m in METRICS}
    every, per = equivalence.DEFAULT_MARGIN_PCT, {}
    for text in given:
        try:
            name, pct = equivalence.parse_margin(text)
        except ValueError as e:
            raise UsageError(str(e), hint="--margin 5, or --margin ttft_s=10") from None
        if name is None:
            every = pct
        elif name not in known:
            raise UsageError(
                f"margin {text!r}: no figure named {name!r}",
                hint=f"one of {', '.join(sorted(known))}",
            )
        else:
            per[name] = pct
    return {"margin_pct": every, "figure_margins": tuple(sorted(per.items()))}


def compare_exit(comparisons: list[Comparison]) -> Exit:
    """10 settings differ, 1 a change (or B answers differently and --accept answers was
    not given), 9 cells that cannot be compared or no noise estimate (one trial a side),
    11 not resolved (neither a change nor equivalence within the margin), 0 equivalent."""
    if any(not c.settings.comparable for c in comparisons):
        return Exit.NOT_COMPARABLE
    if any(c.answers.refused for c in comparisons):
        return Exit.NOT_REPRODUCED
    if any(c.flagged or (c.capacity is not None and c.capacity.changed) for c in comparisons):
        return Exit.NOT_REPRODUCED
    if any(c.cannot_compare or c.raw_only for c in comparisons):
        return Exit.PARTIAL
    if any(headline.outcome(c) != "equivalent" for c in comparisons):
        return Exit.INCONCLUSIVE
    return Exit.OK
