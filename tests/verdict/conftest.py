from __future__ import annotations

import pathlib

import pytest

from bench.card.model import Card
from bench.card.parse import read_card
from bench.twin import profile as profiles
from tests.bundle.conftest import Keys
from tests.card.conftest import SHIPPED
from tools import verdict_power as power


@pytest.fixture(scope="session")
def signer(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    """One throwaway signing key for the verdict tests' bundles."""
    return Keys(tmp_path_factory.mktemp("keys"), "verdict@example.org")


@pytest.fixture(autouse=True)
def no_default_signers(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The machine's own allowed-signers files never decide a test."""
    monkeypatch.setattr(
        "bench.verdict.run_source.DEFAULT_ALLOWED_SIGNERS", (tmp_path / "no-allowed-signers",)
    )


@pytest.fixture(scope="session")
def card() -> Card:
    return read_card(SHIPPED)


@pytest.fixture
def card_path() -> pathlib.Path:
    return SHIPPED


@pytest.fixture(scope="session")
def published() -> tuple[profiles.Profile, power.Base]:
    """The twin's `published` profile and the card's matrix simulated on it in virtual time."""
    p = profiles.load("published")
    return p, power.simulate_card(p, SHIPPED)
