"""Every `provision` command that brings bundles back takes --history and --no-history, and
the door (provisioning.commands.options.history_choice) turns them and BENCH_HISTORY__URL
into the one Target the flow records in (bench.history.recording)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.errors import UsageError
from bench.history.database import Target
from bench.settings import load_settings
from provisioning import cli
from provisioning.commands import compare
from provisioning.commands.options import history_choice
from provisioning.commands.slurm import slurm_choice

URL = "postgresql://bench@db.example.org/history"
COMMANDS = {
    name: words.split()
    for name, words in {
        "bench": "bench gpu01",
        "bench --slurm": "bench --slurm debug",
        "compare": "compare gpu01 --image-a a --image-b b",
        "compare-commits": "compare-commits gpu01 --commit-a abc1234 --commit-b def5678",
        "bisect": "bisect gpu01 --good abc1234 --bad def5678 --vllm-repo v --cell 64x8K",
        "attach": "attach /shared/run1",
    }.items()
}


@pytest.mark.parametrize("command", list(COMMANDS))
def test_history_comes_from_the_option_else_the_setting_and_no_history_wins(
    command: str,
) -> None:
    parser = cli.build_parser()
    words = COMMANDS[command]
    unset, setting = load_settings({}), load_settings({"BENCH_HISTORY__URL": URL})
    assert history_choice(parser.parse_args(words), unset) is None
    assert history_choice(parser.parse_args(words), setting) == Target("postgresql", URL)
    given = parser.parse_args([*words, "--history", "h.sqlite3"])
    assert history_choice(given, setting) == Target("sqlite", "h.sqlite3")
    assert history_choice(parser.parse_args([*words, "--no-history"]), setting) is None


def test_a_password_in_history_is_refused_at_the_door_without_being_shown() -> None:
    args = cli.build_parser().parse_args(
        [*COMMANDS["bench"], "--history", "postgresql://bench:hunter2@db/history"]
    )
    with pytest.raises(UsageError) as caught:
        history_choice(args, load_settings({}))
    assert "hunter2" not in caught.value.one_line()


def test_the_choices_carry_the_history_to_the_flows(tmp_path: Path) -> None:
    parser = cli.build_parser()
    setting = load_settings({"BENCH_HISTORY__URL": URL})
    pair = parser.parse_args([*COMMANDS["compare"], "--history", str(tmp_path / "h.db")])
    pair.bench_args = ()  # the words after --, as provisioning.cli.main sets them
    assert compare._pair_choice(pair, setting).history == Target("sqlite", str(tmp_path / "h.db"))
    fleet = parser.parse_args(COMMANDS["bench --slurm"])
    fleet.bench_args = ()
    assert slurm_choice(fleet, setting).follow.history == Target("postgresql", URL)
