"""One serving test as found in the file (its items), and as plain facts, from whichever
format, before they become a card.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.errors import CardError
from bench.publishers.vllm_dashboard.values import DO


@dataclass
class _Test:
    """One serving test as found in the file: its items (a result, or a test's records)."""

    key: tuple[str, str]  # (commit or "", id)
    kind: str  # "result" or "records"
    items: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    metrics: dict[str, int] = field(default_factory=dict)  # a records test's metric: item


@dataclass
class _Point:
    """One test's facts, from whichever format, before they become a card."""

    id: str
    kind: str
    cfg: dict[str, Any]  # configuration fields by vLLM's names (args, metadata, result)
    figures: dict[str, float]
    model: str
    commit: str | None = None
    gpu_model: str | None = None
    engine: str = "vllm"
    date: str | None = None
    extra: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    not_reproducible: list[str] = field(default_factory=list)


def _model(path: Path, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise CardError(f"{path}: the test names no model (model_id / model.name); {DO}")
    return value.strip()
