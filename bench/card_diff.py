"""Our run against a published card, cell by cell, at server speed.

For `make reproduce-twin`: every decode cell of the card with our total tok/s,
per-request tok/s, time between tokens and TTFT beside the card's and the difference in
percent, the prefill rows for information, and the over-capacity sets compared. A cell
passes within 5 % on the rates and TBT and 10 % on TTFT (the twin's acceptance).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.card.model import Card
from bench.results import Results

RATE_TOLERANCE = 0.05
TTFT_TOLERANCE = 0.10


@dataclass(frozen=True)
class Figure:
    name: str
    ours: float | None
    card: float | None
    tolerance: float

    @property
    def delta(self) -> float | None:
        if self.ours is None or self.card is None or self.card == 0:
            return None
        return self.ours / self.card - 1

    @property
    def ok(self) -> bool:
        d = self.delta
        return d is not None and abs(d) <= self.tolerance


@dataclass(frozen=True)
class CellDiff:
    context: str
    concurrency: int
    ours_status: str
    card_status: str
    figures: tuple[Figure, ...]

    @property
    def ok(self) -> bool:
        if self.card_status == "over_capacity" or self.ours_status == "over_capacity":
            return self.card_status == self.ours_status
        return self.ours_status == "valid" and all(f.ok for f in self.figures)


def diff(results: Results, card: Card) -> list[CellDiff]:
    speed = results.speed_factor
    out = []
    for m in card.measurements:
        if m.phase != "decode":
            continue
        card_status = "over_capacity" if m.over_capacity else "valid"
        cell = results.cell(m.context, m.concurrency)
        ours_status = "missing" if cell is None else cell.status
        figs: tuple[Figure, ...] = ()
        if cell is not None and cell.figures is not None and card_status == "valid":
            f = cell.figures.at_server_speed(speed)
            figs = (
                Figure("total tok/s", f.total_tok_s, m.total_tokens_per_s, RATE_TOLERANCE),
                Figure("per request tok/s", f.per_request_tok_s, m.per_request_tokens_per_s,
                       RATE_TOLERANCE),
                Figure("TBT ms", f.tbt_s * 1000, _ms(m.tbt_s), RATE_TOLERANCE),
                Figure("TTFT ms", f.ttft_s * 1000, _ms(m.ttft_s), TTFT_TOLERANCE),
            )  # fmt: skip
        out.append(CellDiff(m.context, m.concurrency, ours_status, card_status, figs))
    return out


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1000


def _pct(d: float | None) -> str:
    return "    —" if d is None else f"{d * 100:+5.1f}%"


def render(results: Results, card: Card) -> tuple[str, bool]:
    """The comparison as text, and whether every cell and the over-capacity set agree."""
    rows = diff(results, card)
    lines = [
        f"ours: {results.server.model} at speed {results.speed_factor:g} "
        f"(figures at server speed) vs card {card.source}",
        f"{'cell':<10} {'status':<14} {'total tok/s':>22} {'per req tok/s':>20} "
        f"{'TBT ms':>20} {'TTFT ms':>24}  ok",
    ]
    for r in rows:
        name = f"{r.context} x {r.concurrency}"
        if not r.figures:
            status = r.ours_status if r.ours_status == r.card_status else (
                f"{r.ours_status} (card {r.card_status})")  # fmt: skip
            lines.append(f"{name:<10} {status:<40}{'':>64}  {'yes' if r.ok else 'NO'}")
            continue
        cols = [
            f"{f.ours:>8,.1f} {f.card:>7,.1f} {_pct(f.delta)}"
            if f.name != "TTFT ms"
            else f"{f.ours:>9,.0f} {f.card:>7,.0f} {_pct(f.delta)}"
            for f in r.figures
            if f.ours is not None and f.card is not None
        ]
        lines.append(
            f"{name:<10} {r.ours_status:<14} {cols[0]:>22} {cols[1]:>20} {cols[2]:>20} "
            f"{cols[3]:>24}  {'yes' if r.ok else 'NO'}"
        )
    lines.append("")
    lines.append("prefill (information, not gated):")
    for p in card.prefill:
        ours = [x for x in results.prefill if x.context_label == p.context and x.status == "valid"]
        if not ours:
            lines.append(f"  {p.context:<6} ours: none  card {p.tokens_per_s:,.0f} tok/s")
            continue
        o = ours[0].at_server_speed(results.speed_factor)
        tok = o.prefill_tok_s or 0.0
        ttft = (o.ttft_s or 0.0) * 1000
        lines.append(
            f"  {p.context:<6} {tok:>8,.0f} vs {p.tokens_per_s:>7,.0f} tok/s "
            f"{_pct(tok / p.tokens_per_s - 1)}   TTFT {ttft:>8,.0f} vs {p.ttft_s * 1000:>7,.0f} ms "
            f"{_pct(ttft / (p.ttft_s * 1000) - 1)}"
        )
    card_over = {(r.context, r.concurrency) for r in rows if r.card_status == "over_capacity"}
    ours_over = {(c.context_label, c.concurrency) for c in results.cells
                 if c.status == "over_capacity"}  # fmt: skip
    same = card_over == ours_over
    lines.append("")
    if same:
        verdict = "identical sets"
    else:
        verdict = (
            f"differ: ours only {sorted(ours_over - card_over)}, "
            f"card only {sorted(card_over - ours_over)}"
        )
    lines.append(f"over capacity: ours {len(ours_over)}, card {len(card_over)}, {verdict}")
    valid = [r for r in rows if r.card_status == "valid"]
    passed = sum(r.ok for r in valid)
    lines.append(f"valid cells within tolerance: {passed} of {len(valid)}")
    return "\n".join(lines), same and all(r.ok for r in rows)
