from __future__ import annotations

import pathlib
from importlib import resources

import pytest

CARD_NAME = "qwen3.5-397b-a17b-int4_4x-rtxpro6000_vllm-73a5831127a9.txt"
# The card as shipped with the package (bench/cards), exactly as published.
SHIPPED = pathlib.Path(str(resources.files("bench.cards").joinpath(CARD_NAME)))


@pytest.fixture
def shipped_card_path() -> pathlib.Path:
    return SHIPPED
