from __future__ import annotations

import pathlib

import pytest

from bench.card.model import Card
from bench.card.parse import read_card

SHIPPED = (
    pathlib.Path(__file__).parents[1]
    / "card/fixtures/published_qwen3.5-397b-a17b-int4_4x-rtxpro6000_vllm-73a5831127a9.txt"
)


@pytest.fixture(scope="session")
def card() -> Card:
    return read_card(SHIPPED)


@pytest.fixture
def card_path() -> pathlib.Path:
    return SHIPPED
