from __future__ import annotations

import pathlib

import pytest

from bench.card.model import Card
from bench.card.parse import read_card
from tests.card.conftest import SHIPPED


@pytest.fixture(scope="session")
def card() -> Card:
    return read_card(SHIPPED)


@pytest.fixture
def card_path() -> pathlib.Path:
    return SHIPPED
