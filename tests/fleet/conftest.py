"""bench.fleet's tests read bundles as the verdicts do: the verdict tests' fixtures (a
session signer, the shipped card, no default allowed-signers file) serve them too."""

from tests.verdict.conftest import card, no_default_signers, signer

__all__ = ["card", "no_default_signers", "signer"]
