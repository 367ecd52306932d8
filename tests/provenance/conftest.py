"""`bench provenance` reads signed bundles: the bundle tests' throwaway keys."""

from tests.bundle.conftest import keys

__all__ = ["keys"]
