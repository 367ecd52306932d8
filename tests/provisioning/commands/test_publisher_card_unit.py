"""`make bench HOST=... CARD=card.json` with another publisher's card: its traffic and, where
the publisher gives the server's command, its launch profile, written under the results
folder (provisioning.commands.publisher_card.plan); no host is reached."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bench.errors import CardError, UsageError
from bench.launch_profile import load_launch_profile
from bench.publishers import inferencex
from bench.publishers.model import PublisherCard
from provisioning.commands.publisher_card import plan
from tests.publishers.paths import DATA


@pytest.fixture
def ix_card(tmp_path: Path) -> Path:
    path = tmp_path / "ix101.json"
    path.write_text(inferencex.read(DATA / "inferencex", {"id": "101"}).model_dump_json())
    return path


def test_a_speed_test_card_or_none_is_no_plan(tmp_path: Path) -> None:
    text_card = tmp_path / "card.txt"
    text_card.write_text("a speed-test card's page text\n")
    assert plan(None, profile=None, workload_given=False, results=tmp_path) is None
    assert plan(text_card, profile=None, workload_given=False, results=tmp_path) is None


def test_a_card_without_the_servers_command_is_refused_saying_so_unless_profile_is_given(
    ix_card: Path, tmp_path: Path
) -> None:
    with pytest.raises(CardError, match="gives no launch command"):
        plan(ix_card, profile=None, workload_given=False, results=tmp_path / "r")
    made = plan(ix_card, profile="published", workload_given=False, results=tmp_path / "r")
    assert made is not None and made.profile is None  # PROFILE= as given
    spec = tmp_path / "r" / "cards" / "ix101-card.toml"
    data = tomllib.loads(spec.read_text())
    assert data["arrivals"] == {
        "kind": "closed-count", "concurrencies": [4], "requests_per_stream": 10,
        "warmups_per_stream": 2,
    }  # fmt: skip
    sent = tomllib.loads(made.workload.toml_text or "")  # what goes to the host
    for part in ("arrivals", "lengths"):  # every default spelled out there
        assert data[part].items() <= sent[part].items()


def test_a_workload_beside_a_publishers_card_is_refused(ix_card: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="brings its own traffic"):
        plan(ix_card, profile="published", workload_given=True, results=tmp_path)
    assert not (tmp_path / "cards").exists()


def test_a_card_with_the_servers_command_seeds_the_launch_profile(
    ix_card: Path, tmp_path: Path
) -> None:
    data = PublisherCard.model_validate_json(ix_card.read_text()).model_dump()
    data["engine"]["launch_flags"] = [
        "vllm", "serve", "openai/gpt-oss-120b", "--tensor-parallel-size", "2",
        "--api-key", "not-kept",
    ]  # fmt: skip
    card = tmp_path / "with-command.json"
    card.write_text(PublisherCard.model_validate(data).model_dump_json())
    made = plan(card, profile=None, workload_given=False, results=tmp_path / "r")
    assert made is not None and made.profile is not None
    profile = load_launch_profile(made.profile)
    assert "--tensor-parallel-size" in profile.argv
    assert "not-kept" not in Path(made.profile).read_text()
