"""`provision compare` and `compare-commits --noise-from HISTORY`: the door turns it into the
history's Target (a password refused there), the prior of the host (its name as given, as
its runs record it) and the compare's launch profile is read once, before preflight and the
first sweep, and it reaches the verdict through PairChoice.policy()."""

from __future__ import annotations

import pathlib
from types import SimpleNamespace
from typing import Any

import pytest

from bench.card.parse import read_card
from bench.errors import UsageError
from bench.history.database import Target
from bench.settings import Settings
from bench.verdict import sequential
from provisioning import cli
from provisioning.commands import compare
from tests.card.conftest import SHIPPED
from tests.history.conftest import fill
from tests.history.noise_history import HOST, PROFILE, planted

COMMANDS = {
    "compare": ["compare", HOST, "--image-a", "a", "--image-b", "b"],
    "compare-commits": ["compare-commits", HOST, "--commit-a", "abc1234", "--commit-b", "def5678"],
}


def pair_of(words: list[str]) -> compare.PairChoice:
    args = cli.build_parser().parse_args(words)
    args.bench_args = ()  # the words after --, as provisioning.cli.main sets them
    return compare._pair_choice(args, Settings())


def target(profile: str = PROFILE) -> Any:
    """What with_noise_prior reads of a resolved HostTarget: the host's and profile's names."""
    return SimpleNamespace(host=SimpleNamespace(name=HOST), profile=SimpleNamespace(name=profile))


@pytest.mark.parametrize("command", list(COMMANDS))
def test_noise_from_is_the_histories_target_and_a_password_is_refused_unshown(
    command: str, tmp_path: pathlib.Path
) -> None:
    assert pair_of(COMMANDS[command]).noise_from is None
    given = pair_of([*COMMANDS[command], "--noise-from", str(tmp_path / "h.sqlite3")])
    assert given.noise_from == Target("sqlite", str(tmp_path / "h.sqlite3"))
    assert given.policy().noise_prior is None  # read later, once the host is resolved
    with pytest.raises(UsageError) as caught:
        pair_of([*COMMANDS[command], "--noise-from", "postgresql://u:hunter2@db/history"])
    assert "hunter2" not in caught.value.one_line()


def test_the_prior_of_the_host_and_profile_reaches_the_policy(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = fill(tmp_path, planted(read_card(SHIPPED), 3, 2, run_sd=0.01))
    pair = pair_of([*COMMANDS["compare"], "--noise-from", history.where])
    assert compare.with_noise_prior(pair_of(COMMANDS["compare"]), target()).noise_prior is None
    chosen = compare.with_noise_prior(pair, target())
    prior = chosen.policy().noise_prior
    assert prior is not None and (prior.runs, prior.builds) == (6, 3)
    assert f"host {HOST}, profile {PROFILE}" in prior.source
    # Given a prior, the compare aimed at a decision first looks at 1 + 1, as its help says.
    assert sequential.PRIOR_STAGES[0] == (1, 1)
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["compare", "--help"])
    assert "(with --noise-from: first at 1+1)" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(UsageError, match="too few repeated runs of host gpu01, profile smoke"):
        compare.with_noise_prior(pair, target("smoke"))


@pytest.mark.parametrize("enough", [True, False])
def test_the_prior_is_read_before_preflight_and_the_sweeps(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, enough: bool
) -> None:
    history = fill(tmp_path, planted(read_card(SHIPPED), 3 if enough else 1, 2, run_sd=0.01))
    steps: list[str] = []
    swept: list[compare.PairChoice] = []
    monkeypatch.setattr(compare, "resolve_target", lambda choice, name: target())
    monkeypatch.setattr(compare, "preflight_host", lambda *a, **kw: steps.append("preflight"))

    def sweep_both(pair: compare.PairChoice, *rest: object) -> int:
        swept.append(pair)
        return 0

    monkeypatch.setattr(compare, "_sweep_both", sweep_both)
    pair = pair_of([*COMMANDS["compare"], "--noise-from", history.where])

    def run() -> int:
        return compare.compare_images(pair, None, HOST, Settings(), images=("a", "b"))  # type: ignore[arg-type]

    if not enough:
        with pytest.raises(UsageError, match="too few repeated runs"):
            run()
        assert steps == []  # nothing touched the host
        return
    assert run() == 0
    assert steps == ["preflight"]
    assert swept[0].policy().noise_prior is not None
