"""The structured reference a published card becomes.

Figures keep the card's own precision (tok/s to 0.1, TTFT to 1 ms, TBT to 0.1 ms);
times are seconds as floats, as everywhere else in `bench`. `line` fields name the
card line a figure came from, so a disagreement can point at the page.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

CARD_SCHEMA_VERSION = 1

CellStatus = Literal["valid", "over_capacity", "not_run"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CardPlan(_Frozen):
    """What the card's header line says was planned (the tables may hold fewer rows)."""

    engine: str
    engine_version: str
    badge: str | None = Field(description="the glued badge before the context count, e.g. INT4")
    decode_context_count: int
    decode_context_range: tuple[str, str]
    concurrency_count: int
    concurrency_range: tuple[int, int]
    prefill_contexts: tuple[str, ...]


class PrefillRow(_Frozen):
    context: str
    tokens_per_s: float
    ttft_s: float
    line: int


class MatrixCell(_Frozen):
    context: str
    concurrency: int
    status: CellStatus
    label: str | None = Field(default=None, description="the cell's text when it has no figures")
    total_tokens_per_s: float | None = None
    ttft_s: float | None = None
    line: int


class CardMeasurement(_Frozen):
    """One row of "All measurements"; a dash on the card is None here."""

    phase: Literal["prefill", "decode"]
    context: str
    concurrency: int
    status: str
    total_tokens_per_s: float | None = None
    per_request_tokens_per_s: float | None = None
    ttft_s: float | None = None
    tbt_s: float | None = None
    avg_active_requests: float | None = None
    completed_requests: int | None = None
    output_tokens: int | None = None
    measured_s: float | None = None
    line: int

    @property
    def over_capacity(self) -> bool:
        return self.status.lower() == "over capacity"


class Card(_Frozen):
    schema_version: int = CARD_SCHEMA_VERSION
    source: str = Field(description="file name the card was read from")
    title: str
    model: str
    hardware: str
    plan: CardPlan
    metadata: dict[str, dict[str, str]] = Field(
        description="the card's metadata blocks (Hardware, Engine, Run, ...) in page order"
    )
    gpu_count: int | None = None
    window_s: float | None = None
    max_output_tokens: int | None = None
    launch_command: str | None = None
    prefill: tuple[PrefillRow, ...]
    matrix_contexts: tuple[str, ...]
    matrix_concurrencies: tuple[int, ...]
    matrix: tuple[MatrixCell, ...]
    measurements: tuple[CardMeasurement, ...]
    notes: tuple[str, ...] = Field(default=(), description="footnotes under the tables")

    def cell(self, context: str, concurrency: int) -> MatrixCell | None:
        for c in self.matrix:
            if c.context == context and c.concurrency == concurrency:
                return c
        return None

    def measurement(self, phase: str, context: str, concurrency: int) -> CardMeasurement | None:
        for m in self.measurements:
            if (m.phase, m.context, m.concurrency) == (phase, context, concurrency):
                return m
        return None
