"""`bench reproduce RUN --card CARD.json` where the card is another publisher's point
(`bench card import --from inferencex|vllm-dashboard|mlperf`).

The run is one of the card's traffic (`bench card workload CARD.json`, then `bench run
--workload`); it is verified as every reproduce input is (`run_source.check`), its point's
requests are read as trials (`bench.publishers.run_trials`), and each published figure is
computed the publisher's way and judged against it with one tolerance
(`bench.publishers.reproduce.judge`); a trial our client fell behind in is left out, said
(`run_trials.left_out`). The GPU count the per-GPU figures divide by is the
run's (environment.json), else the card's, said so.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import structlog

from bench import run_files
from bench.errors import UsageError
from bench.publishers.command import load_card
from bench.publishers.model import PublisherCard
from bench.publishers.reproduce import judge
from bench.publishers.run_trials import left_out, trials_of
from bench.verdict import attest
from bench.verdict.run_source import Verification, check, opened

DEFAULT_TOLERANCE_PCT = 5.0  # bench reproduce --tolerance's default


def _gpus(env: Any, card: PublisherCard) -> tuple[int | None, str]:
    gpus = env.get("gpu", {}).get("gpus") if isinstance(env, dict) else None
    if isinstance(gpus, list) and gpus:
        return len(gpus), f"GPUs: {len(gpus)}, as the run's environment.json lists them"
    if card.gpu_count is not None:
        return card.gpu_count, (
            f"GPUs: the run lists none (a twin, or no nvidia-smi); per-GPU figures divide by "
            f"the card's {card.gpu_count}"
        )
    return None, "GPUs: neither the run nor the card says: per-GPU figures are not checked"


def reproduce(args: argparse.Namespace, how: Verification) -> int:
    if not 0 < args.tolerance < 100:
        raise UsageError(f"--tolerance {args.tolerance:g}: a percentage above 0 and below 100")
    return judged(
        args.bundle,
        args.card,
        how,
        tolerance_pct=args.tolerance,
        all_figures=bool(args.all_figures),
        attest_key=args.attest,
        attest_out=args.attest_out,
    )


def judged(
    bundle: Path,
    card_path: Path,
    how: Verification,
    *,
    tolerance_pct: float = DEFAULT_TOLERANCE_PCT,
    all_figures: bool = False,
    attest_key: Path | None = None,
    attest_out: Path | None = None,
) -> int:
    """BUNDLE (or a run directory) judged against the publisher's card at CARD_PATH, the
    verdict printed; its exit code. What `bench reproduce` and the orchestrator's summary
    run (provisioning.runs.summary). With `attest_key`, the verdict is written signed too
    (bench.verdict.attest; `attest_out`, default beside the bundle)."""
    card = load_card(card_path)
    pending = attest.prepare(attest_key, attest_out, run=bundle, card=card_path)
    with opened(bundle) as directory:
        _, trust = check(directory, bundle, how)
        results = run_files.load_results(directory)
        gpus, said = _gpus(run_files.read_environment(directory), card)
        skipped = left_out(results)
        points = [p for p in results.workload.points if p.index == 0] if results.workload else []
        trials = (
            []
            if skipped and len(skipped) == len(points)
            else trials_of(directory, results, gpus=gpus, skip=skipped)
        )
    result = judge(
        card,
        trials,
        tolerance_pct=tolerance_pct,
        all_figures=all_figures,
        left_out=[f"trial {i + 1} of {len(points)}: {why}" for i, why in sorted(skipped.items())],
    )
    head = [
        f"# Reproduce {card.publisher}'s point {card.point_id} ({card.model}, {card.source})",
        "",
        f"- {trust}",
        f"- {said}",
        "",
    ]
    sys.stdout.write("\n".join([*head, *result.lines()]) + "\n")
    attest.finish(pending, attest.publisher_body(result))
    structlog.get_logger("bench.verdict").info(
        "reproduce_judged",
        bundle=str(bundle),
        card=f"{card.publisher}:{card.point_id}",
        verdict=result.outcome,
        trials=len(trials),
    )
    return int(result.exit_code())
