"""A model folder placed in a Hugging Face cache the way the hub client lays one out: the
product's own placing (bench.rehearsal_model, the orchestrator's weights step for a
generated model), used by tests that put a model there themselves.

    revision = place(model_dir, cache, "bench-test/tiny-llama")
"""

from __future__ import annotations

from bench.rehearsal_model import LFS_SUFFIXES, blob_name, place

__all__ = ["LFS_SUFFIXES", "blob_name", "place"]
