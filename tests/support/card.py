"""The published card's "All measurements" rows, read for tests (not the product parser)."""

from __future__ import annotations

import pathlib

CARD = next(pathlib.Path("/work/shared/published").glob("*.txt"))


def all_measurement_rows() -> list[list[str]]:
    rows = []
    for line in CARD.read_text().splitlines():
        if line.startswith(("| Prefill |", "| Sustained decode |")):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def row_lines() -> list[str]:
    return [
        line.strip()
        for line in CARD.read_text().splitlines()
        if line.startswith(("| Prefill |", "| Sustained decode |"))
    ]
