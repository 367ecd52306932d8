"""The property tests' fixed Hypothesis budget: the same examples every run, bounded."""

from __future__ import annotations

from hypothesis import HealthCheck, settings


def fixed_budget(max_examples: int) -> settings:
    """MAX_EXAMPLES drawn the same way every run; 5 s an example (a hang or a quadratic
    blow-up fails, a busy CPU does not)."""
    return settings(
        max_examples=max_examples,
        deadline=5000,  # ms per example
        derandomize=True,  # the same examples every run: a fixed budget, reproducible
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
