"""Issue 14: make compare-commits / compare-images run 3 sweeps a side, interleaved."""

from __future__ import annotations

import pytest

from bench.errors import UsageError
from bench.settings import load_settings
from bench.verdict.compare import ALPHA
from provisioning import cli  # noqa: TID251 (tests the orchestrator
from provisioning.commands.compare import PairChoice, _pair_choice, sweep_order  # noqa: TID251


def test_interleaved_order_balances_drift_and_blocked_is_available() -> None:
    assert sweep_order(3, "interleaved") == ["a", "b", "b", "a", "a", "b"]
    assert sweep_order(1, "interleaved") == ["a", "b"]
    assert sweep_order(3, "blocked") == ["a", "a", "a", "b", "b", "b"]
    # A linear drift falls equally on both sides when interleaved (A B B A: 0+3 = 1+2).
    order = sweep_order(4, "interleaved")
    assert sum(i for i, x in enumerate(order) if x == "a") == sum(
        i for i, x in enumerate(order) if x == "b"
    )
    with pytest.raises(UsageError):
        sweep_order(0, "interleaved")


def test_compare_commands_default_to_three_trials_interleaved() -> None:
    parser = cli.build_parser()
    for argv in (
        ["compare", "gpu01", "--image-a", "x", "--image-b", "y"],
        ["compare-commits", "gpu01", "--commit-a", "abcdef1", "--commit-b", "abcdef2"],
    ):
        args = parser.parse_args(argv)
        assert (args.trials_per_side, args.order) == (3, "interleaved")
    args = parser.parse_args([*argv, "--order", "blocked", "--trials-per-side", "2"])
    assert (args.trials_per_side, args.order) == (2, "blocked")


def test_compare_commands_pass_alpha_to_the_verdict_and_refuse_one_out_of_range() -> None:
    parser, settings = cli.build_parser(), load_settings({})
    base = ["compare", "gpu01", "--image-a", "x", "--image-b", "y"]

    def pair(*extra: str) -> PairChoice:
        args = parser.parse_args([*base, *extra])
        args.bench_args = []  # the words after "--", set by the command line's own split
        return _pair_choice(args, settings)

    assert pair().policy().alpha == ALPHA
    assert pair("--alpha", "0.001").policy().alpha == 0.001
    for bad in ("0", "1", "nan"):
        with pytest.raises(UsageError, match="--alpha must be between 0 and 1"):
            pair("--alpha", bad)
