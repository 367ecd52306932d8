from __future__ import annotations

import pathlib

import pytest

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
# A byte-for-byte copy of the card in /work/shared/published/, kept here so the tests run
# anywhere (the repository has no other copy yet).
SHIPPED = FIXTURES / "published_qwen3.5-397b-a17b-int4_4x-rtxpro6000_vllm-73a5831127a9.txt"


@pytest.fixture
def shipped_card_path() -> pathlib.Path:
    return SHIPPED
