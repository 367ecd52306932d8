"""The variant profile behind `make compare-twin`: slower exactly where it says."""

from __future__ import annotations

import pathlib

import pytest

from bench.twin import profile as profiles
from tools.compare_twin import slower_variant


def test_slower_variant_scales_decode_steps_at_and_above_the_threshold_only(
    tmp_path: pathlib.Path,
) -> None:
    base = profiles.load("published")
    path = slower_variant("published", 8.0, 64, tmp_path / "slower.json")
    slow = profiles.load(str(path))
    assert slow.name == "published-slower"
    for ctx in (8192, 16384, 100_000):
        for batch in (1, 2, 4, 8, 16, 32):
            assert slow.decode_step_seconds(batch, ctx) == base.decode_step_seconds(batch, ctx)
        for batch in (64, 100, 128):
            assert slow.decode_step_seconds(batch, ctx) == pytest.approx(
                base.decode_step_seconds(batch, ctx) * 1.08
            )
    # Nothing else about the server changes: prefill, frontend, capacity.
    assert slow.prefill_s_per_token == base.prefill_s_per_token
    assert slow.frontend_s == base.frontend_s
    assert slow.kv_capacity_tokens == base.kv_capacity_tokens
