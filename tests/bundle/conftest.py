"""Shared fixtures: throwaway signing keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bundle import sign


class Keys:
    def __init__(self, root: Path, principal: str) -> None:
        self.private = root / f"{principal}_ed25519"
        self.public = sign.keygen(self.private, comment=principal)
        self.principal = principal
        self.allowed = root / f"{principal}.allowed_signers"
        self.allowed.write_text(sign.allowed_signers_line(self.public, principal) + "\n")


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    (tmp_path / "keys").mkdir()
    return Keys(tmp_path / "keys", "alice@example.org")


@pytest.fixture
def other_keys(tmp_path: Path) -> Keys:
    (tmp_path / "other").mkdir()
    return Keys(tmp_path / "other", "mallory@example.org")
