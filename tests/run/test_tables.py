"""tables.md: the card's wording and number format, checked against the card itself."""

from __future__ import annotations

from bench.results import (
    CellFigures,
    CellResult,
    KvCapacity,
    Plan,
    PlannedCell,
    PlannedContext,
    PrefillSample,
    Results,
    RunSettings,
    ServerInfo,
)
from bench.run import card_tables as tables
from tests.support.card import CARD, all_measurement_rows, row_lines

K = 1024
SIZES = {
    "8K": 8 * K,
    "16K": 16 * K,
    "32K": 32 * K,
    "64K": 64 * K,
    "128K": 128 * K,
    "251K": 257_984,
    "256K": 262_079,
}


def _num(text: str) -> float:
    return float(text.replace(",", "").split()[0])


def card_as_results(speed: float = 1.0) -> Results:
    """Results holding the card's own numbers (as a run at `speed` would have measured them)."""
    prefill, cells, contexts, planned = [], [], [], []
    for row in all_measurement_rows():
        phase, label, c, status = row[0], row[1], int(row[2]), row[3]
        if phase == "Prefill":
            contexts.append(
                PlannedContext(
                    label=label,
                    nominal_tokens=SIZES[label],
                    prompt_tokens=SIZES[label],
                    trimmed=False,
                    decode=label != "256K",
                    max_tokens=4096 if label != "256K" else 1,
                )
            )
            prefill.append(
                PrefillSample(
                    context_label=label,
                    prompt_tokens=SIZES[label],
                    status="valid",
                    ttft_s=_num(row[6]) / 1000 / speed,
                    prefill_tok_s=_num(row[4]) * speed,
                )
            )
            continue
        planned.append(
            PlannedCell(
                context_label=label,
                prompt_tokens=SIZES[label],
                concurrency=c,
                kv_needed_tokens=0,
                run=status == "Valid",
            )
        )
        if status != "Valid":
            cells.append(
                CellResult(
                    context_label=label,
                    prompt_tokens=SIZES[label],
                    concurrency=c,
                    status="over_capacity",
                    reason="needs more",
                )
            )
            continue
        figures = CellFigures(
            total_tok_s=_num(row[4]) * speed,
            per_request_tok_s=_num(row[5]) * speed,
            ttft_s=_num(row[6]) / 1000 / speed,
            tbt_s=_num(row[7]) / 1000 / speed,
            average_active=_num(row[8]),
            active_source="server_metrics",
            completed_requests=int(_num(row[9])),
            output_tokens=int(_num(row[10])),
            measured_for_s=_num(row[11]) / speed,
        )
        cells.append(
            CellResult(
                context_label=label,
                prompt_tokens=SIZES[label],
                concurrency=c,
                status="valid",
                figures=figures,
            )
        )
    return Results(
        bench_version="t",
        run_id="card",
        created_at="2026-01-01T00:00:00Z",
        settings=RunSettings(
            url="http://x",
            contexts=(),
            concurrencies=(1, 2, 4, 8, 16, 32, 64, 128),
            duration_s=30,
            max_tokens=4096,
        ),
        server=ServerInfo(url="http://x", model="qwen", max_model_len=262_144, speed_factor=speed),
        plan=Plan(
            contexts=tuple(contexts),
            cells=tuple(planned),
            kv=KvCapacity(tokens=2_000_000, source="kv_budget", detail="test"),
            estimated_duration_s=0,
        ),
        prefill=tuple(prefill),
        cells=tuple(cells),
        state="complete",
    )


def test_all_measurements_rows_match_the_card_character_for_character() -> None:
    rendered = tables.render(card_as_results()).splitlines()
    ours = [x for x in rendered if x.startswith(("| Prefill |", "| Sustained decode |"))]
    assert ours == row_lines()
    assert len(ours) == 7 + 48


def test_a_twin_at_speed_10_renders_the_same_tables() -> None:
    assert tables.render(card_as_results(speed=10.0)) == tables.render(card_as_results())


def test_headers_and_notes_use_the_cards_wording() -> None:
    text = tables.render(card_as_results())
    card = CARD.read_text()
    header = "| " + " | ".join(tables.ALL_COLUMNS) + " |"
    assert header in text and header in card
    for note in (tables.OVER_NOTE, tables.TTFT_NOTE, tables.ALL_NOTE):
        assert note in text and note in card
    assert "| 8K | 73.0<br>471 ms TTFT | 116.6<br>717 ms TTFT |" in text
    assert (
        "| 251K | 14.1<br>1,271 ms TTFT | 28.4<br>1,754 ms TTFT | 49.8<br>2,599 ms TTFT "
        "| Over capacity |" in text
    )
    assert "| 8K context | 5,144 | 1,592 ms TTFT |" in text


def test_an_invalid_cell_shows_its_reason_and_no_number() -> None:
    r = card_as_results()
    bad = CellResult(
        context_label="8K",
        prompt_tokens=8192,
        concurrency=1,
        status="invalid",
        reason="1 request(s) failed, first: HTTP 500: boom",
    )
    r = r.model_copy(
        update={
            "cells": (bad, *[c for c in r.cells if (c.context_label, c.concurrency) != ("8K", 1)])
        }
    )
    text = tables.render(r)
    assert (
        "| Sustained decode | 8K | 1 | Invalid: 1 request(s) failed, first: HTTP 500: boom | "
        + " | ".join(["—"] * 8)
        + " |"
    ) in text
    assert "| 8K | Invalid | 116.6<br>717 ms TTFT |" in text


def test_a_not_ready_cell_is_marked_in_the_matrix() -> None:
    """Its readiness gate never held: the numbers stay, with the mark beside them."""
    r = card_as_results()
    cells = tuple(
        c.model_copy(update={"status": "not_ready", "reason": "gate never held"})
        if (c.context_label, c.concurrency) == ("8K", 1)
        else c
        for c in r.cells
    )
    text = tables.render(r.model_copy(update={"cells": cells}))
    row = next(line for line in text.splitlines() if line.startswith("| 8K | "))
    assert row.split(" | ")[1] == "73.0<br>471 ms TTFT<br>Not ready"
    assert "| Sustained decode | 8K | 1 | Not ready: gate never held | 73.0 |" in text


def _with_extras(r: Results, **extras: float) -> Results:
    from bench.results import CellExtras

    cells: list[CellResult] = []
    for i, c in enumerate(r.cells):
        if c.status == "valid":
            # Cells differ a little, as real ones do: the note gives the median and range.
            bump = {k: v + 0.01 * (i % 3) for k, v in extras.items()}
            cells.append(c.model_copy(update={"extras": CellExtras(**bump)}))
        else:
            cells.append(c)
    return r.model_copy(update={"cells": tuple(cells)})


def test_spec_decode_acceptance_is_a_note_under_the_tables() -> None:
    plain = tables.render(card_as_results())
    assert "Speculative decoding" not in plain  # no counters, no note
    r = _with_extras(
        card_as_results(), spec_decode_acceptance_rate=0.40, spec_decode_acceptance_length=1.80
    )
    text = tables.render(r)
    (note,) = [x for x in text.splitlines() if x.startswith("Speculative decoding")]
    assert "acceptance rate 41.0 % (cells range 40.0 % to 42.0 %)" in note
    assert "mean acceptance length 1.81 tokens per step (cells range 1.80 to 1.82)" in note
    assert "33 measured decode cells" in note
    # Under the tables: after the last table row, and the tables themselves unchanged.
    last_row = max(i for i, x in enumerate(text.splitlines()) if x.startswith("| Sustained"))
    assert text.splitlines().index(note) > last_row
    assert [x for x in text.splitlines() if x.startswith("|")] == [
        x for x in plain.splitlines() if x.startswith("|")
    ]


def test_the_launch_prefix_hit_rate_is_noted_when_recorded() -> None:
    r = _with_extras(card_as_results(), launch_prefix_cache_hit_rate=0.95)
    text = tables.render(r)
    assert "Prefix-cache hit rate of the C requests each decode cell launches together: " in text
    assert "96.0 % (cells range 95.0 % to 97.0 %) over 33 cells" in text
