"""A published card as `RunFigures`: the reference side of `bench reproduce`.

All-measurements rows are preferred (they carry every column); a cell the matrix has but
the rows lack keeps the matrix's total tok/s and TTFT only.
"""

from __future__ import annotations

from pathlib import Path

from bench.card.model import Card, CardMeasurement, MatrixCell
from bench.card.parse import read_card
from bench.verdict.cells import Cell, Key, RunFigures, Status, context_order
from bench.verdict.settings import from_card as card_settings


def _from_row(m: CardMeasurement) -> Cell:
    status: Status = "over_capacity" if m.over_capacity else "valid"
    if not m.over_capacity and m.status.lower() != "valid":
        status = "not_run"
    values = {
        "total_tok_s": m.total_tokens_per_s,
        "per_request_tok_s": m.per_request_tokens_per_s,
        "ttft_s": m.ttft_s,
        "tbt_s": m.tbt_s,
    }
    if m.phase == "prefill":
        values = {"prefill_tok_s": m.total_tokens_per_s, "prefill_ttft_s": m.ttft_s}
    trials: dict[str, tuple[float, ...]] = {
        k: (v,) for k, v in values.items() if v is not None and status == "valid"
    }
    return Cell(m.phase, m.context, m.concurrency, status, m.status, trials)


def _from_matrix(c: MatrixCell) -> Cell:
    trials: dict[str, tuple[float, ...]] = {}
    if c.total_tokens_per_s is not None and c.ttft_s is not None:
        trials = {"total_tok_s": (c.total_tokens_per_s,), "ttft_s": (c.ttft_s,)}
    return Cell("decode", c.context, c.concurrency, c.status, c.label, trials)


def from_card(card: Card) -> RunFigures:
    cells: dict[Key, Cell] = {}
    for c in card.matrix:
        cell = _from_matrix(c)
        cells[cell.key] = cell
    for p in card.prefill:
        pf: dict[str, tuple[float, ...]] = {
            "prefill_tok_s": (p.tokens_per_s,),
            "prefill_ttft_s": (p.ttft_s,),
        }
        cells[("prefill", p.context, 1)] = Cell("prefill", p.context, 1, "valid", None, pf)
    for m in card.measurements:
        cell = _from_row(m)
        cells[cell.key] = cell
    metadata = {f"{block} / {k}": v for block, kv in card.metadata.items() for k, v in kv.items()}
    metadata["Model"] = card.model
    metadata["Hardware"] = card.hardware
    if card.launch_command:
        metadata["Launch command"] = card.launch_command
    return RunFigures(
        settings=card_settings(card),
        name=card.source,
        kind="card",
        speed_factor=1.0,
        metadata=metadata,
        cells=cells,
        contexts=context_order(k[1] for k in cells),
        concurrencies=tuple(sorted({k[2] for k in cells if k[0] == "decode"})),
    )


def load_card(path: Path) -> RunFigures:
    return from_card(read_card(path))
